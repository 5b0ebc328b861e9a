"""What the launch dialog remembers: the values typed in the last dialog that was accepted or measured
(in the window's settings file), and how they merge with defaults and a plan's settings when it opens
(:func:`merged_settings`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

from gpuplanner.ui.runs.launch_request import demo_dir

REMEMBERED_KEY = "launch_dialog/values"
NOT_REMEMBERED = ("name", "price_per_gpu_hour", "host_checked")  # per run, or the host's (not the user's)
MODEL_KEYS = ("model", "model_config")


def settings_store() -> QSettings:
    from gpuplanner.ui.settings import app_settings  # the window's one settings file

    return app_settings()


def remembered_values() -> dict[str, Any]:
    """The values typed in the last launch dialog that was accepted or measured (empty when none)."""
    raw = settings_store().value(REMEMBERED_KEY)
    if not raw:
        return {}
    try:
        values = json.loads(str(raw))
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}


def remember_values(values: dict[str, Any]) -> None:
    store = settings_store()
    store.setValue(REMEMBERED_KEY, json.dumps({k: v for k, v in values.items() if k not in NOT_REMEMBERED}))
    store.sync()


def _is_demo_value(value: Any) -> bool:
    """Whether a remembered value names the shipped demo's files (its model config or corpus)."""
    demo = demo_dir().resolve()
    paths = value if isinstance(value, list) else [value]
    for path in paths:
        if isinstance(path, str) and path:
            try:
                if Path(path).resolve().is_relative_to(demo):
                    return True
            except (OSError, ValueError):
                continue
    return False


def merged_settings(remembered: dict[str, Any], given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """What the dialog opens with: ``defaults`` < what was typed last time < the values it was given (a plan).

    A given value of None or "" does not hide a remembered one; a given model (id or config) replaces both
    remembered model fields, so a plan's model never mixes with the last run's. A plan's settings (they carry
    its ``plan_id``) never take the shipped demo's model or corpus from the last run: the plan did not use
    them."""
    if given.get("plan_id") is not None:
        remembered = {k: v for k, v in remembered.items() if not _is_demo_value(v)}
    merged = {**defaults, **remembered}
    if any(given.get(k) for k in MODEL_KEYS):
        for key in MODEL_KEYS:
            merged.pop(key, None)
    merged.update({k: v for k, v in given.items() if v is not None and v != "" and v != []})
    return merged
