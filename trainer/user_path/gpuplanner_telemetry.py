"""Step telemetry from your own training code for GPU Planner (standard library only; one file).

GPU Planner's monitor (``gpuplanner run --host H -- COMMAND``) puts this module on ``PYTHONPATH`` and
names a file in ``$GPUPLANNER_TELEMETRY_FILE``; the records written here reach the run's history with
its spend, so tokens/s, loss and planned-against-actual work as for the bundled trainer::

    import gpuplanner_telemetry as gt

    for step in range(1, steps + 1):
        loss = train_one_step(batch)
        gt.log_step(step, tokens=batch_tokens, samples=batch_size, loss=loss)
    gt.log_eval(step, eval_loss=evaluate())

``tokens`` and ``samples`` are what was processed since the previous call (the module adds them up;
calling every N steps, give the N steps' tokens); give ``tokens_total``/``samples_total`` instead when
you keep your own totals (after a resume). Rates are measured between two calls, never extrapolated from
one step. A bad value is ignored with one line on stderr; training never stops for telemetry. Only the
process of rank 0 (``$RANK`` unset or 0) writes. Outside GPU Planner every call does nothing, so a script
that imports this module runs anywhere it can import it.

Ready callbacks: ``gpuplanner_telemetry.HFCallback`` (a ``transformers.TrainerCallback``) and
``gpuplanner_telemetry.LightningCallback`` (a Lightning ``Callback``), imported only when used.
Exit with :data:`EXIT_RESUME` (75) after saving a checkpoint on SIGTERM: GPU Planner resumes the run.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import threading
import time
from typing import Any

ENV_FILE = "GPUPLANNER_TELEMETRY_FILE"
EXIT_RESUME = 75
__all__ = ["EXIT_RESUME", "log_step", "log_eval", "enabled", "checkpoint_dir", "resumed", "run_dir", "close"]

_lock = threading.Lock()
_state: dict[str, Any] = {"tokens": None, "samples": None, "prev": None, "fh": None, "path": None}


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


INT64_MAX = 2**63 - 1  # the largest count the history stores
_warned: set[str] = set()


def _say_once(key: str, message: str) -> None:
    """One line on stderr, once per ``key`` (never an exception: the training goes on)."""
    if key in _warned:
        return
    _warned.add(key)
    sys.stderr.write(f"gpuplanner_telemetry: {message}\n")
    sys.stderr.flush()


def _warn(name: str, value: Any, why: str) -> None:
    """One line on stderr for the first bad value of each field."""
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    _say_once(name, f"{name}={shown} ignored: {why} (later bad values of {name} are ignored quietly)")


class _Bad:
    """A value that was rejected (and warned about): not the same as a value not given (None)."""


BAD = _Bad()


def _number(name: str, value: Any, whole: bool = False) -> Any:
    """``value`` as a float (None for NaN and infinities, a diverged loss) or, with ``whole``, as a count
    from 0 to :data:`INT64_MAX`; :data:`BAD` (after one warning) for anything else; None stays None."""
    if value is None:
        return None
    if hasattr(value, "item"):  # a 0-d tensor or numpy number
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _warn(name, value, f"must be a number, not {type(value).__name__}")
        return BAD
    if not whole:
        return float(value) if math.isfinite(value) else None
    if isinstance(value, float) and not value.is_integer():
        _warn(name, value, "must be a whole number")
        return BAD
    if not 0 <= value <= INT64_MAX:
        _warn(name, value, f"must be a count from 0 to {INT64_MAX}")
        return BAD
    return int(value)


def _plain(value: Any) -> Any:
    """A value of ``**more`` that JSON cannot hold: a tensor's or numpy number's own value, else null
    after one warning."""
    if hasattr(value, "item"):
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    _say_once(f"extra {type(value).__name__}", f"a {type(value).__name__} value is not a number: recorded as null")
    return None


def _write(record: dict[str, Any]) -> None:
    path = os.environ[ENV_FILE]
    if _state["fh"] is None or _state["path"] != path:
        _state["fh"], _state["path"] = open(path, "a", encoding="utf-8"), path
    _state["fh"].write(json.dumps(record, separators=(",", ":"), default=_plain) + "\n")
    _state["fh"].flush()


def close() -> None:
    """Close the records file (done at exit; writing again opens it again)."""
    with _lock:
        if _state["fh"] is not None:
            _state["fh"].close()
            _state["fh"] = None


atexit.register(close)


def _advance(name: str, since: Any, total: Any) -> tuple[int | None, int | None]:
    """The new running total of ``name`` ("tokens" or "samples") and the count of this interval (since
    the previous call; None when unknown). A rejected value leaves the total as it was."""
    before = _state[name]
    if total is not None and total is not BAD:
        return total, (total - before if before is not None and total >= before else None)
    if since is None or since is BAD or total is BAD:
        return before, None
    after = (before or 0) + since
    if after > INT64_MAX:
        _warn(name, since, f"the running total would pass {INT64_MAX}")
        return before, None
    return after, since


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
    """Record optimizer step ``step``; returns the record written (None when not enabled).

    ``tokens`` and ``samples`` are what was processed since the previous call (all of it, also when you
    call every N steps), ``tokens_total``/``samples_total`` your own running totals instead. Tokens/s and
    samples/s are those counts over the time between two calls: the first call has none, and nothing is
    extrapolated from one step. A bad value (negative, not whole, NaN, past 2^63-1, not a number) is
    ignored after one line on stderr and does not touch the running total."""
    checked_step = _number("step", step, whole=True)
    if checked_step is None or checked_step is BAD:
        if checked_step is None:
            _warn("step", step, "must be a whole number")
        return None
    counts = {
        key: _number(key, value, True)
        for key, value in (
            ("tokens", tokens),
            ("samples", samples),
            ("tokens_total", tokens_total),
            ("samples_total", samples_total),
        )
    }
    loss_v, lr_v = _number("loss", loss), _number("lr", lr)
    if not enabled():
        return None
    now, mono = time.time(), time.monotonic()
    with _lock:
        new_tokens, interval_tokens = _advance("tokens", counts["tokens"], counts["tokens_total"])
        new_samples, interval_samples = _advance("samples", counts["samples"], counts["samples_total"])
        _state["tokens"], _state["samples"] = new_tokens, new_samples
        record: dict[str, Any] = {
            "kind": "step",
            "t": now,
            "step": checked_step,
            "loss": None if loss_v is BAD else loss_v,
            "lr": None if lr_v is BAD else lr_v,
            "tokens_total": new_tokens,
            "samples_total": new_samples,
            "step_time_s": None,
            "tokens_per_s": None,
            "samples_per_s": None,
        }
        prev = _state["prev"]
        if prev is not None and mono > prev[0]:
            dt = mono - prev[0]
            if checked_step > prev[1]:
                record["step_time_s"] = dt / (checked_step - prev[1])
            if interval_tokens is not None:
                record["tokens_per_s"] = interval_tokens / dt
            if interval_samples is not None:
                record["samples_per_s"] = interval_samples / dt
        _state["prev"] = (mono, checked_step)
        record.update({k: v for k, v in extra.items() if k not in record})
        _write(record)
    return record


def log_eval(step: int, eval_loss: float | None = None, **metrics: Any) -> dict[str, Any] | None:
    """Record an evaluation at ``step`` (``eval_loss`` and any other numbers)."""
    whole_step = _number("step", step, whole=True)
    checked_loss = _number("eval_loss", eval_loss)
    if whole_step is None or whole_step is BAD:
        if whole_step is None:
            _warn("step", step, "must be a whole number")
        return None
    if not enabled():
        return None
    eval_loss = None if checked_loss is BAD else checked_loss
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
            tokens_total=tokens,
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
        self.tokens: int | None = None  # unknown until a batch says (input_ids) or seq_len is given

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        samples, tokens = _batch_size(batch)
        self.samples += samples or 0
        if tokens is None and samples is not None and self.seq_len:
            tokens = samples * self.seq_len
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens
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


# -- the start-up hook: callbacks registered without editing the script ---------------------------------------
AUTO_HOOKS_ENV = "GPUPLANNER_AUTO_HOOKS"  # "0" turns the start-up hook off (gpuplanner run --no-auto-hooks)


def auto_hooks_wanted() -> bool:
    return os.environ.get(AUTO_HOOKS_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def _register_hf(trainer: Any) -> None:
    """Add :data:`HFCallback` to a constructed ``transformers.Trainer`` (unless one is there) and have the
    Trainer count the input tokens it sees (``include_num_input_tokens_seen``), the tokens of tokens/s."""
    handler = getattr(trainer, "callback_handler", None)
    if handler is None or any(isinstance(cb, _HFHooks) for cb in handler.callbacks):
        return
    args = trainer.args
    counting = getattr(args, "include_num_input_tokens_seen", None)
    if counting is False or counting == "no":
        args.include_num_input_tokens_seen = "all" if counting == "no" else True
    trainer.add_callback(__getattr__("HFCallback")())


def _lightning_callback(module: Any) -> Any:
    """:data:`LightningCallback` over the ``Callback`` of the Lightning package being patched (``lightning.pytorch``
    or ``pytorch_lightning``), so that its Trainer accepts it."""
    cls = getattr(module, "_gpuplanner_callback", None)
    if cls is None:
        cls = type("LightningCallback", (_LightningHooks, module.Callback), {"__doc__": _LightningHooks.__doc__})
        module._gpuplanner_callback = cls
    return cls


def _with_lightning_callback(module: Any, kwargs: dict[str, Any]) -> None:
    given = kwargs.get("callbacks")
    listed = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
    if not any(isinstance(cb, _LightningHooks) for cb in listed):
        kwargs["callbacks"] = [*listed, _lightning_callback(module)()]


def _patch_trainer(module: Any, before: Any = None, after: Any = None) -> None:
    """Wrap ``module.Trainer.__init__`` (in place, so subclasses and every alias see it): ``before(module,
    kwargs)`` ahead of the original, ``after(trainer)`` behind it; only while telemetry is enabled. A
    failure of the hook is one line on stderr; the Trainer is built all the same."""
    cls = getattr(module, "Trainer", None)
    original = getattr(cls, "__init__", None)
    if cls is None or original is None or getattr(original, "_gpuplanner_hook", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        active = enabled()
        if active and before is not None:
            try:
                before(module, kwargs)
            except Exception as exc:
                _say_once("auto hook", f"the callback was not added to {type(self).__name__} ({exc})")
        original(self, *args, **kwargs)
        if active and after is not None:
            try:
                after(self)
            except Exception as exc:
                _say_once("auto hook", f"the callback was not added to {type(self).__name__} ({exc})")

    __init__.__doc__, __init__.__wrapped__ = original.__doc__, original  # type: ignore[attr-defined]
    __init__._gpuplanner_hook = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


_TARGETS: dict[str, Any] = {
    "transformers.trainer": lambda m: _patch_trainer(m, after=_register_hf),
    "lightning.pytorch": lambda m: _patch_trainer(m, before=_with_lightning_callback),
    "pytorch_lightning": lambda m: _patch_trainer(m, before=_with_lightning_callback),
}


class _PatchingLoader:
    """The real loader of a watched module, which patches the module once it has run."""

    def __init__(self, loader: Any, patch: Any) -> None:
        self._loader, self._patch = loader, patch

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as exc:
            _say_once("auto hook", f"the start-up hook did not patch {module.__name__} ({exc})")

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, resource readers...
        return getattr(self._loader, name)


class _HookFinder:
    """A ``sys.meta_path`` finder that hands out :class:`_PatchingLoader` for the watched modules."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = _TARGETS.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install_auto_hooks() -> bool:
    """Register GPU Planner's callback in every ``transformers.Trainer`` and Lightning ``Trainer`` built
    in this process, without an edit to the script (the monitor's start-up hook calls this; a Trainer that
    already has the callback is left alone). Modules imported already are patched at once. Returns False
    when turned off (``GPUPLANNER_AUTO_HOOKS=0``)."""
    if not auto_hooks_wanted():
        return False
    for name, patch in _TARGETS.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _HookFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _HookFinder())
    return True


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
