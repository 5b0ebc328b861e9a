"""The training stacks a plan can describe (``--engine``): what each one does that the memory and step
models have to know.

A plan is for a run on one engine. Stacks differ where the planner's other inputs cannot say so: how
gradients are reduced while they accumulate, how the loss treats the logits, how FSDP runs 16-bit
compute over fp32 weights, whether the output head is its own matrix, how LoRA adapters are run and
what FSDP gathers of a QLoRA model. Each :class:`Engine` is that small table, read from each stack's
own code and documentation (cited per entry below). ``estimate_memory`` and the step model read the
engine of the :class:`~gpuplanner.plan.setup.TrainSetup`; nothing else passes these behaviours.

Pure: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from gpuplanner.plan.model_shape import ModelSpec

# --- the behaviours ----------------------------------------------------------------------------------
# Gradient reduction while micro-steps accumulate, under FSDP/ZeRO: reduce-scatter after every
# micro-step, so only gradient shards persist ("reduce-each"), or skip it until the last micro-step, which
# keeps the whole unsharded gradient on every GPU in between ("no-sync": FSDP1's ``no_sync()``, "will
# accumulate the full model gradients (instead of gradient shards) until the eventual sync",
# torch.distributed.fsdp docs).
REDUCE_EACH = "reduce-each"
NO_SYNC = "no-sync"
GRAD_REDUCTIONS = (REDUCE_EACH, NO_SYNC)
# 16-bit compute over fp32 master weights: ``torch.autocast`` (the residual stream and norms stay fp32 and
# every matmul casts its input), or the weights themselves cast to 16 bit for forward and backward
# ("param-cast": FSDP's ``MixedPrecision``/``MixedPrecisionPolicy(param_dtype=bf16)``, DeepSpeed's bf16
# engine), where every activation is 16 bit.
AUTOCAST = "autocast"
PARAM_CAST = "param-cast"
MIXED_PRECISION_KINDS = (AUTOCAST, PARAM_CAST)
# The loss over the logits (memory.LOSS_KINDS): upcast to fp32 first, cross-entropy on the 16-bit logits,
# or on 16-bit logits in chunks (the whole logits never in fp32 at once).
LOSS_FP32 = "fp32"
LOSS_HALF = "half"
LOSS_CHUNKED_HALF = "chunked-half"
# How LoRA adapters run: peft's unfused path (dropout, a cast of the input to the adapters' fp32, two thin
# matmuls, scaling and add, each a kernel of its own), a stack's own 16-bit adapter modules (no fp32 cast,
# no dropout by default), or fused kernels that fold the adapter into the base matmul's epilogue.
LORA_PEFT = "peft"
LORA_NATIVE = "native-16bit"
LORA_FUSED = "fused"
LORA_PATHS = (LORA_PEFT, LORA_NATIVE, LORA_FUSED)
# Share of peft's adapter traffic (step model ``adapter_bytes``) each path moves. peft's 40 bytes per token
# and adapted feature are counted in resources/catalog/speed_model.toml; a 16-bit module without dropout
# or fp32 cast moves the 2-byte tensors of the same chain without the 4-byte copies and the dropout mask,
# about half; fused kernels move none beyond the base matmul's own input and output.
ADAPTER_TRAFFIC = {LORA_PEFT: 1.0, LORA_NATIVE: 0.5, LORA_FUSED: 0.0}
# Bytes per logit element the loss moves through memory (step model), per loss kind: fp32 logits written,
# read by the softmax, the gradient written and read back (16); 16-bit logits and a 16-bit gradient (8);
# a fused/chunked linear cross-entropy never writes the whole logits (the chunk stays in cache): 4.
LOSS_TRAFFIC = {LOSS_FP32: 16.0, LOSS_HALF: 8.0, LOSS_CHUNKED_HALF: 4.0}
# What FSDP gathers of a QLoRA model's quantized linears: 16-bit layers (dequantized before sharding) or the
# packed 4-bit storage (``bnb_4bit_quant_storage=bfloat16`` makes the 4-bit bytes FSDP-shardable, and each
# unit's all-gather moves those packed bytes: peft's and accelerate's FSDP-QLoRA).
GATHER_HALF = "half"
GATHER_PACKED = "packed-4bit"


@dataclass(frozen=True)
class Engine:
    """One training stack's behaviours (the module comment above names each vocabulary)."""

    name: str
    label: str
    grad_reduction: str
    mixed_precision: str  # under FSDP/ZeRO with *-mixed precision
    loss_full: str  # full fine-tuning and pre-training
    loss_adapters: str  # LoRA/QLoRA
    lora_path: str
    untied_head: bool  # keeps its own output head although the config ties it to the embeddings
    qlora_gather: str
    # clips the gradients' global norm every optimizer step (reads every gradient, then scales it)
    clips_gradients: bool = True
    # a pre-training stack (large runs of a few architectures, tuned kernels): its plans take the
    # pre-training band of the speed's likely range, every other plan the fine-tuning band
    pretraining: bool = False
    # torchtitan's selective checkpointing keeps every other matmul output (activation_ledger)
    selective_policy: str = "every-matmul"
    # --- memory side ---
    # LoRA under FSDP: the adapters share an FSDP unit with the frozen weights they adapt (FSDP1 with
    # ``use_orig_params=True`` and one unit per block), so each unit's flat gradient covers every parameter
    # of the block. torch.distributed.fsdp docs: FSDP "supports mixing frozen and non-frozen, but we
    # recommend not doing so since then the gradient memory usage will be higher than expected (namely,
    # equivalent to not freezing those parameters)". False where the adapters are wrapped apart (peft's
    # ``fsdp_auto_wrap_policy`` under accelerate) or sharded per parameter (FSDP2's ``fully_shard``).
    lora_fsdp_shared_units: bool = False
    # FSDP1's flat parameters (accelerate's and Lightning's FSDP): each unit's parameters are views
    # (``torch.split``, torch/distributed/fsdp/_flat_param.py) of one FlatParameter, so autograd makes every
    # parameter's gradient and then their concatenation for the flat parameter (SplitBackward) once the
    # unit's last parameter has one. The root unit holds the embeddings (used first) and the output head
    # (used last): the head's gradient lives through the whole backward and, as it ends, the root's
    # per-parameter gradients and their flat copy are alive together. FSDP2 shards per parameter.
    fsdp_flat_params: bool = False
    # --- speed side ---
    # a block's norms, rotary embedding and activations run as fused kernels (step model: the fitted
    # elementwise_bytes); False: as chains of eager PyTorch ops (step_model.EAGER_BYTES_*, counted)
    fused_elementwise: bool = False

    def __post_init__(self) -> None:
        checks = (
            ("grad_reduction", GRAD_REDUCTIONS),
            ("mixed_precision", MIXED_PRECISION_KINDS),
            ("loss_full", tuple(LOSS_TRAFFIC)),
            ("loss_adapters", tuple(LOSS_TRAFFIC)),
            ("lora_path", LORA_PATHS),
            ("qlora_gather", (GATHER_HALF, GATHER_PACKED)),
            ("selective_policy", ("every-matmul", "alternate-matmul")),
        )
        for name, allowed in checks:
            if getattr(self, name) not in allowed:
                raise ValueError(f"engine {self.name}: {name} must be one of {', '.join(allowed)}")
        flags = (self.untied_head, self.clips_gradients, self.lora_fsdp_shared_units, self.fsdp_flat_params)
        if not all(isinstance(v, bool) for v in flags):
            raise ValueError(
                f"engine {self.name}: untied_head, clips_gradients, lora_fsdp_shared_units, fsdp_flat_params "
                "are true or false"
            )

    def loss(self, method: str) -> str:
        return self.loss_full if method == "full" else self.loss_adapters

    @property
    def adapter_traffic(self) -> float:
        return ADAPTER_TRAFFIC[self.lora_path]

    def loss_traffic(self, method: str) -> float:
        return LOSS_TRAFFIC[self.loss(method)]


