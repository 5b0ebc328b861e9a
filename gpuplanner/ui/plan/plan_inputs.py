"""How the planner form's texts become a :class:`PlanRequest` and back (no Qt here); the fields themselves
are :mod:`gpuplanner.ui.plan.plan_form_fields`.

Every field is keyed by the ``gpuplanner plan`` flag it stands for (``micro-batch``, ``budget-usd``
...), so a :class:`PlanInputError` raised by the engine (whose ``field`` is that flag name) lands at
the right widget. Texts become the same :class:`~gpuplanner.plan.inputs.PlanInputs` that
``gpuplanner plan`` builds from its flags (same parsers, ranges and exclusivity rules), and that
turns into the request: the window and the CLI cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpuplanner.app.plan_fields import FIELD_BY_FLAG
from gpuplanner.plan import example
from gpuplanner.plan.inputs import PlanInputs, inputs_document, parse_value, split_targets
from gpuplanner.plan.planner import PlanRequest
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.ui.plan.plan_form_fields import (
    ALWAYS_KEPT,
    CALIBRATION,
    CHOICE_KEYS,
    FIELD_BY_KEY,
    FIELDS,
    KEEP_CHOICES,
    MODEL_SOURCES,
    default_values,
)


def _number(key: str, text: str, field: str | None = None) -> int | float | None:
    """A numeric field's value (``field``: the input whose range applies, when it is not ``key``)."""
    text = text.strip()
    if not text:
        if FIELD_BY_KEY[key].optional:
            return None
        raise PlanInputError(key, "needs a value")
    return parse_value(field or key, text)


def inputs_from_values(values: Mapping[str, str]) -> PlanInputs:
    """The planner inputs of the form's texts; raises PlanInputError naming the field."""
    v = {**default_values(), **{k: str(x) for k, x in values.items()}}
    source = v["model-source"]
    model = model_config = params = None
    if source == "config.json":
        model_config = v["model-config"].strip()
        if not model_config:
            raise PlanInputError("model-config", "choose a config.json file")
    elif source == "parameter count":
        params = _number("params", v["params"])
    else:
        model = v["model"]
    numbers = {
        key: _number(key, v[key])
        for key, spec in FIELD_BY_KEY.items()
        if spec.numeric and key not in ("params", "samples")  # read above and below, as the source says
    }
    tokens = v["data-unit"] == "tokens"
    size = _number("samples", v["samples"], "tokens" if tokens else "samples")
    # the table's fields by PlanInputs name: choices as text, numbers as parse_value gives them
    fields: dict[str, Any] = {FIELD_BY_FLAG[key].attr: v[key] for key in CHOICE_KEYS}
    fields.update({FIELD_BY_FLAG[key].attr: value for key, value in numbers.items()})
    fields["samples"], fields["tokens"] = (None, size) if tokens else (size, None)
    return PlanInputs(
        model=model,
        model_config=model_config,
        params=params,
        lora_targets=split_targets(v["lora-targets"]),
        gpu=v["gpu"] or None,
        tf32=v["tf32"] == "on",
        compile=v["compile"] == "on",
        **fields,
    )


def request_from_values(values: Mapping[str, str]) -> PlanRequest:
    """Build the engine's request from the form's texts; raises PlanInputError naming the field."""
    return inputs_from_values(values).to_request(default_gpu=example.GPU)


def kept_settings(values: Mapping[str, str]) -> tuple[str, ...]:
    """The "Keep as given" names of the form's texts (comma-separated; the always kept ones included), in
    :data:`KEEP_CHOICES` order; raises PlanInputError naming the field for a name it does not know."""
    names = {name.strip() for name in values.get("keep", "").split(",") if name.strip()}
    known = [name for name, _, _ in KEEP_CHOICES]
    unknown = sorted(names - set(known))
    if unknown:
        raise PlanInputError("keep", f"unknown setting {unknown[0]!r}: one of {', '.join(known)}")
    return tuple(name for name in known if name in names or name in ALWAYS_KEPT)


