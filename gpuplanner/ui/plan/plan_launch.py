""" "Launch this plan" for the option the Plan pane's details describe (no Qt).

:func:`option_settings` is the launch dialog's prefill: the described option's GPU type and count, its
pricing and price, and its fitted training settings (method, precision, checkpointing, micro-batch,
accumulation, sequence length, model). :func:`with_host` adds the host to run on: one of the user's hosts
whose probed GPUs are that type and at least that many, or, when none is, a note saying so (the dialog
keeps the user's choice of host).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuplanner.launch.hosts import Host
from gpuplanner.plan.catalog import Catalog
from gpuplanner.planning import PlanResult, launch_setup
from gpuplanner.ui.plan.plan_details import Focus, focus_request, price_choice
from gpuplanner.ui.plan.plan_inputs import trainer_settings


def option_settings(result: PlanResult, focus: Focus, plan_id: int | None) -> dict[str, Any]:
    """The launch dialog's settings for the described option of ``result`` (saved as ``plan_id``)."""
    request = focus_request(focus, result.request)
    if focus.row is not None:
        setup, fitted = focus.plan.setup, focus.row.fitted
    else:  # nothing in the table can be used: the form's plan, with what the table fitted to its option
        setup, fitted = launch_setup(result.request, result.plan, result.rows)
    choice = price_choice(focus)
    settings = trainer_settings(
        request,
        result.values,
        plan_id=plan_id,
        price_per_gpu_hour=choice.usd_per_gpu_hour if choice is not None else None,
        setup=setup,
    )
    if fitted:
        settings["fitted"] = list(fitted)
    return settings


def host_gpu(host: Host, catalog: Catalog) -> str | None:
    """The catalog's name of the GPUs a host's last probe found (None: not probed, or not in the catalog)."""
    if not host.gpu_type:
        return None
    spec = catalog.find_gpu(host.gpu_type)
    return spec.name if spec is not None else None


def with_host(settings: dict[str, Any], hosts: Sequence[Host], catalog: Catalog) -> dict[str, Any]:
    """``settings`` with ``host``: the first of ``hosts`` with at least ``gpus`` of the plan's ``gpu``; or,
    when none has them, ``host_note`` saying which come nearest (the plan's GPU in smaller numbers)."""
    gpu, gpus = settings.get("gpu"), int(settings.get("gpus") or 1)
    if not gpu:
        return settings
    same = [h for h in hosts if host_gpu(h, catalog) == gpu]
    enough = [h for h in same if (h.gpu_count or 0) >= gpus]
    if enough:
        return {**settings, "host": enough[0].name}
    note = f"None of your hosts has {gpus} x {gpu}"
    if same:
        note += " (" + ", ".join(f"{h.display_name}: {h.gpu_count or '?'} x {gpu}" for h in same) + ")"
    note += ": choose where to run, or add the machine in the Hosts pane (probing it records its GPUs)."
    return {**settings, "host_note": note}
