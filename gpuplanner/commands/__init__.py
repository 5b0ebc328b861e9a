"""Subcommands of `gpuplanner`: each module defines ``register(subparsers)``."""
