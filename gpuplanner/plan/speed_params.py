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

    def efficiency_for(self, architecture: str) -> float:
        if architecture in self.generations:
            return self.generations[architecture]
        return self.generations[DEFAULT_GENERATION]

    def network_for(self, gpu: Any) -> float:
        name = getattr(gpu, "name", "")
        if name in self.network_gbs:
            return self.network_gbs[name]
        return self.network_default.get(getattr(gpu, "interconnect", "pcie"), self.network_default.get("pcie", 12.5))

    def params_for(self, gpu: Any, *, efficiency_scale: float = 1.0, network_gbs: float | None = None) -> StepParams:
        """The step-model constants for one GPU (its generation's efficiency, its network)."""
        params = StepParams(
            # a calibration may push the efficiency up, never past the peak
            matmul_efficiency=min(self.efficiency_for(getattr(gpu, "architecture", "")) * efficiency_scale, 1.0),
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
