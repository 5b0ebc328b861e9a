"""Step telemetry from your own training code for GPU Planner (standard library only; one file).

GPU Planner's monitor (``gpuplanner run --host H -- COMMAND``) puts this module on ``PYTHONPATH`` and
names a file in ``$GPUPLANNER_TELEMETRY_FILE``; the records written here reach the run's history with
its spend, so tokens/s, loss and planned-against-actual work as for the bundled trainer::

    import gpuplanner_telemetry as gt

    for step in range(1, steps + 1):
        loss = train_one_step(batch)
        gt.log_step(step, tokens=batch_tokens, samples=batch_size, loss=loss)
    gt.log_eval(step, eval_loss=evaluate())

``tokens`` and ``samples`` are what this step processed (the module adds them up); give
``tokens_total``/``samples_total`` instead when you keep your own totals (after a resume). Only the
process of rank 0 (``$RANK`` unset or 0) writes. Outside GPU Planner every call does nothing.

Ready callbacks: ``gpuplanner_telemetry.HFCallback`` (a ``transformers.TrainerCallback``) and
``gpuplanner_telemetry.LightningCallback`` (a Lightning ``Callback``), imported only when used.
Exit with :data:`EXIT_RESUME` (75) after saving a checkpoint on SIGTERM: GPU Planner resumes the run.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
import time
from typing import Any, Literal, overload

ENV_FILE = "GPUPLANNER_TELEMETRY_FILE"
EXIT_RESUME = 75
__all__ = ["EXIT_RESUME", "log_step", "log_eval", "enabled", "checkpoint_dir", "resumed", "run_dir", "close"]

_lock = threading.Lock()
_state: dict[str, Any] = {"tokens": 0, "samples": 0, "prev": None, "fh": None, "path": None}


def enabled() -> bool:
    """True when launched by GPU Planner and this is the process that reports (rank 0)."""
    return bool(os.environ.get(ENV_FILE)) and os.environ.get("RANK", "0").strip() in ("", "0")


def run_dir() -> str | None:
    return os.environ.get("GPUPLANNER_RUN_DIR")


def checkpoint_dir() -> str | None:
    """A folder in the run directory for your checkpoints (kept across resumes), or None."""
    return os.environ.get("GPUPLANNER_CHECKPOINT_DIR")


def resumed() -> bool:
    """True when this start continues a run that stopped earlier (resume from your checkpoint)."""
    return os.environ.get("GPUPLANNER_RESUMED") == "1"


@overload
def _number(name: str, value: Any, whole: Literal[True]) -> int | None: ...
@overload
def _number(name: str, value: Any, whole: Literal[False] = False) -> float | None: ...
def _number(name: str, value: Any, whole: bool = False) -> float | int | None:
    if value is None:
        return None
    if hasattr(value, "item"):  # a 0-d tensor or numpy number
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"gpuplanner_telemetry: {name} must be a number, not {type(value).__name__}")
    if whole:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"gpuplanner_telemetry: {name} must be a whole number, not {value!r}")
        if value < 0:
            raise ValueError(f"gpuplanner_telemetry: {name} must be 0 or more, not {value!r}")
        return int(value)
    return float(value) if math.isfinite(value) else None


def _write(record: dict[str, Any]) -> None:
    path = os.environ[ENV_FILE]
    if _state["fh"] is None or _state["path"] != path:
        _state["fh"], _state["path"] = open(path, "a", encoding="utf-8"), path
    _state["fh"].write(json.dumps(record, separators=(",", ":")) + "\n")
    _state["fh"].flush()


def close() -> None:
    """Close the records file (done at exit; writing again opens it again)."""
    with _lock:
        if _state["fh"] is not None:
            _state["fh"].close()
            _state["fh"] = None


atexit.register(close)


def log_step(
    step: int,
    *,
    tokens: int | None = None,
    samples: int | None = None,
    loss: float | None = None,
    lr: float | None = None,
    tokens_total: int | None = None,
    samples_total: int | None = None,
    **extra: Any,
) -> dict[str, Any] | None:
    """Record optimizer step ``step``; returns the record written (None when not enabled)."""
    checked_step = _number("step", step, whole=True)
    if checked_step is None:
        raise TypeError("gpuplanner_telemetry: step must be a whole number, not None")
    step = checked_step
    tokens, samples = _number("tokens", tokens, True), _number("samples", samples, True)
    tokens_total, samples_total = (
        _number("tokens_total", tokens_total, True),
        _number("samples_total", samples_total, True),
    )
    loss, lr = _number("loss", loss), _number("lr", lr)
    if not enabled():
        return None
    now, mono = time.time(), time.monotonic()
    with _lock:
        _state["tokens"] = tokens_total if tokens_total is not None else _state["tokens"] + (tokens or 0)
        _state["samples"] = samples_total if samples_total is not None else _state["samples"] + (samples or 0)
        record: dict[str, Any] = {
            "kind": "step",
            "t": now,
            "step": step,
            "loss": loss,
            "lr": lr,
            "tokens_total": _state["tokens"],
            "samples_total": _state["samples"],
            "step_time_s": None,
            "tokens_per_s": None,
            "samples_per_s": None,
        }
        prev = _state["prev"]
        if prev is not None and mono > prev[0] and step > prev[1]:
            dt = mono - prev[0]
            record["step_time_s"] = dt / (step - prev[1])
            record["tokens_per_s"] = max(0, _state["tokens"] - prev[2]) / dt
            record["samples_per_s"] = max(0, _state["samples"] - prev[3]) / dt
        _state["prev"] = (mono, step, _state["tokens"], _state["samples"])
        record.update({k: v for k, v in extra.items() if k not in record})
        _write(record)
    return record


def log_eval(step: int, eval_loss: float | None = None, **metrics: Any) -> dict[str, Any] | None:
    """Record an evaluation at ``step`` (``eval_loss`` and any other numbers)."""
    whole_step = _number("step", step, whole=True)
    eval_loss = _number("eval_loss", eval_loss)
    if not enabled():
        return None
    record = {"kind": "eval", "t": time.time(), "step": whole_step, "eval_loss": eval_loss}
    record.update({k: v for k, v in metrics.items() if k not in record})
    with _lock:
        _write(record)
    return record


# -- callbacks for training libraries (imported lazily: neither library is needed to use the above) ------
def _batch_size(batch: Any) -> tuple[int | None, int | None]:
    """(samples, tokens) of a batch: a dict with ``input_ids``, a tensor, or a tuple/list of tensors."""
    ids = batch.get("input_ids") if isinstance(batch, dict) else None
    first = ids if ids is not None else batch[0] if isinstance(batch, (list, tuple)) and batch else batch
    shape = getattr(first, "shape", None)
    if not shape:
        return None, None
    samples = int(shape[0])
    tokens = int(shape[0] * shape[1]) if ids is not None and len(shape) >= 2 else None
    return samples, tokens


class _HFHooks:
    """The logic of :data:`HFCallback` (a ``transformers.TrainerCallback``): a step record at each of
    the Trainer's logging steps (``logging_steps``) with its loss and learning rate, samples counted
    from the batch size, tokens from ``state.num_input_tokens_seen`` (``include_num_input_tokens_seen``)
    or samples x ``seq_len``; an eval record for each evaluation."""

    def __init__(self, seq_len: int | None = None) -> None:
        self.seq_len = seq_len
        self.samples = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        world = getattr(args, "world_size", 1) or 1
        self.samples += args.per_device_train_batch_size * args.gradient_accumulation_steps * world

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        logs = logs or {}
        if "loss" not in logs:
            return
        seen = getattr(state, "num_input_tokens_seen", 0) or 0
        tokens = seen if seen > 0 else (self.samples * self.seq_len if self.seq_len else None)
        log_step(
            state.global_step,
            loss=logs.get("loss"),
            lr=logs.get("learning_rate"),
            tokens_total=tokens if tokens is not None else 0,
            samples_total=self.samples,
            epoch=logs.get("epoch"),
        )

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        metrics = metrics or {}
        if "eval_loss" in metrics:
            log_eval(state.global_step, eval_loss=metrics["eval_loss"])


class _LightningHooks:
    """The logic of :data:`LightningCallback`: a step record every ``every_n_steps`` optimizer steps
    (the batch's size and tokens: ``input_ids`` in a dict batch, else samples x ``seq_len``), the loss
    from the step's output; ``val_loss`` (or ``eval_loss``) after each validation."""

    def __init__(self, seq_len: int | None = None, every_n_steps: int = 1) -> None:
        self.seq_len = seq_len
        self.every = max(1, int(every_n_steps))
        self.samples = 0
        self.tokens = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        samples, tokens = _batch_size(batch)
        self.samples += samples or 0
        self.tokens += tokens if tokens is not None else (samples or 0) * (self.seq_len or 0)
        step = int(trainer.global_step)
        if step % self.every:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        log_step(step, loss=loss, tokens_total=self.tokens, samples_total=self.samples)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        metrics = getattr(trainer, "callback_metrics", {}) or {}
        value = metrics.get("val_loss", metrics.get("eval_loss"))
        if value is not None and not getattr(trainer, "sanity_checking", False):
            log_eval(int(trainer.global_step), eval_loss=value)


def __getattr__(name: str) -> Any:
    if name == "HFCallback":
        from transformers import TrainerCallback

        cls = type("HFCallback", (_HFHooks, TrainerCallback), {"__doc__": _HFHooks.__doc__})
    elif name == "LightningCallback":
        try:
            from lightning.pytorch import Callback
        except ImportError:
            from pytorch_lightning import Callback
        cls = type("LightningCallback", (_LightningHooks, Callback), {"__doc__": _LightningHooks.__doc__})
    else:
        raise AttributeError(f"module 'gpuplanner_telemetry' has no attribute {name!r}")
    globals()[name] = cls
    return cls
