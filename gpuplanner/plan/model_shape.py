"""What a model is, as far as memory and compute planning need it: a :class:`ModelSpec` lists every
module whose parameters the memory model needs with its shape (:class:`LinearModule`), and derives the
counts the estimators use (per-layer parameters, QLoRA's quantized share, small tensors, Adafactor state).
Built from configs, presets or a parameter count by :mod:`gpuplanner.plan.model_spec`. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# bitsandbytes 8-bit optimizers keep 32-bit state for tensors below this many elements
# (``min_8bit_size=4096`` in bnb.optim.Optimizer8bit).
BNB_MIN_8BIT_SIZE = 4096


@dataclass(frozen=True)
class LinearModule:
    """One linear (or GPT-2 ``Conv1D``) module; ``count`` is how many the model has (per-layer ones x layers).

    ``path`` is the module's name below the layer (``self_attn.q_proj``) or below the model for the
    ones outside the blocks (``lm_head``). ``in_block`` is True for the decoder/encoder blocks' linears
    (what bitsandbytes quantizes for QLoRA and what peft's ``all-linear`` targets).
    """

    path: str
    in_features: int
    out_features: int
    bias: bool
    count: int
    in_block: bool = True
    is_output: bool = False  # the output embedding (peft's all-linear leaves it out)
    tied: bool = False  # weight shared with the input embedding (counted there)

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    n_params: int
    source: str
    model_type: str = "llama"
    architecture: str = ""
    activation: str = "silu"
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm"
    norms_per_layer: int = 2
    qk_norm: bool = False
    attn_bias: bool = False
    max_positions: int = 0
    # dropout probabilities that matter for saved masks (GPT-2 / BERT)
    resid_dropout: float = 0.0
    attn_dropout: float = 0.0
    logit_softcap: bool = False
    # Gemma 2 soft-caps the attention scores too (tanh), which keeps one more score-sized tensor
    # under eager attention
    attn_softcap: bool = False
    linears: tuple[LinearModule, ...] = ()
    # parameter tensors, for exact optimizer bookkeeping:
    # (numel, rows, cols) per tensor kind, with a count; rows/cols 0 for 1-D tensors
    tensors: tuple[tuple[int, int, int, int], ...] = ()
    hf_config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # mixture of experts: every expert's weights are held (n_params), each token passes through
    # experts_per_token of them (n_active_params; 0 for a dense model, where it equals n_params)
    num_experts: int = 0
    experts_per_token: int = 0
    n_active_params: int = 0
    # Empty when the config's layout is one the planner reads exactly; otherwise one line naming the
    # field it could not read exactly (every plan of this model carries it as a warning)
    reading_note: str = ""

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass uses: all of them for a dense model."""
        return self.n_active_params or self.n_params

    # --- precomputed aggregates (cheap properties for the estimator) ---
    @property
    def layer_params(self) -> int:
        """Parameters of one block (what FSDP gathers per wrapped layer)."""
        return _derived(self)["layer_params"]

    @property
    def root_params(self) -> int:
        """Parameters outside the blocks (embeddings, head, final norm)."""
        return max(0, self.n_params - self.num_layers * self.layer_params)

    @property
    def quantizable_params(self) -> int:
        """Weights of the block linears: what QLoRA stores in 4 bit."""
        return _derived(self)["quantizable"]

    @property
    def n_tensors(self) -> int:
        return _derived(self)["n_tensors"]

    @property
    def small_tensor_params(self) -> int:
        """Parameters in tensors under bitsandbytes' 8-bit threshold (kept with 32-bit state)."""
        return _derived(self)["small_params"]

    @property
    def adafactor_state_elems(self) -> int:
        """Elements of Adafactor's factored second moment: rows+cols per matrix, numel per vector."""
        return _derived(self)["adafactor"]

    @property
    def largest_tensor(self) -> int:
        return _derived(self)["largest"]

    @property
    def block_linear_params(self) -> int:
        return _derived(self)["block_linear"]


@lru_cache(maxsize=512)
def _derived(spec: ModelSpec) -> dict[str, int]:
    quant = sum(m.weight_params * m.count for m in spec.linears if m.in_block)
    # one block's share of the block linears (a dense model has count == layers for each)
    layer_lin = sum(
        (m.weight_params + (m.out_features if m.bias else 0)) * m.count for m in spec.linears if m.in_block
    ) // max(1, spec.num_layers)
    layer_other = _layer_norm_params(spec)
    n_tensors = sum(c for _, _, _, c in spec.tensors)
    small = sum(n * c for n, _, _, c in spec.tensors if n < BNB_MIN_8BIT_SIZE)
    ada = sum(((r + k) if r and k else n) * c for n, r, k, c in spec.tensors)
    largest = max((n for n, _, _, _ in spec.tensors), default=spec.n_params)
    return {
        "layer_params": layer_lin + layer_other,
        "quantizable": min(quant, spec.n_params),
        "n_tensors": n_tensors,
        "small_params": small,
        "adafactor": ada,
        "largest": largest,
        "block_linear": quant,
    }


def _layer_norm_params(spec: ModelSpec) -> int:
    h = spec.hidden_size
    if spec.norm == "layernorm":
        return spec.norms_per_layer * 2 * h
    return spec.norms_per_layer * h + (2 * spec.head_dim if spec.qk_norm else 0)
