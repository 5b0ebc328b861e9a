"""Work around a reference-count bug of PySide6 6.12 on Python 3.11: keep ``None``, ``True``... alive.

With PySide6 6.12.0 on CPython 3.11, every call of a Python override of a Qt virtual method that
returns ``None`` (``paintEvent``, ``QGraphicsItem.paint``, ``resizeEvent``, ...) drops one reference
to ``None`` that it never took. pyqtgraph overrides ``paint`` on every item, so a window of live plots
loses thousands of references a second and the interpreter aborts with
``Fatal Python error: none_dealloc: deallocating None`` after a few seconds to minutes (measured here:
``sys.getrefcount(None)`` falls by one per ``QWidget.paintEvent`` override call).

From Python 3.12 ``None`` is immortal and the bug is harmless. On 3.11 :func:`install` raises
the reference counts of ``None``, ``True``, ``False`` and the other shared singletons once by 2**40 (years of painting at any realistic rate), which is what
immortality does in 3.12. It runs once per process and is a no-op elsewhere.
"""

from __future__ import annotations

import ctypes
import sys

_BOOST = 1 << 40
_installed = False


def needed() -> bool:
    return sys.version_info < (3, 12) and sys.implementation.name == "cpython"


def _singletons() -> list[object]:
    """Objects CPython shares and never frees; the same bug hits ``True``/``False`` (overrides of
    ``event``/``sceneEvent`` return them) and, in principle, cached small ints and the empty tuple."""
    return [None, True, False, NotImplemented, Ellipsis, (), *range(-5, 257)]


def install() -> bool:
    """Make ``None`` effectively immortal on CPython < 3.12. Returns whether it changed anything."""
    global _installed
    if _installed or not needed():
        return False
    for obj in _singletons():
        refcnt = ctypes.c_ssize_t.from_address(id(obj))
        refcnt.value += _BOOST
    _installed = True
    return True
