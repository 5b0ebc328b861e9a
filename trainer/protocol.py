"""Telemetry records: one JSON object per line in ``RUN_DIR/events.jsonl``.

Every record has ``v`` (protocol version), ``seq`` (rises by one per record over the whole life of a
run, across resumes), ``t`` (Unix time, seconds) and ``kind``. Fields beyond the required ones are
allowed. This module imports only the standard library so the desktop side can use it without torch.

Where the time goes (optional, on ``step``, ``eval``, ``checkpoint`` and ``run_end`` records of
trainers that record it): ``phases`` is an object of seconds per phase of the writing process since
its start (``startup``, ``compile``, ``data``, ``train``, ``checkpoint``, ``eval``: see
``trainer/phases.py``), cumulative, so the newest record of a process holds its totals;
``phases_start`` is that process's start (Unix seconds, the ``t`` of its ``run_start``), which tells
the processes of a resumed run apart. Records without them (older trainers) stay valid.

``run_start`` may carry ``model_arch`` (trainers since the settings contract): the model's architecture as
its Hugging Face config describes it (:func:`model_arch`), so the desktop side can plan a model built from a
``config.json`` that is not a planner preset. Records without it stay valid (readers fall back to the name).

Readers must survive half-written last lines, garbage and unknown kinds: :class:`StreamParser` skips
and counts them and tracks the byte offset up to which input was consumed, so a reader can resume a
stream exactly where it stopped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 1
EVENTS_FILE = "events.jsonl"

# Required fields per kind (beyond v, seq, t, kind). Other fields are allowed and kept.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "run_start": ("config",),
    "run_end": ("status",),
    "step": ("step", "loss", "tokens_total", "samples_total", "step_time_s"),
    "eval": ("step", "eval_loss"),
    "checkpoint": ("step", "path"),
    "preempted": (),
    "stopped": (),
    "resumed": (),
    "gpu": ("index", "util_pct", "mem_used_bytes", "mem_total_bytes"),
}
KINDS = frozenset(REQUIRED_FIELDS)
RUN_END_STATUSES = frozenset({"finished", "preempted", "stopped", "budget_stop", "early_stop", "failed"})
# A user's stop: the trainer cannot tell a user's SIGTERM from a host's, so it writes ``preempted`` and a
# ``run_end`` with status ``preempted`` either way. The desktop's history stores those two records of a
# process the user stopped as kind ``stopped`` and status ``stopped`` (the trainer's word kept in
# ``trainer_kind`` / ``trainer_status``), so an exported run reads back the same. Trainers never write them.

# The fields each kind usually carries, for documentation and for writers.
STEP_FIELDS = (
    "step",
    "epoch",
    "loss",
    "lr",
    "tokens_total",
    "samples_total",
    "tokens_per_s",
    "samples_per_s",
    "step_time_s",
    "data_wait_s",
    "peak_mem_bytes",
    "mfu",
    "hfu",
    "spend_usd",
)
GPU_FIELDS = (
    "node",
    "index",
    "util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "throttle_reasons",
    "simulated",
    # optional: null (or absent) where the GPU or driver does not report them, never zero
    "sm_clock_max_mhz",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "pcie_tx_mbps",
    "pcie_rx_mbps",
    "nvlink_tx_mbps",
    "nvlink_rx_mbps",
)
# The phases a trainer reports in ``phases`` (other names are allowed and kept by readers).
PHASE_NAMES = ("startup", "compile", "data", "train", "checkpoint", "eval")
PHASE_KINDS = frozenset({"step", "eval", "checkpoint", "run_end"})

# NVML's clock event ("throttle") reasons: bit of ``throttle_reasons`` -> name. The names in
# SLOWDOWN_REASONS lower the clocks below what the work asks for; the others are not a slowdown of work
# (an idle GPU, clocks set by an administrator or for a display).
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
SLOWDOWN_REASONS = frozenset(
    {"power_cap", "hw_slowdown", "sync_boost", "sw_thermal", "hw_thermal", "power_brake", "board_limit", "reliability"}
)


def throttle_reason_names(mask: int | None) -> list[str] | None:
    """The names of the reasons set in an NVML clock-event mask (None when the GPU did not report one).
    Unknown bits are named ``bit_0x...`` rather than dropped."""
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


# What a reader accepts in a field's value (checked by :func:`check_values` when parsing; writers never
# produce anything else, since :func:`encode` turns NaN and infinity into null). A value outside these
# bounds is impossible for a real run and would poison a store: such a record is rejected as malformed.
INT64_MAX = (1 << 63) - 1  # SQLite's INTEGER range
MAX_TIME = 1e11  # Unix seconds (the year 5138): later times are corrupt, not telemetry
# whole numbers, 0 .. INT64_MAX
COUNT_FIELDS = frozenset(
    {
        "step",
        "tokens_total",
        "samples_total",
        "peak_mem_bytes",
        "index",
        "mem_used_bytes",
        "mem_total_bytes",
        "throttle_reasons",
        "resumed_from_step",
    }
)
# finite numbers of 0 or more
NONNEGATIVE_FIELDS = frozenset(
    {
        "epoch",
        "tokens_per_s",
        "samples_per_s",
        "step_time_s",
        "data_wait_s",
        "mfu",
        "spend_usd",
        "power_w",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "pcie_tx_mbps",
        "pcie_rx_mbps",
        "nvlink_tx_mbps",
        "nvlink_rx_mbps",
    }
)
# finite numbers, any sign
FINITE_FIELDS = frozenset({"loss", "lr", "eval_loss", "temp_c"})
PERCENT_FIELDS = frozenset({"util_pct", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct"})  # 0 .. 100


class RecordError(ValueError):
    """A line that is not a valid telemetry record; the message says why."""


def config_model_name(path: str) -> str:
    """The name under which a model built from a config file (``--model-config``) is known in the run
    history and the planner, so measurements find their plans: the folder of a ``config.json`` (a
    Hugging Face model folder), else the file name without its extension. Works on any path spelling."""
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if not parts:
        return path
    name = parts[-1]
    if name.lower() == "config.json" and len(parts) > 1 and parts[-2] != "..":
        return parts[-2]
    return name[:-5] if name.lower().endswith(".json") and len(name) > 5 else name


# Hugging Face config entries that describe labels or tokenizer ids, not the architecture: left out
_NOT_ARCH = frozenset({"id2label", "label2id", "task_specific_params", "architectures"})


def model_arch(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The architecture fields of a Hugging Face config (``PretrainedConfig.to_dict()``) for ``run_start``'s
    ``model_arch``: entries that are JSON numbers, strings, booleans or null, and nested objects of them
    (``text_config``); private keys (``_...``) and label maps left out."""

    def plain(value: Any) -> bool:
        return (
            value is None or isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))
        )

    out: dict[str, Any] = {}
    for key, value in hf_config.items():
        if not isinstance(key, str) or key.startswith("_") or key in _NOT_ARCH:
            continue
        if plain(value):
            out[key] = value
        elif isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if isinstance(k, str) and not k.startswith("_") and plain(v)}
    return out


