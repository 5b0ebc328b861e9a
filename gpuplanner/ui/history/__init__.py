"""The History place: finished runs, comparisons, searches and spend."""
