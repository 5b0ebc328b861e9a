"""Compute-optimal model size and data for a budget (Chinchilla, Hoffmann et al. 2022).

For a training compute budget C in FLOPs the optimal token count is D_opt = 1.7424 C^0.5005 and,
since training costs C = 6 N D, the optimal size is N_opt = C / (6 D_opt) = 0.0957 C^0.4995:
about 20 tokens per parameter. (The coefficient 0.2536 sometimes quoted for N_opt does not satisfy
C = 6 N D: for Chinchilla's own budget of 5.88e23 FLOPs it gives 189B parameters instead of 70B.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplanner.plan.setup import PlanInputError

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
    tokens = D_COEFF * flops**D_EXP
    return ComputeOptimal(flops, flops / (FLOPS_PER_PARAM_TOKEN * tokens), tokens)


def flops_for_budget(budget_usd: float, usd_per_gpu_hour: float, peak_tflops: float, mfu: float) -> float:
    """Training FLOPs a dollar budget buys: GPU-hours x peak FLOP/s x MFU x 3600."""
    for name, value in (("budget-usd", budget_usd), ("price", usd_per_gpu_hour), ("mfu", mfu)):
        if not (math.isfinite(value) and value > 0):
            raise PlanInputError(name, f"must be a positive number, got {value!r}")
    gpu_hours = budget_usd / usd_per_gpu_hour
    return gpu_hours * 3600.0 * peak_tflops * 1e12 * mfu