def make_record(kind: str, seq: int, t: float, **fields: Any) -> dict[str, Any]:
    """Build a record dict with the envelope fields first."""
    if kind not in KINDS:
        raise RecordError(f"unknown record kind {kind!r}")
    record: dict[str, Any] = {"v": PROTOCOL_VERSION, "seq": int(seq), "t": float(t), "kind": kind}
    record.update(fields)
    validate(record)
    return record


def encode(record: dict[str, Any]) -> str:
    """One line of JSON (with the trailing newline). NaN and infinity become null."""
    return json.dumps(_finite(record), separators=(",", ":"), allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def validate(record: Any) -> dict[str, Any]:
    """Return the record if it is a valid, known record; raise :class:`RecordError` otherwise."""
    if not isinstance(record, dict):
        raise RecordError("record is not a JSON object")
    version = record.get("v")
    if version != PROTOCOL_VERSION:
        raise RecordError(f"unsupported protocol version {version!r}")
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise RecordError(f"bad seq {seq!r}")
    t = record.get("t")
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        raise RecordError(f"bad time {t!r}")
    kind = record.get("kind")
    if kind not in KINDS:
        raise RecordError(f"unknown kind {kind!r}")
    missing = [name for name in REQUIRED_FIELDS[kind] if name not in record]
    if missing:
        raise RecordError(f"{kind} record lacks {', '.join(missing)}")
    return record


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bad(name: str, value: Any, allowed: str) -> RecordError:
    shown = repr(value)
    return RecordError(f"bad {name} {shown[:40] + '...' if len(shown) > 40 else shown}: {allowed}")


_COUNT, _NONNEGATIVE, _FINITE, _PERCENT = 0, 1, 2, 3


def _rule(name: str) -> int:
    if name in COUNT_FIELDS:
        return _COUNT
    if name in NONNEGATIVE_FIELDS:
        return _NONNEGATIVE
    if name in FINITE_FIELDS:
        return _FINITE
    return _PERCENT


# The numeric fields a reader stores for each kind (the others travel as JSON text), with their rule.
_EVENT_NUMBERS = ("step", "resumed_from_step")
STORED_NUMBERS: dict[str, tuple[tuple[str, int], ...]] = {
    kind: tuple((name, _rule(name)) for name in names)
    for kind, names in {
        "step": STEP_FIELDS,
        "gpu": tuple(f for f in GPU_FIELDS if f not in ("node", "simulated")),
        "eval": ("step", "eval_loss"),
        **dict.fromkeys(("run_start", "run_end", "checkpoint", "preempted", "stopped", "resumed"), _EVENT_NUMBERS),
    }.items()
}
_ALLOWED = {
    _COUNT: f"a whole number from 0 to {INT64_MAX}",
    _NONNEGATIVE: "a finite number, 0 or more",
    _FINITE: "a finite number",
    _PERCENT: "a percentage from 0 to 100",
}


def check_values(record: dict[str, Any]) -> dict[str, Any]:
    """Reject a (valid) record whose numeric fields hold impossible values; raise :class:`RecordError`.

    ``null`` is allowed everywhere (a writer's NaN). Checked: ``seq`` within SQLite's integer range,
    ``t`` from 0 to :data:`MAX_TIME`, and the fields a reader stores for the record's kind: counts
    (:data:`COUNT_FIELDS`) whole numbers from 0 to :data:`INT64_MAX`, :data:`NONNEGATIVE_FIELDS`
    finite and 0 or more, :data:`FINITE_FIELDS` finite, :data:`PERCENT_FIELDS` from 0 to 100, a
    ``run_start``'s ``gpus`` a list or a count. Runs once per line read, so it is kept lean.
    """
    if record["seq"] > INT64_MAX:
        raise _bad("seq", record["seq"], f"at most {INT64_MAX}")
    t = record["t"]
    if not 0 <= t <= MAX_TIME:
        raise _bad("time", t, f"Unix seconds from 0 to {MAX_TIME:.0f}")
    get = record.get
    for name, rule in STORED_NUMBERS[record["kind"]]:
        value = get(name)
        if value is None:
            continue
        kind = type(value)
        if kind is float:
            ok = (
                (0.0 <= value <= INT64_MAX and value.is_integer())
                if rule == _COUNT
                else (0.0 <= value < math.inf)
                if rule == _NONNEGATIVE
                else (-math.inf < value < math.inf)
                if rule == _FINITE
                else (0.0 <= value <= 100.0)
            )
        elif kind is int:
            ok = (
                0 <= value <= INT64_MAX
                if rule == _COUNT
                else (-INT64_MAX <= value <= INT64_MAX)
                if rule == _FINITE
                else (0 <= value <= (100 if rule == _PERCENT else INT64_MAX))
            )
        else:  # a string, a bool, a list, an object where a number belongs
            ok = False
        if not ok:
            raise _bad(name, value, _ALLOWED[rule])
    if "phases" in record or "phases_start" in record:  # (``in``: the cheapest test for the many records without)
        check_phases(get("phases"), get("phases_start"))
    if record["kind"] == "run_start":
        gpus = get("gpus")
        if gpus is not None and not isinstance(gpus, list) and not (type(gpus) is int and 0 <= gpus <= INT64_MAX):
            raise _bad("gpus", gpus, "a list of GPUs or a whole number")
    return record


def check_phases(phases: Any, start: Any) -> None:
    """Raise :class:`RecordError` unless ``phases`` is an object of names to seconds (finite, 0 or
    more) and ``phases_start`` a time (Unix seconds from 0 to :data:`MAX_TIME`); both or neither."""
    if not isinstance(phases, dict):
        raise _bad("phases", phases, "an object of phase names to seconds, with phases_start")
    if not _is_number(start) or not 0 <= start <= MAX_TIME:
        raise _bad("phases_start", start, f"Unix seconds from 0 to {MAX_TIME:.0f}, with phases")
    for name, seconds in phases.items():
        if not _is_number(seconds) or not 0 <= seconds < math.inf or len(name) > 40:
            raise _bad(f"phases.{name[:40]}", seconds, "a finite number of seconds, 0 or more")


def parse_line(line: str | bytes) -> dict[str, Any]:
    """Parse one line (without or with its newline); raise :class:`RecordError` if malformed."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError("line is not UTF-8") from exc
    line = line.strip()
    if not line:
        raise RecordError("empty line")
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an integer of > 4300 digits
        raise RecordError(f"not JSON: {exc}") from exc
    return check_values(validate(record))


MAX_LINE_BYTES = 1 << 20  # a record is one short line: a longer one is skipped, never held whole


@dataclass
class StreamParser:
    """Incremental parser for a byte stream of records.

    ``offset`` is the absolute byte offset in the stream just past the last complete line consumed;
    a reader that stores it with the records can resume the stream there later. A trailing partial
    line is held back until its newline arrives, up to :data:`MAX_LINE_BYTES`: a longer line is
    dropped up to its newline and counted as malformed (``last_error`` says so), so the buffer never
    grows past that whatever the writer sends.
    """

    offset: int = 0
    malformed: int = 0
    unknown_kind: int = 0
    last_error: str | None = None
    _pending: bytearray = field(default_factory=bytearray, repr=False)
    _skipped: int = field(default=0, repr=False)  # bytes of an over-long line dropped so far
    _skipping: bool = field(default=False, repr=False)

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """Consume a chunk; return the valid records of the complete lines it finished."""
        records: list[dict[str, Any]] = []
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                self._skipped += len(chunk)
                return records
            self.offset += self._skipped + newline + 1
            self._skipped, self._skipping = 0, False
            chunk = chunk[newline + 1 :]
        self._pending.extend(chunk)
        start = 0
        while True:
            end = self._pending.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._pending[start:end])
            start = end + 1
            if not line.strip():
                continue
            if len(line) > MAX_LINE_BYTES:
                self._too_long(len(line))
                continue
            try:
                records.append(parse_line(line))
            except RecordError as exc:
                if "unknown kind" in str(exc):
                    self.unknown_kind += 1
                else:
                    self.malformed += 1
                self.last_error = str(exc)
        if start:
            del self._pending[:start]
            self.offset += start
        if len(self._pending) > MAX_LINE_BYTES:  # an unfinished line already too long: drop it as it comes
            self._too_long(len(self._pending))
            self._skipped, self._skipping = len(self._pending), True
            self._pending = bytearray()
        return records

    def _too_long(self, size: int) -> None:
        self.malformed += 1
        self.last_error = f"a line of more than {MAX_LINE_BYTES} bytes skipped ({size} read of it)"

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished last line held back."""
        return len(self._pending)
