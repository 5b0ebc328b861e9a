"""Activation ledgers: the tensors one transformer block saves for its backward, tensor by tensor with
their real dtypes, per token, for the Llama-like, GPT-2 and BERT families; and the per-token or per-score
bytes of selective checkpointing, eager attention matrices and a block's widest gradient buffers.
Used by :func:`gpuplanner.plan.memory.estimate_memory`. Pure Python.
"""

from __future__ import annotations

from functools import lru_cache

from gpuplanner.plan.model_shape import ModelSpec

FP32, HALF, MASK = 4, 2, 1  # torch.float32, bf16/fp16, torch.bool dropout masks

# Selective checkpointing policies (the engine's ``selective_policy``, engines.py): which matmul outputs a
# block keeps besides its input and the fused attention kernel's output. The bundled trainer keeps
# every one; torchtitan's ``selective_ac_option = "op"`` keeps the outputs of aten.mm, flash/efficient
# attention and a few cheap ops "except every second mm" (torchtitan/parallelisms/parallelize_llama.py,
# ``_save_list`` and ``_custom_policy``), so it recomputes half the block's matmuls.
SELECTIVE_EVERY_MATMUL = "every-matmul"
SELECTIVE_ALTERNATE_MATMUL = "alternate-matmul"
SELECTIVE_POLICIES = (SELECTIVE_EVERY_MATMUL, SELECTIVE_ALTERNATE_MATMUL)


# --------------------------------------------------------------------------------------------------
# Activations: what autograd saves, per token, for one layer
# --------------------------------------------------------------------------------------------------
# Regimes: "fp32" (everything 4 B), "amp" (fp32 parameters under torch.autocast: residual stream and
# norms in fp32, matmuls in 16 bit, every linear casts its own input), "half" (16-bit parameters, no
# autocast: residual and matmuls 16 bit, RMSNorm upcasts internally). LoRA with a 16-bit base is "half".
# Each entry: (elements per token, bytes, needed_by) where needed_by is None (always saved, the input
# gradient needs it) or the module paths / norm names whose weight gradient needs it; an entry is
# dropped when none of those train (frozen base under LoRA).


LedgerItem = tuple[int, int, tuple[str, ...] | None]
Ledger = tuple[LedgerItem, ...]


def _norm_out(out: int, res: int, c: int, regime: str, consumers: tuple[str, ...]) -> list[LedgerItem]:
    """A normalised tensor consumed by ``consumers`` linears: one shared copy, or one cast per linear."""
    if regime == "amp":
        return [(out, HALF, (m,)) for m in consumers]
    return [(out, c, consumers)]


def _rmsnorm(h: int, res: int, c: int, regime: str, name: str, consumers: tuple[str, ...]) -> list[LedgerItem]:
    # LlamaRMSNorm: x.to(float32); pow(2) saves the fp32 input; x * rsqrt(var) saves it and rsqrt;
    # weight * x.to(input_dtype) saves the normalised copy only when the weight trains.
    items: list[LedgerItem] = [(h, FP32, None), (1, FP32, None), (h, res, (name,))]
    if consumers:
        items += _norm_out(h, res, c, regime, consumers) if regime != "half" else [(h, c, consumers)]
    return items


def _layernorm(h: int, res: int, c: int, regime: str, consumers: tuple[str, ...]) -> list[LedgerItem]:
    # native_layer_norm saves its input and fp32 mean/rstd; its output is saved by the next linears.
    items: list[LedgerItem] = [(h, res, None), (2, FP32, None)]
    if consumers:
        items += _norm_out(h, res, c, regime, consumers)
    return items


