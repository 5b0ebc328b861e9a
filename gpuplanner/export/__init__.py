"""Tables and charts of plans and runs as CSV, JSON, Markdown and plain text (no Qt)."""
