"""Entry point of the frozen bundle: the same `gpuplanner` command a pip install gives."""

import sys

from gpuplanner.cli import main

if __name__ == "__main__":
    sys.exit(main())
