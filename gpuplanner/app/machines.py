"""An own machine's amortised price saved as a ``[[machine]]`` table in the user's machines.toml: one way for
`gpuplanner catalog tco --save` and the window's File > Own hardware price."""

from __future__ import annotations

import json
from pathlib import Path

from gpuplanner.plan.catalog import Catalog, CatalogError, parse_machines, user_files
from gpuplanner.plan.ownership import AmortisedPrice
from gpuplanner.plan.skypilot import atomic_write

MachineValue = str | int | float
MachineFields = dict[str, MachineValue]  # one [[machine]] table: TOML keys and scalar values


class MachineSaveError(ValueError):
    """An own machine that cannot be added to machines.toml; the message says why (and names the file)."""


def _toml_value(value: MachineValue) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    return repr(value)


def machine_fields(name: str, gpu: str, price: AmortisedPrice, power_estimated: bool) -> MachineFields:
    """The ``[[machine]]`` table of an amortised price; an estimated power draw is left out, so it is
    estimated again from the catalog when read."""
    fields: MachineFields = {"name": name, "gpu": gpu, "gpu_count": price.hardware.gpus}
    inputs: dict[str, MachineValue | None] = price.to_dict()["inputs"]
    fields.update({k: v for k, v in inputs.items() if k != "gpus" and v is not None})
    if power_estimated:
        fields.pop("power_w", None)
    return fields


def save_machine(name: str, fields: MachineFields, catalog: Catalog, config_dir: Path | None = None) -> Path:
    """Append a [[machine]] table to the user's machines.toml (in ``config_dir``, default the app's), checked
    by parsing the result first; raises :class:`MachineSaveError` and leaves the file as it was."""
    path = user_files(config_dir)["machines"]
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if existing:
        try:
            machines = parse_machines(path, catalog)
        except CatalogError as exc:
            raise MachineSaveError(f"fix {path} first: {exc}") from None
        if any(m.instance_type == name for m in machines):
            raise MachineSaveError(f"a machine named {name!r} is already in {path}")
    table = "[[machine]]\n" + "".join(f"{key} = {_toml_value(value)}\n" for key, value in fields.items())
    text = existing + ("\n" if existing and not existing.endswith("\n\n") else "") + table
    probe = path.with_name(f".{path.name}.check")
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text(text, encoding="utf-8")
        parse_machines(probe, catalog)
    except CatalogError as exc:
        raise MachineSaveError(exc.message) from None
    finally:
        probe.unlink(missing_ok=True)
    atomic_write(path, text)
    return path
