"""The application layer: Qt-free, argparse-free logic that the CLI (``gpuplanner.commands``) and the window
(``gpuplanner.ui``) both call, as siblings above it: typed requests instead of argv strings, and the
presenters of figures both front ends show (the ETA, the comparison row, run status words)."""
