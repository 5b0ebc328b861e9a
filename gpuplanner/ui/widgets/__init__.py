"""Widgets and renderers several places share."""
