"""The Runs place: live runs, their telemetry and plots."""
