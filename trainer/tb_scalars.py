"""TensorBoard scalars a user's job writes (its loss and learning rate), read by the command monitor.

A job that reports nothing through ``gpuplanner_telemetry`` but writes TensorBoard event files
(``events.out.tfevents.*``: the Hugging Face ``Trainer`` with ``report_to="tensorboard"``, Lightning's
``TensorBoardLogger``, ``torch.utils.tensorboard.SummaryWriter``) under its working directory still gets
a loss curve: :class:`TensorBoardScalars` follows those files (created since the monitor started, at most
:data:`MAX_DEPTH` folders down) with TensorBoard's own reader, from where it stopped, and turns each
logged step's ``loss`` and learning rate into a step record (``"source": "tensorboard"``; no tokens, so
no tokens/s: nothing is made up). TensorBoard is optional (the ``tensorboard`` extra): without it on the
host nothing is read, silently, and the run goes on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

MAX_DEPTH = 4  # folders below the working directory searched for event files
MAX_ENTRIES = 20_000  # directory entries looked at per search: a huge project folder is not walked whole
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "checkpoints", "wandb"})
LOSS_TAGS = frozenset({"loss", "train_loss", "training_loss", "train/loss", "loss/train", "train/train_loss"})
LR_TAGS = frozenset({"learning_rate", "lr", "train/learning_rate", "train/lr"})


def field_of(tag: str) -> str | None:
    """``loss`` or ``lr`` for a scalar's tag (as the common trainers name them), else None."""
    t = tag.strip().lower()
    if t in LOSS_TAGS:
        return "loss"
    if t in LR_TAGS or t.rsplit("/", 1)[-1].startswith("lr-"):  # Lightning's LearningRateMonitor: lr-AdamW
        return "lr"
    return None


def _number(value: Any) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    tensor = value.tensor if value.HasField("tensor") else None
    if tensor is not None and len(tensor.float_val) == 1:
        return float(tensor.float_val[0])
    if tensor is not None and len(tensor.double_val) == 1:
        return float(tensor.double_val[0])
    return None


class TensorBoardScalars:
    """Follows the event files under ``root``; :meth:`poll` returns new step records (``step``, ``loss``,
    ``lr``, ``t``), each step once all its scalars are in (a later step has appeared, or ``final``)."""

    def __init__(self, root: Path, since: float, every_s: float = 5.0) -> None:
        self.root, self.since, self.every_s = root, since, every_s
        self.loaders: dict[str, Any] = {}
        self.pending: dict[int, dict[str, float]] = {}
        self.done_up_to = -1
        self.next_at = 0.0
        self.loader_class: Any = None
        self.available: bool | None = None  # None: not tried yet

    def _loader(self) -> Any:
        if self.available is None:
            try:
                from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
            except Exception:  # not installed (the optional extra), or broken: no TensorBoard scalars
                self.available = False
                return None
            self.available, self.loader_class = True, EventFileLoader
        return self.loader_class

    def files(self) -> list[str]:
        """Event files under the root written since the monitor started (sorted)."""
        found: list[str] = []
        seen = 0
        stack = [(str(self.root), 0)]
        while stack and seen < MAX_ENTRIES:
            folder, depth = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                seen += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth < MAX_DEPTH and not entry.name.startswith(".") and entry.name not in SKIPPED_DIRS:
                            stack.append((entry.path, depth + 1))
                    elif "tfevents" in entry.name and entry.stat().st_mtime >= self.since - 1.0:
                        found.append(entry.path)
                except OSError:
                    continue
        return sorted(found)

    def poll(self, final: bool = False) -> list[dict[str, Any]]:
        now = time.monotonic()
        if not final and now < self.next_at:
            return []
        self.next_at = now + self.every_s
        paths = self.files()
        # TensorBoard is imported only once there is an event file to read: the import takes seconds on a busy
        # host, which a job that writes no event file should not wait for (nor pay for)
        if not paths and not self.pending:
            return []
        loader_class = self._loader()
        if loader_class is None:
            return []
        for path in paths:
            try:
                loader = self.loaders.get(path)
                if loader is None:
                    loader = self.loaders[path] = loader_class(path)
                for event in loader.Load():
                    if not event.HasField("summary") or event.step <= self.done_up_to:
                        continue
                    for value in event.summary.value:
                        name = field_of(value.tag)
                        number = _number(value) if name else None
                        if name and number is not None:
                            slot = self.pending.setdefault(int(event.step), {})
                            slot[name] = number
                            slot["t"] = max(slot.get("t", 0.0), float(event.wall_time))
            except Exception:  # an unreadable file is skipped, the others are read
                continue
        ready = sorted(self.pending) if final else sorted(self.pending)[:-1]
        out = []
        for step in ready:
            values = self.pending.pop(step)
            if "loss" not in values and "lr" not in values:
                continue
            out.append({"step": step, "loss": values.get("loss"), "lr": values.get("lr"), "t": values["t"]})
            self.done_up_to = max(self.done_up_to, step)
        return out

    def step_records(self, final: bool = False) -> list[tuple[float, dict[str, Any]]]:
        """:meth:`poll`'s steps as the fields of step records (and their times): no tokens or samples
        (unknown), ``"source": "tensorboard"``."""
        out = []
        for rec in self.poll(final):
            at = rec.pop("t")
            rec.update(tokens_total=None, samples_total=None, step_time_s=None, source="tensorboard")
            out.append((at, rec))
        return out
