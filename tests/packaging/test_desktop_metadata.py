"""The Linux desktop files validate with Debian's validators; the icon PNGs match the SVG at every size."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LINUX = REPO_ROOT / "packaging" / "linux"
APP_ID = "io.github.gpuplanner.GpuPlanner"
DESKTOP = LINUX / f"{APP_ID}.desktop"
METAINFO = LINUX / f"{APP_ID}.metainfo.xml"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: apt-get install desktop-file-utils appstream (.ci/run installs them)")
    return path


def test_desktop_file_validates() -> None:
    result = subprocess.run([_tool("desktop-file-validate"), str(DESKTOP)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stdout.lower()


def test_desktop_file_names_the_command_and_icon() -> None:
    entries = dict(line.split("=", 1) for line in DESKTOP.read_text().splitlines() if "=" in line)
    assert entries["Exec"].split()[0] == "gpuplanner"
    assert entries["Icon"] == APP_ID
    assert entries["Type"] == "Application"


def test_metainfo_validates() -> None:
    result = subprocess.run(
        [_tool("appstreamcli"), "validate", "--no-net", str(METAINFO)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_metainfo_matches_the_desktop_file_and_the_readme_screenshots() -> None:
    root = ET.parse(METAINFO).getroot()
    assert root.findtext("id") == APP_ID
    assert root.find("launchable").text == DESKTOP.name  # type: ignore[union-attr]
    urls = [image.text or "" for image in root.iter("image")]
    assert len(urls) >= 4
    names = [url.rsplit("/", 1)[-1] for url in urls]
    for url, name in zip(urls, names):
        assert url.startswith("https://") and url.endswith(f"docs/screenshots/{name}")
    shots = REPO_ROOT / "docs" / "screenshots"
    missing = [name for name in names if not (shots / name).is_file()]
    assert not missing, f"metainfo screenshots missing from docs/screenshots/: {missing}"


def test_icon_pngs_exist_at_every_size() -> None:
    from PySide6.QtGui import QImage

    for size in SIZES:
        path = LINUX / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        image = QImage(str(path))
        assert not image.isNull(), path
        assert (image.width(), image.height()) == (size, size), path
        assert image.hasAlphaChannel()
    scalable = LINUX / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    assert re.search(r"<svg\b", scalable.read_text())


def test_icon_pngs_are_rendered_from_the_current_svg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qapp: object
) -> None:
    """Fails when resources/icons/gpuplanner.svg changed: run `python packaging/render_icons.py`.

    ``qapp`` makes pytest-qt's QApplication the one the renderer reuses: a QGuiApplication created
    here would outlive the test and break every widget test after it in the same worker."""
    import importlib.util

    from PySide6.QtGui import QImage

    spec = importlib.util.spec_from_file_location("render_icons", REPO_ROOT / "packaging" / "render_icons.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ICON_ROOT", tmp_path / "hicolor")
    module.render()
    assert (tmp_path / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg").read_bytes() == (
        LINUX / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    ).read_bytes(), "the committed SVG copy is stale: run python packaging/render_icons.py"
    for size in SIZES:
        rel = Path(f"{size}x{size}") / "apps" / f"{APP_ID}.png"
        fresh = QImage(str(tmp_path / "hicolor" / rel))
        committed = QImage(str(LINUX / "icons" / "hicolor" / rel))
        assert fresh == committed, f"{rel} is stale: run python packaging/render_icons.py"


def test_spec_references_existing_files() -> None:
    text = (REPO_ROOT / "packaging" / "gpuplanner.spec").read_text()
    assert '"torch"' in text and '"QtWebEngineCore"' in text  # left out of the bundle
    assert (REPO_ROOT / "packaging" / "gpuplanner_entry.py").is_file()
    assert (REPO_ROOT / "gpuplanner" / "launch" / "wrapper.py").is_file()