def _llama_ledger(spec: ModelSpec, regime: str) -> list[LedgerItem]:
    h, q, kv, inter = (
        spec.hidden_size,
        spec.num_heads * spec.head_dim,
        spec.num_kv_heads * spec.head_dim,
        spec.intermediate_size,
    )
    res = FP32 if regime in ("fp32", "amp") else HALF
    c = FP32 if regime == "fp32" else HALF
    qkv = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    items = _rmsnorm(h, res, c, regime, "norm1", qkv)
    if spec.qk_norm:  # Qwen3/Gemma3 q/k RMSNorm: fp32 upcast + normalised copy of q and k
        items += [(q + kv, FP32, None), (q + kv, c, ("norm1",))]
    # rotary q and k, v; SDPA saves q, k, v, its output and the fp32 logsumexp; the output is
    # transposed to a contiguous copy that o_proj saves (transformers' sdpa_attention_forward).
    items += [(q, c, None), (kv, c, None), (kv, c, None), (q, c, None), (spec.num_heads, FP32, None)]
    items += [(q, c, ("self_attn.o_proj",))]
    if spec.norms_per_layer == 4:  # Gemma 2: post-attention norm before the residual add
        items += _rmsnorm(h, res, c, regime, "norm3", ())
    items += _rmsnorm(h, res, c, regime, "norm2", ("mlp.gate_proj", "mlp.up_proj"))
    # gated MLP: act(gate) saves gate; act*up saves both; down_proj saves the product. For a mixture
    # of experts ``inter`` is the width a token passes through (its experts_per_token experts and any
    # shared expert).
    items += [(inter, c, None), (inter, c, None), (inter, c, None), (inter, c, ("mlp.down_proj",))]
    if spec.experts_per_token:
        # transformers' expert loop gathers each token's hidden state for every expert it is routed
        # to (saved by the expert's first linears) and saves each expert's output for the multiply
        # by its routing weight; the router's logits and softmax are fp32 per expert
        k = spec.experts_per_token
        items += [(k * h, c, None), (k * h, c, None), (2 * spec.num_experts, FP32, None)]
    if spec.norms_per_layer == 4:
        items += _rmsnorm(h, res, c, regime, "norm4", ())
    return items


def _gelu_items(inter: int, c: int, consumer: str) -> list[LedgerItem]:
    # One-kernel GELU or SiLU: saves its input; the next linear saves the output. GPT-2's ``gelu_new``
    # counts as one kernel too: transformers writes it op by op (five saved tensors), but the bundled
    # trainer runs it as ``torch.nn.GELU(approximate="tanh")`` (``--fused-kernels``, on by default).
    return [(inter, c, None), (inter, c, (consumer,))]


def _gpt2_ledger(spec: ModelSpec, regime: str) -> list[LedgerItem]:
    h, inter = spec.hidden_size, spec.intermediate_size
    res = FP32 if regime in ("fp32", "amp") else HALF
    c = FP32 if regime == "fp32" else HALF
    drop = [(h, MASK, None)] if spec.resid_dropout > 0 else []
    items = _layernorm(h, res, c, regime, ("attn.c_attn",))
    # c_attn output (q, k, v are views of it) saved by SDPA, SDPA output + logsumexp, merged copy.
    items += [(3 * h, c, None), (h, c, None), (spec.num_heads, FP32, None), (h, c, ("attn.c_proj",))]
    items += drop
    items += _layernorm(h, res, c, regime, ("mlp.c_fc",))
    items += _gelu_items(inter, c, "mlp.c_proj")
    items += drop
    return items


def _bert_ledger(spec: ModelSpec, regime: str) -> list[LedgerItem]:
    h, inter = spec.hidden_size, spec.intermediate_size
    res = FP32 if regime in ("fp32", "amp") else HALF
    c = FP32 if regime == "fp32" else HALF
    drop = [(h, MASK, None)] if spec.resid_dropout > 0 else []
    qkv = ("attention.self.query", "attention.self.key", "attention.self.value")
    # the layer input is the previous LayerNorm's output, saved by the three projections
    items = _norm_out(h, res, c, regime, qkv)
    items += [(3 * h, c, None), (h, c, None), (spec.num_heads, FP32, None), (h, c, ("attention.output.dense",))]
    items += drop + [(h, res, None), (2, FP32, None)]  # post-norm LayerNorm input + mean/rstd
    items += _norm_out(h, res, c, regime, ("intermediate.dense",))
    items += _gelu_items(inter, c, "output.dense")
    items += drop + [(h, res, None), (2, FP32, None)]
    return items


