"""Evaluation during a run: the held-out loss (and accuracy for classification) summed over ranks, and
what follows from it (the ``eval`` record, a target loss reached, early stopping on no improvement)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import data as data_mod
from . import dist
from .preemption import EARLY_STOP
from .step import classification_logits, target_count
from .trainer_core import TrainerCore


class Evaluating(TrainerCore):
    """Runs the held-out evaluation and requests the early stop it calls for."""

    @torch.no_grad()
    def evaluate(self) -> tuple[float, dict[str, Any]] | None:
        """Held-out loss (and accuracy for classification), summed over ranks."""
        batches = data_mod.eval_batches(
            self.data, self.config.micro_batch, self.config.eval_batches, self.info.rank, self.info.world
        )
        if self.fsdp:  # every rank must run the same number of forwards (parameter all-gathers)
            n = -dist.all_max([-len(batches)], self.info, self.device)[0]
            batches = batches[:n]
        self.model.eval()
        total = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, targets, correct
        for idx in batches:
            b = self.data.batch(idx)
            if self.cls:
                logits = classification_logits(self._raw_model(), b, self.device, self.autocast)
                labels = b["labels"].to(self.device)
                total[0] += F.cross_entropy(logits, labels, reduction="sum").double()
                total[2] += (logits.argmax(-1) == labels).sum().double()
            else:  # the batch carries its targets (and, documents kept apart, positions and document ids)
                total[0] += self.loss_fn(self._raw_model(), b, self.device, self.autocast).double()
            total[1] += target_count(b)
        self.model.train()
        dist.all_sum(total, self.info)
        if total[1] == 0:
            return None
        extra = {"eval_accuracy": float(total[2] / total[1]), "eval_examples": int(total[1])} if self.cls else {}
        return float(total[0] / total[1]), extra

    def _after_eval(self, loss: float, extra: dict[str, Any] | None = None) -> None:
        c, s = self.config, self.state
        self.tele.emit(
            "eval",
            step=s.step,
            eval_loss=loss,
            best_eval_loss=min(loss, s.best_eval or loss),
            **(extra or {}),
            **self.phase_fields(),
        )
        if c.target_eval_loss is not None and loss <= c.target_eval_loss:
            self.flag.request(EARLY_STOP, f"eval loss {loss:.4f} reached target {c.target_eval_loss}")
        if s.best_eval is None or s.best_eval - loss > c.early_stop_min_delta:
            s.best_eval, s.bad_evals = loss, 0
        else:
            s.bad_evals += 1
            if c.early_stop_patience and s.bad_evals >= c.early_stop_patience:
                self.flag.request(EARLY_STOP, f"no eval improvement in {s.bad_evals} evaluations")
