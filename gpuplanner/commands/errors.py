"""The error every subcommand raises for bad command-line input (the entry point prints it)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad command-line input; the message is one line that names the flag and what is allowed."""
