"""The planning engine: pure functions and dataclasses (no Qt, no network, no database)."""
