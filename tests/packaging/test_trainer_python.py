"""Finding a Python that can run the trainer, with real interpreters: this one has torch, a fresh venv has not."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from gpuplanner import trainer_python as tp
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.xdist_group("trainer_python")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real interpreter without torch: a fresh venv without pip."""
    env_dir = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    return tp.venv_python(env_dir)


def _wrapper(folder: Path, target: str | Path) -> Path:
    """A `python3` on a private PATH that runs `target` (a venv's python stays that venv's)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python3"
    script.write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
    script.chmod(0o755)
    return script


def _freeze(monkeypatch: pytest.MonkeyPatch, meipass: Path) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(meipass), raising=False)


def test_check_python_on_real_interpreters(bare_python: Path, tmp_path: Path) -> None:
    assert tp.check_python(sys.executable) is None
    reason = tp.check_python(bare_python)
    assert reason is not None and "No module named 'torch'" in reason
    missing = tp.check_python(tmp_path / "no-such-python")
    assert missing is not None and "cannot run it" in missing


def test_explicit_variable_is_used_and_not_second_guessed(bare_python: Path) -> None:
    found = tp.find_trainer_python(environ={tp.ENV_VAR: sys.executable, "PATH": os.environ["PATH"]})
    assert found.python == tp.TrainerPython(Path(sys.executable), "env")
    refused = tp.find_trainer_python(environ={tp.ENV_VAR: str(bare_python), "PATH": os.environ["PATH"]})
    assert refused.python is None
    assert tp.ENV_VAR in refused.message and "torch" in refused.message


def test_current_interpreter_first_when_not_frozen(tmp_path: Path) -> None:
    found = tp.find_trainer_python(environ={"PATH": str(tmp_path)})
    assert found.python is not None and found.python.source == "current"
    assert found.python.executable == Path(sys.executable)


def test_frozen_app_uses_python3_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _freeze(monkeypatch, tmp_path / "meipass")
    bin_dir = tmp_path / "bin"
    wrapper = _wrapper(bin_dir, sys.executable)
    found = tp.find_trainer_python(environ={"PATH": str(bin_dir)})
    assert found.python == tp.TrainerPython(wrapper, "path")


def test_frozen_app_without_torch_anywhere_says_how_to_make_one(
    bare_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _freeze(monkeypatch, tmp_path / "meipass")
    bin_dir = tmp_path / "bin"
    _wrapper(bin_dir, bare_python)
    lookup = tp.find_trainer_python(environ={"PATH": str(bin_dir)})
    assert lookup.python is None
    assert "No module named 'torch'" in lookup.message
    assert f"python3 -m venv {tp.default_venv_dir()}" in lookup.message
    assert "pip install torch transformers peft" in lookup.message
    assert tp.ENV_VAR in lookup.message


def test_the_apps_own_trainer_venv_is_tried_before_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _freeze(monkeypatch, tmp_path / "meipass")
    own = tp.default_venv_dir()
    assert own.is_relative_to(Path(os.environ["GPUPLANNER_DATA_DIR"]))
    # Stand-in for a venv that has torch: a script at the venv's python path running this interpreter.
    target = tp.venv_python(own)
    target.parent.mkdir(parents=True)
    target.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    target.chmod(0o755)
    bin_dir = tmp_path / "bin"
    _wrapper(bin_dir, sys.executable)
    found = tp.find_trainer_python(environ={"PATH": str(bin_dir)})
    assert found.python == tp.TrainerPython(target, "trainer-venv")


def test_trainer_env_runs_the_shipped_sources_from_elsewhere(tmp_path: Path) -> None:
    env = tp.trainer_env()
    assert env["PYTHONPATH"] == str(REPO_ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0.1.0"


def test_child_env_of_the_frozen_app_restores_the_users_library_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _freeze(monkeypatch, tmp_path)
    env = tp.child_env(
        {
            "LD_LIBRARY_PATH": f"{tmp_path}:/opt/lib",
            "LD_LIBRARY_PATH_ORIG": "/opt/lib",
            "PYTHONHOME": str(tmp_path),
            "PATH": "/usr/bin",
        }
    )
    assert env == {"LD_LIBRARY_PATH": "/opt/lib", "PATH": "/usr/bin"}
    assert "LD_LIBRARY_PATH" not in tp.child_env({"LD_LIBRARY_PATH": str(tmp_path)})


def test_create_trainer_venv_runs_venv_then_pip(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    python = tp.create_trainer_venv(tmp_path / "tv", base_python="/usr/bin/python3", run=run)
    assert python == tmp_path / "tv" / "bin" / "python"
    assert calls == [
        ["/usr/bin/python3", "-m", "venv", str(tmp_path / "tv")],
        [str(python), "-m", "pip", "install", "--upgrade", "torch", "transformers", "peft"],
    ]


def test_create_trainer_venv_reports_pips_failure(tmp_path: Path) -> None:
    def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        failed = "pip" in argv
        return subprocess.CompletedProcess(
            argv, 1 if failed else 0, "", "ERROR: no matching distribution" if failed else ""
        )

    with pytest.raises(RuntimeError, match="no matching distribution"):
        tp.create_trainer_venv(tmp_path / "tv", base_python=sys.executable, run=run)


def test_create_trainer_venv_really_makes_a_venv(tmp_path: Path) -> None:
    # The real venv step; pip is stubbed to `python -c pass` by passing no packages through a wrapper run.
    def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if "pip" in argv:
            argv = [argv[0], "-c", "pass"]
        return subprocess.run(argv, **kwargs)  # type: ignore[call-overload, no-any-return]

    python = tp.create_trainer_venv(tmp_path / "tv", base_python=sys.executable, run=run)
    assert python.exists() and (tmp_path / "tv" / "pyvenv.cfg").is_file()
