"""The fitted constants of the step model (``resources/catalog/speed_model.toml``) and their lookup per GPU.

The file holds a few constants shared by every GPU, one matmul efficiency per GPU generation
(architecture), the inter-node network bandwidth per node, and the model's measured uncertainty
(its leave-one-source-out error on the published runs), from which plans draw their ranges.
Pure: standard library only.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuplanner.plan.setup import PlanInputError
from gpuplanner.plan.step_model import StepParams
from gpuplanner.resources import resource_path

SHARED_KEYS = (
    "hidden_half",
    "tokens_half",
    "attention_efficiency",
    "elementwise_bytes",
    "launch_s_per_layer",
    "adapter_bytes",
    "bandwidth_efficiency",
    "overlap",
)
# Shared constants a file may leave out (older files), with the value that stands in.
OPTIONAL_SHARED = {"fp32_efficiency": 0.9}
DEFAULT_GENERATION = "default"
# GPU generations no published run fitted, and the fitted generation whose matmul efficiency stands in for
# each, with the reason (the plan's warning and the speed's source print it). Keys: (architecture,
# compute-capability major version, or None for every version). A generation not listed here (CDNA 3:
# ROCm's kernels, like no NVIDIA generation's) takes the fitted generations' mean.
STAND_INS: dict[tuple[str, str | None], tuple[str, str]] = {
    ("Volta", None): (
        "Ampere",
        "Volta's tensor cores run warp-level mma instructions, as Ampere's do, and cuBLAS feeds both the same way",
    ),
    ("Turing", None): (
        "Ampere",
        "Turing's tensor cores run warp-level mma instructions, as Ampere's do, and cuBLAS feeds both the same way",
    ),
    ("Blackwell", "10"): (
        "Hopper",
        "data-centre Blackwell, like Hopper, reaches its peak only with kernels written for its own asynchronous "
        "tensor-core instructions (tcgen05 after Hopper's wgmma)",
    ),
    ("Blackwell", "12"): (
        "Ada Lovelace",
        "GeForce and RTX PRO Blackwell (compute capability 12.x) keep Ada's warp-level mma tensor cores, "
        "without data-centre Blackwell's tcgen05",
    ),
}


def stand_in(architecture: str, compute_capability: str = "") -> tuple[str, str] | None:
    """The fitted generation that stands in for ``architecture`` (on a GPU of ``compute_capability``) and why,
    or None where no generation is close (:data:`STAND_INS`)."""
    major = str(compute_capability).split(".")[0]
    return STAND_INS.get((architecture, major)) or STAND_INS.get((architecture, None))


def generation_efficiency(generations: Mapping[str, float], architecture: str, compute_capability: str = "") -> float:
    """The matmul efficiency of a GPU generation from fitted ``generations``: its own, else its stand-in's
    (:func:`stand_in`) where that one is fitted, else the default (the fitted generations' mean)."""
    if architecture in generations:
        return generations[architecture]
    close = stand_in(architecture, compute_capability)
    if close and close[0] in generations:
        return generations[close[0]]
    return generations[DEFAULT_GENERATION]


class SpeedModelError(ValueError):
    """The speed-model file cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class SpeedModel:
    shared: Mapping[str, float]
    generations: Mapping[str, float]  # architecture -> matmul efficiency
    network_gbs: Mapping[str, float] = field(default_factory=dict)  # GPU name -> per-node GB/s
    network_default: Mapping[str, float] = field(default_factory=dict)  # interconnect -> per-node GB/s
    loso_pct: float = 25.0  # mean absolute % error of the speed on sources left out of the fit
    calibrated_pct: float = 10.0  # the same after measurements on other GPUs corrected the efficiency
    matched_pct: float = 5.0  # a speed measured on this GPU for this model, method and sequence length
    fitted_on: str = ""
    # likely error per regime (engines.REGIMES): the uncertainty whose P10-P90 band holds 80% of that
    # regime's rows on sources left out of the fit; empty: loso_pct for every plan
    regime_pct: Mapping[str, float] = field(default_factory=dict)

    def uncertainty_for(self, regime: str, architecture: str) -> float:
        """The likely error of a plan in ``regime`` on a GPU of ``architecture``: the regime's own, and the
        widest regime's where no published runs fitted the generation."""
        if not self.regime_pct:
            return self.loso_pct
        if not self.is_fitted(architecture):
            return max(self.regime_pct.values())
        return self.regime_pct.get(regime, max(self.regime_pct.values()))

    def is_fitted(self, architecture: str) -> bool:
        """Whether published runs fitted this GPU generation's efficiency (else the default stands in)."""
        return architecture in self.generations and architecture != DEFAULT_GENERATION

    def efficiency_for(self, architecture: str, compute_capability: str = "") -> float:
        return generation_efficiency(self.generations, architecture, compute_capability)

    def unfitted_note(self, gpu: Any) -> str:
        """Where no published runs fitted ``gpu``'s generation: which efficiency its speed uses and why ("" when
        fitted)."""
        architecture = str(getattr(gpu, "architecture", "") or "")
        if self.is_fitted(architecture):
            return ""
        name = architecture or str(getattr(gpu, "name", "")) or "this GPU"
        close = stand_in(architecture, str(getattr(gpu, "compute_capability", "") or ""))
        if close and self.is_fitted(close[0]):
            return (
                f"no published runs fitted the {name} generation's matmul efficiency: {close[0]}'s is used ({close[1]})"
            )
        return (
            f"no published runs fitted the {name} generation's matmul efficiency: the fitted generations' mean is used"
        )

    def network_for(self, gpu: Any) -> float:
        name = getattr(gpu, "name", "")
        if name in self.network_gbs:
            return self.network_gbs[name]
        return self.network_default.get(getattr(gpu, "interconnect", "pcie"), self.network_default.get("pcie", 12.5))

    def params_for(self, gpu: Any, *, efficiency_scale: float = 1.0, network_gbs: float | None = None) -> StepParams:
        """The step-model constants for one GPU (its generation's efficiency, its network)."""
        params = StepParams(
            # a calibration may push the efficiency up, never past the peak
            matmul_efficiency=min(
                self.efficiency_for(getattr(gpu, "architecture", ""), str(getattr(gpu, "compute_capability", "") or ""))
                * efficiency_scale,
                1.0,
            ),
            network_gbs=self.network_for(gpu) if network_gbs is None else network_gbs,
            **{key: self.shared[key] for key in SHARED_KEYS},
            **{key: self.shared.get(key, default) for key, default in OPTIONAL_SHARED.items()},
        )
        params.validate()
        return params

    def with_values(self, shared: Mapping[str, float], generations: Mapping[str, float]) -> SpeedModel:
        return replace(self, shared=dict(shared), generations=dict(generations))


def _number(path: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpeedModelError(f"{path}: {key} must be a number of at least 0, got {value!r}")
    return float(value)


def parse_speed_model(path: Path) -> SpeedModel:
    """Read a speed-model TOML file; raise :class:`SpeedModelError` naming the file and key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpeedModelError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SpeedModelError(f"{path}: not valid TOML ({exc})") from exc
    shared_raw = data.get("shared", {})
    missing = [k for k in SHARED_KEYS if k not in shared_raw]
    if missing:
        raise SpeedModelError(f"{path}: [shared] lacks {', '.join(missing)}")
    shared = {k: _number(path, f"shared.{k}", shared_raw[k]) for k in SHARED_KEYS}
    shared.update({k: _number(path, f"shared.{k}", shared_raw[k]) for k in OPTIONAL_SHARED if k in shared_raw})
    generations = {
        str(name): _number(path, f"generation.{name}.matmul_efficiency", table.get("matmul_efficiency"))
        for name, table in data.get("generation", {}).items()
    }
    if DEFAULT_GENERATION not in generations:
        raise SpeedModelError(f"{path}: [generation.{DEFAULT_GENERATION}] is required")
    network = data.get("network", {})
    per_gpu = {str(k): _number(path, f"network.gpus.{k}", v) for k, v in network.get("gpus", {}).items()}
    defaults = {str(k): _number(path, f"network.default.{k}", v) for k, v in network.get("default", {}).items()}
    uncertainty = data.get("uncertainty", {})
    model = SpeedModel(
        shared=shared,
        generations=generations,
        network_gbs=per_gpu,
        network_default=defaults,
        loso_pct=_number(path, "uncertainty.loso_pct", uncertainty.get("loso_pct", 25.0)),
        calibrated_pct=_number(path, "uncertainty.calibrated_pct", uncertainty.get("calibrated_pct", 10.0)),
        matched_pct=_number(path, "uncertainty.matched_pct", uncertainty.get("matched_pct", 5.0)),
        fitted_on=str(data.get("fitted_on", "")),
        regime_pct={
            str(k): _number(path, f"uncertainty.regime.{k}", v) for k, v in uncertainty.get("regime", {}).items()
        },
    )
    try:
        for gen in generations:
            model.params_for(type("G", (), {"architecture": gen, "name": "", "interconnect": "nvlink"})())
    except PlanInputError as exc:
        raise SpeedModelError(f"{path}: {exc.message}") from exc
    return model


def builtin_speed_model_path() -> Path:
    return resource_path("catalog", "speed_model.toml")


@functools.lru_cache(maxsize=4)
def load_speed_model(path: str | None = None) -> SpeedModel:
    """The shipped speed model (or the one at ``path``), parsed once."""
    return parse_speed_model(Path(path) if path else builtin_speed_model_path())
