"""The Sweep place: budgeted searches."""