@lru_cache(maxsize=4096)
def layer_bytes(spec: ModelSpec, regime: str, trained: frozenset[str] | None) -> tuple[int, int]:
    """(bytes per token saved by one block, bytes per token outside the blocks)."""
    if spec.family == "gpt2":
        items = _gpt2_ledger(spec, regime)
    elif spec.family == "bert":
        items = _bert_ledger(spec, regime)
    else:
        items = _llama_ledger(spec, regime)
    per_layer = 0
    for elems, nbytes, needed in items:
        if needed is None or trained is None or any(n in trained for n in needed):
            per_layer += elems * nbytes
    # outside the blocks: final norm (input + stats) and the head's saved input; dropout after embeddings
    h = spec.hidden_size
    res = FP32 if regime in ("fp32", "amp") else HALF
    c = FP32 if regime == "fp32" else HALF
    outside = h * res + 8 + (h * c if trained is None or "lm_head" in trained else 0)
    if spec.family == "bert" and spec.architecture == "BertForMaskedLM":
        outside += 3 * h * c  # MLM transform: dense output (GELU input), GELU output, LayerNorm stats
    if spec.resid_dropout > 0:
        outside += h * MASK
    return per_layer, outside


def selective_layer_bytes(spec: ModelSpec, regime: str, attention: str, policy: str = SELECTIVE_EVERY_MATMUL) -> int:
    """Bytes per token one block keeps under selective checkpointing besides its input: the output of
    the matmuls the policy saves (in the compute dtype) and of the fused attention kernel (its output
    and the fp32 log-sum-exp per head). ``policy`` (:data:`SELECTIVE_POLICIES`): every matmul (the
    trainer's ``selective_policy``), or every other one in forward order (torchtitan's "op" policy).
    Eager attention's score matrix, also a matmul output, is counted by the caller per sequence element
    squared."""
    c = FP32 if regime == "fp32" else HALF
    layers = max(1, spec.num_layers)
    block = [m for m in spec.linears if m.in_block]
    if policy == SELECTIVE_ALTERNATE_MATMUL:
        # torchtitan counts aten.mm calls inside the block and saves the 1st, 3rd, 5th, ...; the
        # block's linears run in the order the spec lists them (q, k, v, o, gate, up, down)
        block = block[::2]
    matmul_out = sum(m.out_features * m.count for m in block) // layers
    attn = spec.hidden_size * c + (spec.num_heads * FP32 if attention != "eager" else 0)
    return matmul_out * c + attn


def block_grad_bytes(spec: ModelSpec, regime: str) -> int:
    """Bytes per token of the gradient buffers alive at once inside one block's backward, at its widest
    point: a gated MLP's product ``act(gate) * up`` gets its incoming gradient and splits it into the
    gradients of both factors (three intermediate-wide tensors alive together: ``MulBackward0`` makes
    both before the incoming one is released); a plain MLP's activation gets its gradient and makes its
    input's (two). They are in the dtype of the activations (16 bit under autocast or 16-bit weights)."""
    c = FP32 if regime == "fp32" else HALF
    width = 3 if spec.family not in ("gpt2", "bert") else 2
    return width * spec.intermediate_size * c


def attention_matrix_bytes(spec: ModelSpec, regime: str) -> int:
    """Eager attention, per layer per sequence element squared per head: the softmax output, which
    Llama-style eager attention computes in fp32 and copies back to 16 bit for the probs @ V matmul,
    while GPT-2/BERT keep it in the compute dtype (plus dropout mask and output when p > 0) except
    under autocast, which computes it in fp32 and feeds the matmul a 16-bit copy. Soft-capped scores
    (Gemma 2) add tanh's saved output in the compute dtype."""
    c = FP32 if regime == "fp32" else HALF
    if spec.family in ("gpt2", "bert"):
        if regime == "amp":
            # autocast runs softmax in fp32 (its output saved for the backward), and the probs @ V
            # matmul saves a 16-bit copy of its input: GPT-2's cast to the value dtype, or autocast's own
            per = FP32 + HALF
            return per + (MASK if spec.attn_dropout > 0 else 0)
        per = c
    else:
        per = FP32 + (c if c != FP32 else 0)
        if spec.attn_softcap:
            # Gemma 2 caps the scores first (divide, tanh, multiply): tanh saves its output
            per += c
    if spec.attn_dropout > 0:
        per += MASK + c
    return per
