"""One function finds resources/ and the trainer's sources in a checkout, an installed wheel and the frozen bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuplanner import resources
from tests.conftest import REPO_ROOT


def _fake_trainer(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("__init__.py", "__main__.py", "protocol.py"):
        (folder / name).write_text("")
    return folder


def _freeze(monkeypatch: pytest.MonkeyPatch, meipass: Path) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(meipass), raising=False)


def test_checkout_layout() -> None:
    assert not resources.is_frozen()
    assert resources.resources_dir() == REPO_ROOT / "resources"
    assert resources.resource_path("catalog", "gpus.toml").is_file()
    assert resources.trainer_source_dir() == REPO_ROOT / "trainer"


def test_wheel_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An installed wheel: site-packages/gpuplanner/_resources, and no resources/ beside the package.
    package = tmp_path / "site-packages" / "gpuplanner"
    (package / "_resources" / "catalog").mkdir(parents=True)
    (package / "_resources" / "catalog" / "gpus.toml").write_text("")
    monkeypatch.setattr(resources, "_PACKAGE_DIR", package)
    assert resources.resources_dir() == package / "_resources"
    assert resources.resource_path("catalog", "gpus.toml") == package / "_resources" / "catalog" / "gpus.toml"
    with pytest.raises(FileNotFoundError, match="missing resource file"):
        resources.resource_path("catalog", "nope.csv")


def test_frozen_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meipass = tmp_path / "_internal"
    (meipass / "resources" / "icons").mkdir(parents=True)
    (meipass / "resources" / "icons" / "app.svg").write_text("<svg/>")
    payload = _fake_trainer(meipass / "payload" / "trainer")
    _freeze(monkeypatch, meipass)
    assert resources.is_frozen()
    assert resources.resources_dir() == meipass / "resources"
    assert resources.resource_path("icons", "app.svg").read_text() == "<svg/>"
    # The payload copy wins over the importable package: it is what gets uploaded and run.
    assert resources.trainer_source_dir() == payload.resolve()


def test_frozen_layout_without_payload_falls_back_to_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _freeze(monkeypatch, tmp_path)
    assert resources.trainer_source_dir() == REPO_ROOT / "trainer"


def test_missing_everything_names_the_places_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "_PACKAGE_DIR", tmp_path / "pkg")
    _freeze(monkeypatch, tmp_path / "meipass")
    with pytest.raises(FileNotFoundError) as info:
        resources.resources_dir()
    assert str(tmp_path / "meipass" / "resources") in str(info.value)
    assert str(tmp_path / "pkg" / "_resources") in str(info.value)


def test_a_foreign_trainer_package_is_not_taken_for_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Someone else's top-level `trainer` package (no protocol.py) first on sys.path.
    other = tmp_path / "other" / "trainer"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "__main__.py").write_text("")
    monkeypatch.syspath_prepend(str(other.parent))
    monkeypatch.delitem(sys.modules, "trainer", raising=False)
    assert resources.trainer_source_dir() == REPO_ROOT / "trainer"
