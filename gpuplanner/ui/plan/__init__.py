"""The Plan place: form, options table, details, cost chart, exports."""
