"""Render the app icon (resources/icons/gpuplanner.svg) to the PNG sizes Linux desktops want.

    python packaging/render_icons.py

writes ``packaging/linux/icons/hicolor/<N>x<N>/apps/<APP_ID>.png`` for each size in :data:`SIZES`
and a copy of the SVG as ``.../scalable/apps/<APP_ID>.svg`` (the hicolor theme layout an installer
copies to ``/usr/share/icons`` or ``~/.local/share/icons``). Uses Qt's own SVG renderer, offscreen.
The PNGs are committed; run this again after the SVG changes.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP_ID = "io.github.gpuplanner.GpuPlanner"
SOURCE_SVG = ROOT / "resources" / "icons" / "gpuplanner.svg"
ICON_ROOT = ROOT / "packaging" / "linux" / "icons" / "hicolor"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def png_path(size: int) -> Path:
    return ICON_ROOT / f"{size}x{size}" / "apps" / f"{APP_ID}.png"


def svg_path() -> Path:
    return ICON_ROOT / "scalable" / "apps" / f"{APP_ID}.svg"


def render(source: Path = SOURCE_SVG) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(source))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {source} is not a valid SVG")
    written = []
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        target = png_path(size)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(target), "PNG"):
            raise SystemExit(f"render_icons: could not write {target}")
        written.append(target)
    svg_path().parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, svg_path())
    written.append(svg_path())
    del app
    return written


if __name__ == "__main__":
    for path in render():
        print(path.relative_to(ROOT))
