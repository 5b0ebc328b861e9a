"""Build the frozen one-folder app with PyInstaller: ``python packaging/build.py [--dist DIR]``.

Writes ``DIR/gpuplanner/`` (default ``dist/``) and prints the bundle's size. The work folder is
``build/pyinstaller``. Run it with the project's virtual environment (``make dist`` does), so the
bundle holds the same versions the tests ran against.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "packaging" / "gpuplanner.spec"


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="output folder (default dist/)")
    parser.add_argument("--work", default=str(ROOT / "build" / "pyinstaller"), help="PyInstaller work folder")
    args = parser.parse_args(argv)
    started = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--log-level",
        "WARN",
        "--distpath",
        args.dist,
        "--workpath",
        args.work,
        str(SPEC),
    ]
    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    result = subprocess.run(cmd, cwd=ROOT, env=env)
    if result.returncode != 0:
        print(f"build: PyInstaller failed (exit {result.returncode})", file=sys.stderr)
        return result.returncode
    bundle = Path(args.dist) / "gpuplanner"
    size = folder_size(bundle)
    print(f"build: {bundle} {size / 2**20:.0f} MiB in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