def pinned_fields(values: Mapping[str, str]) -> tuple[str, ...]:
    """The TrainSetup fields the comparison keeps as given (``compare(pinned=...)``)."""
    field = {name: setup_field for name, setup_field, _ in KEEP_CHOICES}
    return tuple(field[name] for name in kept_settings(values) if name != "method")


def allows_qlora(values: Mapping[str, str]) -> bool:
    """Whether the comparison may turn a LoRA that nothing else fits into QLoRA (Method not kept)."""
    return "method" not in kept_settings(values)


def uses_calibration(values: Mapping[str, str]) -> bool:
    """Whether the plan takes the speeds measured in the run history (as ``gpuplanner plan`` without
    ``--no-calibration``)."""
    return values.get("calibration", CALIBRATION[0]) == CALIBRATION[0]


def inputs_with_form(request: PlanRequest, values: Mapping[str, str]) -> dict[str, Any]:
    """The plan document's ``inputs``: the CLI's names, plus the form's own texts to reopen it exactly."""
    document = inputs_document(request)
    document["form"] = {k: str(values.get(k, "")) for k in FIELD_BY_KEY}
    return document


def values_from_inputs(inputs: Mapping[str, Any]) -> dict[str, str]:
    """Form texts of a saved plan's inputs (its own ``form`` texts, else the CLI's names)."""
    form = inputs.get("form")
    if isinstance(form, Mapping):
        return {**default_values(), **{k: str(v) for k, v in form.items() if k in FIELD_BY_KEY}}
    values = default_values()
    for spec in FIELDS:
        name = spec.key.replace("-", "_")
        if name in inputs and inputs[name] is not None:
            value = inputs[name]
            values[spec.key] = (
                ("on" if value else "off")  # the switches (TF32, torch.compile) as their choice texts
                if isinstance(value, bool)
                else ",".join(value)
                if isinstance(value, list)
                else (f"{value:g}" if isinstance(value, float) else str(value))
            )
    if inputs.get("model_source") == "params" and inputs.get("params"):
        values["model-source"], values["params"] = "parameter count", str(inputs["params"])
    if inputs.get("tokens"):
        values["data-unit"], values["samples"] = "tokens", str(inputs["tokens"])
    return values


TRAINER_PRECISION = {"bf16-mixed": "bf16-mixed", "bf16": "bf16", "fp16-mixed": "fp16-mixed", "fp32": "fp32"}


def trainer_settings(
    request: PlanRequest,
    values: Mapping[str, str],
    *,
    plan_id: int | None,
    price_per_gpu_hour: float | None,
    setup: TrainSetup | None = None,
) -> dict[str, Any]:
    """The settings "Launch this plan" hands to the launch dialog (names the Runs pane expects).

    ``setup`` overrides the request's settings: the ones compare fitted to the plan's GPU
    (:func:`gpuplanner.planning.launch_setup`).
    """
    setup = setup or request.setup
    source = values.get("model-source", MODEL_SOURCES[0])
    epochs = request.workload.epochs
    return {
        "model": request.model.name if source == "preset" else None,
        "model_config": values.get("model-config") or None if source == "config.json" else None,
        "method": setup.method,
        "lora_rank": setup.lora_rank if setup.uses_adapters else None,
        "precision": TRAINER_PRECISION[setup.precision],
        "micro_batch": setup.micro_batch,
        "grad_accum": setup.grad_accum,
        "seq_len": setup.seq_len,
        "grad_checkpointing": setup.grad_checkpointing,
        "epochs": max(1, math.ceil(epochs)),
        "gpus": setup.gpus,
        "gpu": request.gpu,
        "price_per_gpu_hour": price_per_gpu_hour,
        "budget_usd": request.budget_usd,
        "plan_id": plan_id,
        "spot": request.pricing_mode == "spot",
        # the trainer's FSDP2 sharding (its only sharding besides DDP), and TF32 as planned (fp32 only)
        "extra": " ".join(
            [
                *(["--fsdp"] if setup.sharding == "fsdp" and setup.gpus > 1 else []),
                *(["--tf32 on"] if setup.tf32 else []),
            ]
        ),
    }