ENGINES: dict[str, Engine] = {
    # The bundled trainer (trainer/): transformers models, peft adapters, transformers' ForCausalLMLoss
    # (``logits.float()`` first). Under --fsdp it shards with FSDP2 ``fully_shard`` and a
    # ``MixedPrecisionPolicy(param_dtype=<16 bit>, reduce_dtype=fp32)`` (trainer/fsdp.py) and
    # reduce-scatters every micro-step's gradients (FSDP2's default); it clips to ``max_grad_norm`` 1.0
    # (trainer/config.py, trainer/loop.py). It refuses QLoRA under FSDP
    # (trainer/config.py), so its QLoRA gather is never used.
    "bundled": Engine(
        "bundled", "bundled trainer", REDUCE_EACH, PARAM_CAST, LOSS_FP32, LOSS_FP32, LORA_PEFT, False, GATHER_HALF
    ),
    # transformers' Trainer (+ peft). --sharding fsdp is FSDP1 through accelerate, and the Trainer runs every
    # micro-step but the last under ``accelerator.no_sync`` (transformers/trainer.py ``_inner_training_loop``:
    # "no_sync" unless DeepSpeed; ``max_grad_norm`` 1.0 by default), so FSDP1 keeps the full gradient; accelerate's FSDP plugin sets
    # ``MixedPrecision(param_dtype=bf16)`` for bf16 runs. --sharding zero2 is DeepSpeed ZeRO-2, which
    # accumulates into its partitioned buffers. QLoRA under FSDP stores 4-bit weights in bf16 bytes
    # (peft docs, "FSDP + QLoRA": ``bnb_4bit_quant_storage``) and gathers those.
    "hf-trainer": Engine(
        "hf-trainer",
        "transformers Trainer + peft",
        NO_SYNC,
        PARAM_CAST,
        LOSS_FP32,
        LOSS_FP32,
        LORA_PEFT,
        False,
        GATHER_PACKED,
        fsdp_flat_params=True,
    ),
    # torchtitan (github:pytorch/torchtitan, parallelize_llama.py ``apply_fsdp``: FSDP2 with
    # ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, no autocast in train.py; gradients
    # reduce-scattered every micro-step; the loss upcasts the logits to fp32; ``selective_ac_option = 'op'``
    # saves "output of all compute ops, except every second mm").
    "torchtitan": Engine(
        "torchtitan",
        "torchtitan",
        REDUCE_EACH,
        PARAM_CAST,
        LOSS_FP32,
        LOSS_FP32,
        LORA_NATIVE,
        False,
        GATHER_HALF,
        selective_policy="alternate-matmul",
        pretraining=True,
    ),
    # torchtune (github:pytorch/torchtune recipes): FSDP2 ``fully_shard`` without a no-sync switch (reduce
    # each micro-step); models loaded in the training dtype; the loss upcasts to fp32
    # (``CEWithChunkedOutputLoss`` upcasts each chunk; all chunks are alive for the backward); its own
    # ``LoRALinear`` in the model dtype (torchtune/modules/peft/lora.py), dropout 0 by default.
    "torchtune": Engine(
        "torchtune",
        "torchtune",
        REDUCE_EACH,
        PARAM_CAST,
        LOSS_FP32,
        LOSS_FP32,
        LORA_NATIVE,
        False,
        GATHER_HALF,
        clips_gradients=False,  # recipes: ``cfg.get("clip_grad_norm", None)``, unset in the shipped configs
    ),
    # DeepSpeed (ZeRO-2/3) with a transformers model: ZeRO reduces (ZeRO-3: reduce-scatters) each
    # micro-step's gradients into partitioned buffers; its bf16 engine casts the module to bf16 and keeps
    # the fp32 master copy in the optimizer (deepspeed/runtime/bf16_optimizer.py).
    "deepspeed": Engine(
        "deepspeed", "DeepSpeed", REDUCE_EACH, PARAM_CAST, LOSS_FP32, LOSS_FP32, LORA_PEFT, False, GATHER_HALF
    ),
    # LitGPT (github:Lightning-AI/litgpt@00af8b0d): its own GPT with a separate ``lm_head`` (no tying, model.py);
    # full fine-tunes run accumulating micro-steps under ``fabric.no_backward_sync`` (FSDP1's no_sync,
    # finetune/full.py); the full fine-tune's loss is cross-entropy on the 16-bit logits, LoRA/QLoRA's
    # ``chunked_cross_entropy`` over 128-token chunks (utils.py); its own LoRA layers in the model dtype.
    # Memory side: finetune/lora.py shards with ``FSDPStrategy(auto_wrap_policy={Block}, ...)``, one FSDP1 unit
    # per block holding its frozen weights and its adapters, and Lightning Fabric's FSDPStrategy sets
    # ``use_orig_params=True`` (lightning/fabric/strategies/fsdp.py), so a block's flat gradient is the whole
    # block's; its LoRA micro-steps accumulate under ``fabric.no_backward_sync`` too (FSDP1's no_sync).
    "litgpt": Engine(
        "litgpt",
        "LitGPT",
        NO_SYNC,
        AUTOCAST,
        LOSS_HALF,
        LOSS_CHUNKED_HALF,
        LORA_NATIVE,
        True,
        GATHER_HALF,
        clips_gradients=False,  # args.py ``TrainArgs.max_norm = None``: clipped only when asked
        lora_fsdp_shared_units=True,
        fsdp_flat_params=True,
    ),
    # llm-foundry on Composer (github:mosaicml/llm-foundry, composer/trainer/trainer.py): under FSDP Composer
    # syncs every micro-batch (``MULTI_AUTO_SYNC``; no_sync would keep full gradients); its FSDP
    # ``mixed_precision`` DEFAULT/PURE casts the parameters to bf16; the loss upcasts to fp32.
    "llm-foundry": Engine(
        "llm-foundry",
        "llm-foundry (Composer)",
        REDUCE_EACH,
        PARAM_CAST,
        LOSS_FP32,
        LOSS_FP32,
        LORA_PEFT,
        False,
        GATHER_HALF,
        pretraining=True,
        # MPT's blocks (llm-foundry models/mpt/modeling_mpt.py): LayerNorm as one torch.nn.functional.layer_norm
        # kernel (low_precision_layernorm), a GELU MLP, ALiBi inside the attention kernel, no rotary embedding
        fused_elementwise=True,
    ),
    # A transformers model (+ peft) in the user's own training loop, the loss taken with ``nn.CrossEntropyLoss``
    # on the logits the model returns: since transformers 4.46 a causal LM returns its logits in the model's
    # 16-bit dtype when no labels are passed (models/llama/modeling_llama.py ``LlamaForCausalLM.forward``; the
    # ``logits.float()`` upcast lives in ``loss/loss_utils.py`` ``ForCausalLMLoss``, which only runs with
    # labels), so the cross-entropy runs on 16-bit logits through the loop's shifted copy. Everything else
    # as the Trainer's, except that FSDP reduces each micro-step (no ``no_sync`` unless the loop asks for it).
    # universal-llm-trainer (github:ljm565/universal-llm-trainer, src/models/llama3.py) is such a loop.
    "hf-loop": Engine(
        "hf-loop",
        "transformers model + peft in your own loop",
        REDUCE_EACH,
        PARAM_CAST,
        LOSS_HALF,
        LOSS_HALF,
        LORA_PEFT,
        False,
        GATHER_PACKED,
    ),
    # Unsloth (github:unslothai/unsloth): fused LoRA kernels (``fast_lora``: the adapter matmuls folded
    # into the MLP and QKV kernels) and a fused linear cross-entropy (``fast_cross_entropy_loss`` over chunks
    # of the vocabulary, never the whole fp32 logits).
    "unsloth": Engine(
        "unsloth",
        "Unsloth",
        REDUCE_EACH,
        AUTOCAST,
        LOSS_CHUNKED_HALF,
        LOSS_CHUNKED_HALF,
        LORA_FUSED,
        False,
        GATHER_HALF,
        # Triton kernels for RMSNorm, RoPE and SwiGLU (unsloth/kernels/rms_layernorm.py, rope_embedding.py, swiglu.py)
        fused_elementwise=True,
    ),
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
DEFAULT_ENGINE = "bundled"


def engine_named(name: str) -> Engine:
    """The engine called ``name`` (a KeyError names it; TrainSetup checks the name first)."""
    return ENGINES[name]


def as_run(spec: ModelSpec, engine: Engine) -> ModelSpec:
    """``spec`` as ``engine`` builds it: with its own output head where the engine unties a tied one."""
    if not (engine.untied_head and spec.tied_embeddings):
        return spec
    heads = [m for m in spec.linears if m.is_output and m.tied]
    if not heads:
        return spec
    head = heads[0]
    extra = head.weight_params
    linears = tuple(replace(m, tied=False) if m is head else m for m in spec.linears)
    tensors = (*spec.tensors, (extra, head.out_features, head.in_features, 1))
    return replace(
        spec,
        linears=linears,
        tensors=tensors,
        tied_embeddings=False,
        n_params=spec.n_params + extra,
        n_active_params=spec.n_active_params + extra if spec.n_active_params else 0,
    )


def mixed_precision_of(engine: Engine, precision: str, sharding: str, gpus: int) -> str:
    """How ``engine`` runs ``*-mixed`` precision for this layout: its sharded policy where FSDP or ZeRO
    shards over several GPUs, autocast otherwise (and for fp32 or pure 16-bit weights, which have no
    fp32 weight to cast)."""
    if not precision.endswith("-mixed") or gpus < 2 or sharding not in ("fsdp", "zero2"):
        return AUTOCAST
    return engine.mixed_precision


def keeps_full_gradients(engine: Engine, sharding: str, gpus: int, grad_accum: int) -> bool:
    """Whether every GPU holds the whole unsharded gradient between micro-steps: FSDP over several GPUs with
    accumulation on an engine that skips the reduction until the last micro-step."""
    return engine.grad_reduction == NO_SYNC and sharding == "fsdp" and gpus > 1 and grad_accum > 1


PRE_TRAINING = "pre-training"
FINE_TUNING = "fine-tuning"
REGIMES = (PRE_TRAINING, FINE_TUNING)


def speed_regime(engine_name: str, method: str) -> str:
    """The regime whose errors set a plan's likely speed range: pre-training for a full run on a
    pre-training stack (torchtitan, llm-foundry), fine-tuning otherwise."""
    return PRE_TRAINING if engine_named(engine_name).pretraining and method == "full" else FINE_TUNING
