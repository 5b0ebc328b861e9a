"""Size a model for a budget: the compute a cap buys on one GPU option and the Chinchilla-optimal
parameters and tokens for it (:mod:`gpuplanner.plan.scaling`), with the source of every figure.

GPU-hours = the lower of ``budget / price per GPU-hour`` and the GPU-hour cap; FLOPs = GPU-hours x
3600 x peak FLOP/s x MFU; parameters and tokens from Hoffmann et al. (2022); training time =
GPU-hours / GPUs. The MFU is per GPU: with several GPUs, lower it for the communication they add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplanner.plan.catalog import Catalog
from gpuplanner.plan.planner import cheapest_offer
from gpuplanner.plan.scaling import FLOPS_PER_PARAM_TOKEN, compute_optimal, flops_for_budget
from gpuplanner.plan.setup import PlanInputError
from trainer.spend import instance_hour_usd

FORMULA_SOURCE = "Hoffmann et al. 2022 (Chinchilla), approach 1: D_opt = 1.7424 C^0.5005 tokens, N_opt = C / (6 D_opt)"


@dataclass(frozen=True)
class SizingRequest:
    budget_usd: float | None
    max_gpu_hours: float | None = None
    gpu: str | None = None
    gpus: int = 1
    precision: str = "bf16-mixed"
    pricing: str = "on-demand"
    price: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None

    def __post_init__(self) -> None:
        if self.budget_usd is None and self.max_gpu_hours is None:
            raise PlanInputError(
                "budget-usd", "give a budget (--budget-usd and/or --max-gpu-hours) to size a model for"
            )
        for name, value in (
            ("budget-usd", self.budget_usd),
            ("max-gpu-hours", self.max_gpu_hours),
            ("price", self.price),
            ("peak-tflops", self.peak_tflops),
        ):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise PlanInputError(name, f"must be a positive number, got {value!r}")
        if self.mfu is not None and not 0 < self.mfu <= 1:
            raise PlanInputError("mfu", f"must be a share between 0 and 1, got {self.mfu!r}")
        if self.gpus < 1:
            raise PlanInputError("gpus", f"must be at least 1, got {self.gpus}")
        if self.pricing not in ("on-demand", "spot"):
            raise PlanInputError("pricing", f"{self.pricing!r} is not one of on-demand, spot")


@dataclass(frozen=True)
class Sizing:
    request: SizingRequest
    gpu: str | None
    usd_per_gpu_hour: float | None
    price_source: str
    peak_tflops: float
    peak_source: str
    mfu: float
    mfu_source: str
    gpu_hours: float
    binding_cap: str
    flops: float
    params: float
    tokens: float
    hours: float
    cost_usd: float | None

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


def _price(request: SizingRequest, catalog: Catalog | None, gpu_name: str | None) -> tuple[float | None, str]:
    if request.price is not None:
        return request.price, "given (--price)"
    if catalog is None or gpu_name is None:
        return None, "none"
    offer = cheapest_offer(catalog.offers_for(gpu_name), request.gpus, spot=request.pricing == "spot")
    if offer is None:
        return None, f"no {request.pricing} catalog offer has {request.gpus} x {gpu_name}"
    per_gpu = instance_hour_usd(offer.usd_per_gpu_hour, offer.billed_gpus) / request.gpus  # whole instances billed
    where = f"{offer.provider} {offer.region} {offer.instance_type}".strip()
    billed = f", {offer.billed_gpus} GPUs billed" if offer.billed_gpus > request.gpus else ""
    return per_gpu, f"catalog: cheapest {request.pricing} offer ({where}{billed})"


def size_for_budget(request: SizingRequest, catalog: Catalog | None) -> Sizing:
    """The compute-optimal model for ``request``'s budget on its GPU option."""
    spec = catalog.gpu(request.gpu) if (catalog is not None and request.gpu is not None) else None
    if request.peak_tflops is not None:
        peak, peak_source = request.peak_tflops, "given (--peak-tflops)"
    elif spec is not None:
        peak = spec.peak_tflops(request.precision)
        peak_source = f"catalog: {spec.name} dense {request.precision} peak ({spec.source})"
    else:
        raise PlanInputError("gpu", "name a catalog GPU (--gpu) or give its --peak-tflops")
    if request.mfu is not None:
        mfu, mfu_source = request.mfu, "given (--mfu)"
    elif spec is not None:
        mfu, mfu_source = spec.default_mfu, f"catalog: {spec.name} default MFU"
    else:
        raise PlanInputError("mfu", "without a catalog GPU give the model-FLOPs utilisation (--mfu)")
    price, price_source = _price(request, catalog, spec.name if spec else None)
    caps: dict[str, float] = {}
    if request.budget_usd is not None:
        if price is None:
            raise PlanInputError("price", f"a $ budget needs a price per GPU-hour ({price_source}): give --price")
        caps["budget_usd"] = request.budget_usd / price
    if request.max_gpu_hours is not None:
        caps["max_gpu_hours"] = request.max_gpu_hours
    binding = min(caps, key=lambda k: caps[k])
    gpu_hours = caps[binding]
    given = request.budget_usd if binding == "budget_usd" else request.max_gpu_hours
    too_big = PlanInputError(
        binding.replace("_", "-"), f"{given:g} buys more compute than any model could use; give a smaller cap"
    )  # the figures would be infinite (issue 27 item 11: no `inf` printed, no traceback)
    if not math.isfinite(gpu_hours) or (price is not None and not math.isfinite(gpu_hours * price)):
        raise too_big
    if price is not None:
        flops = flops_for_budget(gpu_hours * price, price, peak, mfu)
    else:
        flops = gpu_hours * 3600.0 * peak * 1e12 * mfu
    if not math.isfinite(flops):
        raise too_big
    optimal = compute_optimal(flops)
    assert math.isclose(FLOPS_PER_PARAM_TOKEN * optimal.params * optimal.tokens, flops, rel_tol=1e-9)
    return Sizing(
        request,
        spec.name if spec else request.gpu,
        price,
        price_source,
        peak,
        peak_source,
        mfu,
        mfu_source,
        gpu_hours,
        binding,
        flops,
        optimal.params,
        optimal.tokens,
        gpu_hours / request.gpus,
        None if price is None else gpu_hours * price,
    )
