"""Find a Python interpreter that can run the bundled trainer locally (it needs torch and transformers).

The desktop app itself never imports torch: the frozen bundle leaves it out (it would be gigabytes),
and a pip install does not require it. To train on this machine the app runs
``<python> -m trainer train ...`` with the trainer's sources on ``PYTHONPATH``
(:func:`trainer_env`), using the first of these interpreters that can ``import torch, transformers``:

1. ``$GPUPLANNER_TRAINER_PYTHON`` when set (then only that one: an explicit choice is not second-guessed);
2. the interpreter running the app, when it is a normal Python (not the frozen bundle);
3. the app's own trainer environment, ``<data dir>/trainer-venv`` (:func:`create_trainer_venv` makes it);
4. ``python3`` on ``PATH``.

No Qt here: the launcher, the CLI and the self-test share it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuplanner.paths import data_dir
from gpuplanner.resources import is_frozen, trainer_source_dir

ENV_VAR = "GPUPLANNER_TRAINER_PYTHON"
REQUIRED_MODULES = ("torch", "transformers")
VENV_PACKAGES = ("torch", "transformers", "peft")
CHECK_TIMEOUT_S = 90.0
# Variables the PyInstaller bootloader or a virtual environment sets for *this* process that must
# not leak into a different interpreter.
_PYTHON_VARS = ("PYTHONHOME", "PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONEXECUTABLE")


@dataclass(frozen=True)
class TrainerPython:
    """An interpreter that imported torch and transformers; ``source`` says how it was found."""

    executable: Path
    source: str  # "env", "current", "trainer-venv" or "path"


@dataclass(frozen=True)
class Lookup:
    """The outcome of :func:`find_trainer_python`: the interpreter, or why none was found."""

    python: TrainerPython | None
    message: str  # what was used, or what was tried and how to fix it


def default_venv_dir() -> Path:
    """The app's own trainer environment: ``<data dir>/trainer-venv``."""
    return data_dir() / "trainer-venv"


def venv_python(venv_dir: Path) -> Path:
    if sys.platform == "win32":
        return venv_dir / "Scripts" / "python.exe"
    return venv_dir / "bin" / "python"


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for a *different* Python: without this process's Python and bundle settings.

    The frozen app's bootloader points ``LD_LIBRARY_PATH`` at the bundle's own libraries (keeping the
    user's value in ``LD_LIBRARY_PATH_ORIG``); a system Python must not load those.
    """
    env = dict(os.environ if base is None else base)
    for name in _PYTHON_VARS:
        env.pop(name, None)
    if is_frozen():
        for var in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "LIBPATH"):
            original = env.pop(var + "_ORIG", None)
            if original is not None:
                env[var] = original
            else:
                env.pop(var, None)
    return env


def trainer_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`child_env` plus ``PYTHONPATH`` so that ``python -m trainer`` runs the shipped sources."""
    env = child_env(base)
    env["PYTHONPATH"] = str(trainer_source_dir().parent)
    return env


def check_python(python: str | os.PathLike[str], *, timeout: float = CHECK_TIMEOUT_S) -> str | None:
    """None when ``python`` can import torch and transformers; otherwise the reason it cannot."""
    code = "import " + ", ".join(REQUIRED_MODULES)
    try:
        result = subprocess.run(
            [os.fspath(python), "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"{python}: importing {', '.join(REQUIRED_MODULES)} took longer than {timeout:.0f} s"
    except OSError as exc:
        return f"{python}: cannot run it ({exc.strerror or exc})"
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return f"{python}: {lines[-1] if lines else f'exit status {result.returncode}'}"
    return None


def _candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if not is_frozen() and sys.executable:
        found.append((sys.executable, "current"))
    own = venv_python(default_venv_dir())
    if own.exists():
        found.append((str(own), "trainer-venv"))
    on_path = shutil.which("python3", path=environ.get("PATH", os.defpath))
    if on_path:
        found.append((on_path, "path"))
    return found


def how_to_create(venv_dir: Path | None = None) -> str:
    """The commands that make a trainer environment by hand (what :func:`create_trainer_venv` runs)."""
    venv_dir = venv_dir or default_venv_dir()
    pip = venv_python(venv_dir).with_name("pip")
    return (
        f"python3 -m venv {venv_dir} && {pip} install {' '.join(VENV_PACKAGES)}"
        f" (or set {ENV_VAR} to a Python that has them)"
    )


def find_trainer_python(*, environ: Mapping[str, str] | None = None, timeout: float = CHECK_TIMEOUT_S) -> Lookup:
    """The first interpreter that can run the trainer (see the module docstring for the order)."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(ENV_VAR, "").strip()
    if explicit:
        reason = check_python(explicit, timeout=timeout)
        if reason is None:
            return Lookup(TrainerPython(Path(explicit), "env"), f"{ENV_VAR}={explicit}")
        return Lookup(None, f"{ENV_VAR} is set but cannot run the trainer: {reason}")
    tried: list[str] = []
    seen: set[str] = set()
    for python, source in _candidates(environ):
        key = os.path.realpath(python)
        if key in seen:
            continue
        seen.add(key)
        reason = check_python(python, timeout=timeout)
        if reason is None:
            return Lookup(TrainerPython(Path(python), source), f"{python} ({source})")
        tried.append(reason)
    tried_text = "; ".join(tried) if tried else "no python3 found"
    return Lookup(
        None, f"no Python with {' and '.join(REQUIRED_MODULES)} found ({tried_text}). Create one: {how_to_create()}"
    )


def create_trainer_venv(
    venv_dir: Path | None = None,
    *,
    packages: Sequence[str] = VENV_PACKAGES,
    base_python: str | None = None,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    timeout: float = 3600.0,
) -> Path:
    """Make ``venv_dir`` (default :func:`default_venv_dir`) and pip-install the trainer's packages.

    Returns the new interpreter's path. ``base_python`` defaults to ``python3`` on PATH (in the frozen
    app ``sys.executable`` is the app, not a Python). Raises ``RuntimeError`` with pip's last lines.
    """
    venv_dir = venv_dir or default_venv_dir()
    if base_python is None:
        base_python = sys.executable if not is_frozen() else (shutil.which("python3") or "")
    if not base_python:
        raise RuntimeError("no python3 on PATH to create the trainer environment with; install Python 3.11+")
    env = child_env()
    steps = [
        [base_python, "-m", "venv", str(venv_dir)],
        [str(venv_python(venv_dir)), "-m", "pip", "install", "--upgrade", *packages],
    ]
    for argv in steps:
        result = run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-5:])
            raise RuntimeError(f"{' '.join(argv[:3])} failed (exit {result.returncode}): {tail}")
    return venv_python(venv_dir)
