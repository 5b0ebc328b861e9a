"""Compute-optimal model size and data for a budget (Chinchilla, Hoffmann et al. 2022, approach 1 fit).

For a training compute budget C in FLOPs: N_opt = 0.2536 C^0.4995 parameters and
D_opt = 1.7424 C^0.5005 tokens, about 20 tokens per parameter; training costs C = 6 N D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplanner.plan.setup import PlanInputError

N_COEFF, N_EXP = 0.2536, 0.4995
D_COEFF, D_EXP = 1.7424, 0.5005
FLOPS_PER_PARAM_TOKEN = 6.0


@dataclass(frozen=True)
class ComputeOptimal:
    flops: float
    params: float
    tokens: float

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


def compute_optimal(flops: float) -> ComputeOptimal:
    """Parameter count and token count that minimise loss for ``flops`` of training compute."""
    if not (math.isfinite(flops) and flops > 0):
        raise PlanInputError("flops", f"must be a positive number of FLOPs, got {flops!r}")
    return ComputeOptimal(flops, N_COEFF * flops**N_EXP, D_COEFF * flops**D_EXP)


def flops_for_budget(budget_usd: float, usd_per_gpu_hour: float, peak_tflops: float, mfu: float) -> float:
    """Training FLOPs a dollar budget buys: GPU-hours x peak FLOP/s x MFU x 3600."""
    for name, value in (("budget-usd", budget_usd), ("price", usd_per_gpu_hour), ("mfu", mfu)):
        if not (math.isfinite(value) and value > 0):
            raise PlanInputError(name, f"must be a positive number, got {value!r}")
    gpu_hours = budget_usd / usd_per_gpu_hour
    return gpu_hours * 3600.0 * peak_tflops * 1e12 * mfu
