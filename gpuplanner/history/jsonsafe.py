"""JSON that is always valid: non-finite numbers become null, and the document says why.

Python's ``json`` writes ``NaN`` and ``Infinity``, which no strict JSON reader accepts. A history may
hold such numbers (rows stored before the parser refused them, or figures derived from extreme
ones), so every JSON document the ``runs`` commands print goes through :func:`dumps`: each object
whose fields held a non-finite number gets them as ``null`` and a ``null_reasons`` object naming
each such field and the value it held (``"final_loss": "-inf in the history"``).
"""

from __future__ import annotations

import json
import math
from typing import Any

REASONS_KEY = "null_reasons"


def _reason(value: float) -> str:
    return f"{'nan' if math.isnan(value) else ('inf' if value > 0 else '-inf')} in the history (not a finite number)"


def finite(value: Any) -> Any:
    """A copy of ``value`` with every non-finite float replaced by None; dicts that had one gain
    :data:`REASONS_KEY`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        reasons: dict[str, str] = {}
        for key, item in value.items():
            if isinstance(item, float) and not math.isfinite(item):
                out[key] = None
                reasons[str(key)] = _reason(item)
            else:
                out[key] = finite(item)
        if reasons:
            out[REASONS_KEY] = {**(out.get(REASONS_KEY) or {}), **reasons}
        return out
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`finite` ``(value)``: valid JSON whatever the numbers."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def dump(value: Any, out: Any, **kwargs: Any) -> None:
    out.write(dumps(value, **kwargs))
