"""What the frozen app needs: the payload from trainer_source_dir(), the interpreter from trainer_python."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from gpuplanner.launch import local_backend, payload
from gpuplanner.launch.hosts import Host
from gpuplanner.launch.local_backend import LocalBackend, TrainerPythonMissing
from gpuplanner.resources import trainer_source_dir


@pytest.fixture
def copied_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the trainer sources that trainer_source_dir() returns (as the bundle's payload/trainer)."""
    copy = tmp_path / "bundle" / "payload" / "trainer"
    shutil.copytree(trainer_source_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "bundle_marker.py").write_text("MARK = 1\n")
    monkeypatch.setattr(payload, "trainer_source_dir", lambda: copy)
    monkeypatch.setattr(local_backend.trainer_python, "trainer_source_dir", lambda: copy, raising=False)
    return copy


class _FakeSftp:
    """Just enough of paramiko's SFTPClient: a local folder."""

    def __init__(self) -> None:
        self.put_calls: list[tuple[str, str]] = []

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def mkdir(self, path: str, mode: int = 0o777) -> None:
        os.mkdir(path, mode)

    def put(self, local: str, remote: str) -> None:
        self.put_calls.append((local, remote))
        shutil.copyfile(local, remote)

    def open(self, path: str, mode: str = "r"):
        return open(path, mode)

    def posix_rename(self, old: str, new: str) -> None:
        os.rename(old, new)

    def listdir_attr(self, path: str):
        return [
            type("A", (), {"filename": n, "st_mode": os.stat(os.path.join(path, n)).st_mode})()
            for n in os.listdir(path)
        ]

    def remove(self, path: str) -> None:
        os.remove(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)


def test_payload_upload_and_hash_use_trainer_source_dir(copied_trainer: Path, tmp_path: Path) -> None:
    before = payload.content_hash()
    sftp = _FakeSftp()
    remote = tmp_path / "remote"
    remote.mkdir()
    uploaded, did = payload.ensure_remote(sftp, str(remote))
    assert did and uploaded.content_hash == before
    sources = {Path(local) for local, _ in sftp.put_calls if Path(local).name != "wrapper.py"}
    assert sources and all(p.is_relative_to(copied_trainer) for p in sources)  # nothing from trainer.__file__
    assert (Path(uploaded.pythonpath) / "trainer" / "bundle_marker.py").exists()
    assert payload.local_payload().pythonpath == str(copied_trainer.parent)
    # The hash follows the sources it uploads.
    (copied_trainer / "bundle_marker.py").write_text("MARK = 2  # changed\n")
    assert payload.content_hash() != before


def _fake_python(path: Path) -> Path:
    """An executable 'python' that records its argv and env, then runs the real interpreter."""
    log = path.with_suffix(".log")
    path.write_text(f'#!/bin/sh\necho "$PYTHONPATH" >> {log}\nexec {sys.executable} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_local_launch_uses_gpuplanner_trainer_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copied_trainer: Path
) -> None:
    python = _fake_python(tmp_path / "trainer-python")
    monkeypatch.setenv("GPUPLANNER_TRAINER_PYTHON", str(python))
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.chdir(tmp_path)  # "python -c" puts the working directory (a checkout) first on sys.path
    backend = LocalBackend(Host(name="local", kind="local"), tmp_path / "runs")
    assert backend.python == str(python)
    run_dir = tmp_path / "runs" / "1"
    pgid = backend.start(str(run_dir), "node0", ["-c", "import trainer, sys; print(trainer.__file__)"], {"X_Y": "1"})
    deadline = 60 + os.times().elapsed
    while backend.state(str(run_dir), "node0", pgid).alive and os.times().elapsed < deadline:
        pass
    assert backend.state(str(run_dir), "node0", pgid).exit_code == 0, (run_dir / "node0.err").read_text()
    assert (run_dir / "node0.out").read_text().strip() == str(copied_trainer / "__init__.py")  # shipped sources
    assert python.with_suffix(".log").read_text().split() == [str(copied_trainer.parent)] * 2  # wrapper + trainer


def test_explicit_host_python_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANNER_TRAINER_PYTHON", str(tmp_path / "missing-python"))
    assert LocalBackend(Host(name="local", kind="local", python="/opt/py/bin/python3")).python == "/opt/py/bin/python3"


def test_no_trainer_python_fails_the_launch_with_how_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplanner.launch.manager import RunError, RunManager

    monkeypatch.setenv("GPUPLANNER_TRAINER_PYTHON", str(tmp_path / "missing-python"))
    with pytest.raises(TrainerPythonMissing, match="GPUPLANNER_TRAINER_PYTHON is set but cannot run"):
        LocalBackend(Host(name="local", kind="local")).python  # noqa: B018
    manager = RunManager(tmp_path / "h.sqlite", local_runs_root=tmp_path / "runs")
    with pytest.raises(RunError, match="cannot run the trainer"):
        manager.launch("local", ["--model-config", "x.json"])
    assert manager.live_runs() == []
    manager.close()
