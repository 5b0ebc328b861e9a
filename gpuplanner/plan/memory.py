"""Peak GPU memory of one training step, per GPU, with a breakdown.

The model follows what a PyTorch run on the plan's engine (``setup.engine``, gpuplanner/plan/engines.py:
the bundled trainer, transformers + peft, torchtitan ...) actually allocates (docs/planning.md: "How GPU
Planner estimates training memory"):
persistent state (weights, gradients, optimizer states), the tensors autograd saves for backward
(counted tensor by tensor for each layer kind, with their real dtypes), the loss region around the
logits, and the transients of the optimizer step. The peak is the largest of three moments:
start of backward, end of backward and the optimizer step. CUDA context and allocator slack are
added on top.

Pure Python; every call is a handful of arithmetic operations on numbers precomputed per spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuplanner.plan import engines, memory_allocator
from gpuplanner.plan.activation_ledger import (
    FP32,
    HALF,
    attention_matrix_bytes,
    block_grad_bytes,
    layer_bytes,
    selective_layer_bytes,
)
from gpuplanner.plan.model_shape import ModelSpec
from gpuplanner.plan.model_spec import resolve_targets
from gpuplanner.plan.setup import PlanInputError, TrainSetup

GIB = 1024**3

# --- fixed costs -----------------------------------------------------------------------------------
# CUDA context + cuBLAS/cuDNN handles and workspaces, as nvidia-smi shows for a process that has
# only initialised torch and run one matmul (about 0.45-0.55 GiB on H100/A100 with CUDA 12 lazy loading).
# PyTorch's maintainers put the context at "around 400MB if CUDA >= 11.7 is used and lazy module
# loading enabled (default in PyTorch)" and ">1000MB" before lazy loading (pytorch/pytorch#109888,
# #107667). No public per-generation figures were found; where the dataset's sources measured, they
# measured allocated, active or reserved bytes, which leave the context out.
CUDA_CONTEXT_BYTES = int(0.5 * GIB)


# The caching allocator reserves more than it hands out: a share of the step's transient bytes, fitted
# over the published reserved peaks (gpuplanner/plan/memory_allocator.py).

# --- bytes per element ----------------------------------------------------------------------------
# bitsandbytes NF4 with double quantization (QLoRA defaults): 4-bit values, one 8-bit absmax per
# 64-element block, plus one fp32 second-level constant per 256 blocks.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
# bitsandbytes 8-bit Adam: two uint8 states, one fp32 absmax per 256-element block for each state.
ADAM8_BYTES_PER_PARAM = 2 + 2 * 4 / 256
# DeepSpeed ZeRO-2 default reduce_bucket_size (elements), allocated in the gradient dtype.
ZERO2_BUCKET_ELEMS = 500_000_000
# Cross-entropy over fp32 logits (transformers' ForCausalLMLoss upcasts with logits.float()):
# at the start of backward the log-softmax output (4 B), nll_loss's gradient (4 B) and
# log_softmax_backward's result (4 B) are alive together; during the forward the 16-bit logits,
# their fp32 copy and the log-softmax output (2+4+4 B) are, which is never more.
LOGITS_BYTES_PER_ELEM = 12
# BERT's loss (nn.CrossEntropyLoss on the scores as they are): log-softmax output, nll grad and
# log-softmax grad in the compute dtype.
BERT_LOGITS_HALF_BYTES = 3 * HALF
# Gemma 2 soft-caps the logits (divide, tanh, multiply): tanh saves its output in 16 bit and the
# capped copy is upcast, roughly two extra 16-bit copies.
SOFTCAP_EXTRA_BYTES = 2 * HALF

# How the loss treats the logits (the engine's ``loss``, gpuplanner/plan/engines.py): bytes per score
# element at the loss region's peak, and the extra bytes when the logits are soft-capped.
LOSS_FP32 = engines.LOSS_FP32  # transformers' ForCausalLMLoss: logits.float() first (the bundled trainer)
LOSS_HALF = engines.LOSS_HALF  # nn.CrossEntropyLoss on 16-bit logits as they are, through a shifted copy
LOSS_CHUNKED_HALF = engines.LOSS_CHUNKED_HALF  # LitGPT: 16-bit logits kept, log-softmax per 128-token chunk
LOSS_KINDS = (LOSS_FP32, LOSS_HALF, LOSS_CHUNKED_HALF)
# half: during the forward the logits, their shifted contiguous copy (``logits[:, :-1].reshape``) and
# the 16-bit log-softmax output are alive together; in the backward the log-softmax output, nll's
# gradient and log_softmax_backward's result are: 3 x 2 B either way. Soft-capping keeps tanh's
# 16-bit output (saved for its backward) beside them.
# chunked-half: the 16-bit logits stay referenced until the step ends and every chunk's 16-bit
# log-softmax output is saved for the backward, which then works one chunk at a time: 2 x 2 B.
LOSS_BYTES = {LOSS_FP32: LOGITS_BYTES_PER_ELEM, LOSS_HALF: 3 * HALF, LOSS_CHUNKED_HALF: 2 * HALF}
LOSS_SOFTCAP_BYTES = {LOSS_FP32: SOFTCAP_EXTRA_BYTES, LOSS_HALF: HALF, LOSS_CHUNKED_HALF: HALF}


# How 16-bit compute over fp32 weights is run (the engine's ``mixed_precision`` where it shards): under
# ``torch.autocast`` (single GPU and DDP: the residual stream and norms stay fp32 and every matmul casts
# its input), or by casting the weights themselves to 16 bit for the forward and backward (FSDP's
# ``MixedPrecisionPolicy(param_dtype=bf16)``, as torchtitan and the bundled trainer run it, DeepSpeed's bf16
# engine: no fp32 weight is left to autocast, every activation is 16 bit, fp32 only inside the norms and
# the loss).
MIXED_AUTOCAST = engines.AUTOCAST
MIXED_PARAM_CAST = engines.PARAM_CAST

# How FSDP accumulates gradients over micro-steps (the engine's ``grad_reduction``): reduce-scatter after
# every micro-step, so only gradient shards persist (the bundled trainer, FSDP2, torchtitan, DeepSpeed
# ZeRO, Composer), or skip the reduction until the last micro-step under FSDP1's ``no_sync()`` (the
# transformers Trainer through accelerate, LitGPT through Lightning Fabric), which "will accumulate the full
# model gradients (instead of gradient shards) until the eventual sync" (torch.distributed.fsdp docs).
FSDP_REDUCE_EACH = engines.REDUCE_EACH
FSDP_NO_SYNC = engines.NO_SYNC

# What a reported peak counts (``MemoryBreakdown.measured``): the allocator's live tensors
# (torch.cuda.max_memory_allocated, and "active" bytes, which differ by at most a block's rounding),
# what the caching allocator holds from the driver (memory_reserved: allocated plus slack), or what
# nvidia-smi shows for the process (reserved plus the CUDA context).
MEASURES = ("allocated", "active", "reserved", "nvidia-smi")


@dataclass(frozen=True)
class MemoryBreakdown:
    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    overhead: int
    peak_moment: str = "start-of-backward"
    source: str = "formula"
    notes: tuple[str, ...] = ()
    # the parts of ``overhead`` that are not tensors: the CUDA context and the caching allocator's slack
    cuda_context: int = 0
    allocator_slack: int = 0
    # also part of ``overhead``: memory the allocator keeps reserved in the pools of FSDP's communication
    # streams while the compute stream peaks (see ``_stream_pools``)
    stream_pools: int = 0
    # the timeline the peak is the largest point of: live tensors (allocated bytes) at the start of the
    # backward, the end of the backward and the optimizer step; 0 where a model did not say
    start_of_backward: int = 0
    end_of_backward: int = 0
    optimizer_step: int = 0
    # what the allocator may further keep reserved when batches vary in length (not part of ``total``:
    # cached-but-free blocks are released before an out-of-memory error, memory_allocator.py)
    variable_length_slack: int = 0
    # the step's transient bytes (allocated and freed within it), which both slacks are shares of
    transient: int = 0

    @property
    def allocated(self) -> int:
        """The allocated peak (torch.cuda.max_memory_allocated)."""
        return self.total - self.cuda_context - self.allocator_slack - self.stream_pools

    @property
    def reserved(self) -> int:
        """What the caching allocator holds at the peak with fixed-shape batches (memory_reserved)."""
        return self.allocated + self.allocator_slack + self.stream_pools

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.overhead

    def measured(self, measure: str, lengths: str = "fixed", capacity: int | None = None) -> int:
        """The peak as a given tool reports it (one of :data:`MEASURES`); ``total`` is what the GPU must hold.

        ``lengths`` ``variable``: batches of varying length, whose cached blocks add
        ``variable_length_slack`` to reserved and nvidia-smi; ``capacity`` (the card's bytes): the most the
        allocator can reserve (it releases its cache before it fails)."""
        if measure not in MEASURES:
            raise PlanInputError("measure", f"must be one of {', '.join(MEASURES)}, got {measure!r}")
        if lengths not in memory_allocator.LENGTHS:
            raise PlanInputError("lengths", f"must be one of {', '.join(memory_allocator.LENGTHS)}, got {lengths!r}")
        if measure in ("allocated", "active"):
            return self.allocated
        extra = self.variable_length_slack if lengths == "variable" else 0
        if measure == "reserved":
            held = self.reserved + extra
            return held if capacity is None else max(self.reserved, min(held, capacity - self.cuda_context))
        held = self.total + extra
        return held if capacity is None else max(self.total, min(held, capacity))

    def as_gib(self) -> dict[str, float]:

        def g(v: float) -> float:
            return round(v / GIB, 3)

        return {
            "weights_gib": g(self.weights),
            "gradients_gib": g(self.gradients),
            "optimizer_gib": g(self.optimizer),
            "activations_gib": g(self.activations),
            "logits_gib": g(self.logits),
            "overhead_gib": g(self.overhead),
            "total_gib": g(self.total),
            # the allocated peak, and what the allocator reserves at it (fixed-shape batches); ``total_gib``
            # (reserved + the CUDA context, what nvidia-smi shows) is what "fits" is judged on
            "allocated_gib": g(self.allocated),
            "reserved_gib": g(self.reserved),
            # the further cache batches of varying length can leave reserved (released before an OOM)
            "variable_length_slack_gib": g(self.variable_length_slack),
            # parts of overhead_gib
            "cuda_context_gib": g(self.cuda_context),
            "allocator_slack_gib": g(self.allocator_slack),
            "stream_pools_gib": g(self.stream_pools),
            # the timeline: live tensors at each phase of a step (the largest is the peak, ``peak_moment``)
            "start_of_backward_gib": g(self.start_of_backward),
            "end_of_backward_gib": g(self.end_of_backward),
            "optimizer_step_gib": g(self.optimizer_step),
        }


# --------------------------------------------------------------------------------------------------
# Estimator
# --------------------------------------------------------------------------------------------------


def _score_elems(spec: ModelSpec, micro_batch: int, tokens: int) -> int:
    """Scores the loss runs over: the vocabulary at every token for a language model, one row of
    labels per sequence for a sequence classifier (no vocabulary-sized logits at all)."""
    if spec.architecture.endswith("ForSequenceClassification"):
        labels = next((m.out_features for m in spec.linears if m.is_output), 2)
        return micro_batch * labels
    return tokens * spec.vocab_size


def _regime(setup: TrainSetup) -> str:
    if setup.precision == "fp32":
        return "fp32"
    if setup.method == "lora":
        return "half"  # base loaded in 16 bit: autocast is a no-op on the frozen layers
    if setup.method == "qlora":
        if setup.sharding == "fsdp" and setup.gpus > 1:
            # sharded QLoRA is never prepared with prepare_model_for_kbit_training (TRL's SFTTrainer: "one
            # should never call peft_module_casting_to_bf16 or prepare_model_for_kbit_training when doing
            # QLoRA + FSDP / DS-Zero3"; Answer.AI's fsdp_qlora train.py does not): norms stay 16 bit
            return "half"
        return "amp"  # prepare_model_for_kbit_training casts norms/embeddings to fp32
    return "amp" if setup.precision.endswith("mixed") else "half"


def trainable_params(spec: ModelSpec, setup: TrainSetup) -> int:
    if setup.uses_adapters:
        from gpuplanner.plan.model_spec import lora_trainable_params

        return lora_trainable_params(spec, setup.lora_rank, tuple(setup.lora_targets))
    return spec.n_params


@lru_cache(maxsize=4096)
def _trained_modules(spec: ModelSpec, method: str, targets: tuple[str, ...]) -> frozenset[str] | None:
    if method == "full":
        return None  # everything trains
    return frozenset(m.path for m in resolve_targets(spec, targets))


def _optimizer_state_bytes(spec: ModelSpec, setup: TrainSetup, trainable: int, state_b: int) -> tuple[int, int]:
    """(persistent state bytes, transient bytes at the step) for all trainable params on one replica."""
    opt = setup.optimizer
    full = setup.method == "full"
    if opt in ("adamw", "adamw-fused"):
        state = 2 * state_b * trainable  # exp_avg + exp_avg_sq in the parameter dtype
        # foreach AdamW materialises sqrt(exp_avg_sq)+eps for every tensor at once (one
        # parameter-sized buffer); the fused kernel works in place.
        transient = state_b * trainable if opt == "adamw" else 0
        return state, transient
    if opt == "adamw-8bit":
        small = spec.small_tensor_params if full else 0
        big = max(0, trainable - small)
        return int(ADAM8_BYTES_PER_PARAM * big) + 2 * FP32 * small, 0
    if opt == "sgd":
        return state_b * trainable, 0  # one momentum buffer
    # adafactor (factored second moment, no first moment): rows + cols per matrix
    if full:
        elems = spec.adafactor_state_elems
        largest = spec.largest_tensor
    else:
        mods = resolve_targets(spec, tuple(setup.lora_targets))
        r = setup.lora_rank
        elems = sum((r + m.in_features + r + m.out_features) * m.count for m in mods)
        largest = max((r * max(m.in_features, m.out_features) for m in mods), default=0)
    # the update for one tensor at a time: the squared gradient and the update, fp32
    return FP32 * elems, 2 * FP32 * largest


def _stream_pools(shard: str, grad_shards: int, root_gather: int) -> tuple[int, int] | None:
    """(reduce-scatter pool, all-gather pool) bytes that FSDP's communication streams keep reserved.

    The caching allocator keeps one pool per CUDA stream, and a block freed in one stream's pool is not
    reused by another. FSDP2 allocates each reduce-scatter's output, which becomes the parameters'
    sharded ``.grad``, in its reduce-scatter stream (``foreach_reduce`` in
    ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: "The RS output is allocated in the RS
    stream and used in the default stream (for optimizer)"), so after the first step that pool holds
    every gradient shard even while ``zero_grad(set_to_none=True)`` has freed them and the compute stream
    peaks; and it allocates each all-gather's flat output buffer in its copy-in stream
    (``foreach_all_gather``), whose pool keeps the largest one: the root unit (embeddings, head, final
    norm). Neither is in ``max_memory_allocated`` at the compute stream's peak; both are in
    ``memory_reserved`` and in what nvidia-smi shows. None without FSDP.
    """
    if shard != "fsdp":
        return None
    return grad_shards, root_gather


def estimate_memory(spec: ModelSpec, setup: TrainSetup) -> MemoryBreakdown:
    """Peak memory per GPU for one training step of ``spec`` under ``setup``, as ``setup.engine`` runs it
    (gpuplanner/plan/engines.py): its loss, its FSDP mixed-precision policy and gradient reduction, its
    output head, its QLoRA gathers and its selective-checkpointing policy.
    """
    engine = engines.engine_named(setup.engine)
    spec = engines.as_run(spec, engine)
    loss = engine.loss(setup.method)
    selective_policy = engine.selective_policy
    mixed_precision = engines.mixed_precision_of(engine, setup.precision, setup.sharding, setup.gpus)
    n = spec.n_params
    gpus = setup.gpus
    shard = setup.sharding if gpus > 1 else "none"
    regime = _regime(setup)
    if regime == "amp" and mixed_precision == MIXED_PARAM_CAST and setup.method == "full":
        regime = "half"  # no autocast: the 16-bit weights make every activation 16 bit
    pure_half = setup.precision == "bf16"
    notes: list[str] = []

    # ---- persistent state, whole model (one replica) ----
    if setup.method == "full":
        trainable = n
        param_b = HALF if pure_half else FP32
        weights = param_b * n
        grad_b = param_b
        state_b = param_b
    else:
        trainable = trainable_params(spec, setup)
        base_b = FP32 if setup.precision == "fp32" else HALF
        if setup.method == "qlora":
            q = spec.quantizable_params
            weights = int(NF4_BYTES_PER_PARAM * q) + FP32 * (n - q)
            notes.append(
                "QLoRA: block linears in NF4 with double quantization; embeddings, head and norms cast to fp32"
            )
        else:
            weights = base_b * n
        weights += FP32 * trainable  # peft keeps adapters in fp32
        grad_b = state_b = FP32
    grads = grad_b * trainable
    opt_state, opt_transient = _optimizer_state_bytes(spec, setup, trainable, state_b)

    # ---- sharding ----
    compute_b = FP32 if setup.precision == "fp32" else HALF
    grad_extra = 0
    weight_extra = 0
    root_grad_extra = 0  # FSDP1's root unit: per-parameter gradients and their flat copy at the backward's end
    gather_b = compute_b
    no_sync = engines.keeps_full_gradients(engine, shard, gpus, setup.grad_accum)
    if shard == "fsdp":
        weights_sh = -(-weights // gpus)
        grads = -(-grads // gpus)
        opt_state = -(-opt_state // gpus)
        opt_transient = -(-opt_transient // gpus)
        # FSDP gathers the root unit (embeddings, head, final norm) for the whole step and each block
        # while it runs, prefetching the next one; the block's full gradient exists until it is
        # reduce-scattered.
        gather_b = compute_b if setup.method == "full" else (HALF if setup.method == "qlora" else compute_b)
        layer_gather = gather_b * spec.layer_params
        if setup.method == "qlora" and engine.qlora_gather == engines.GATHER_PACKED:
            # the block linears are gathered as their packed 4-bit bytes (bnb_4bit_quant_storage), the
            # rest of the block (norms) in 16 bit
            quant_layer = spec.quantizable_params // max(1, spec.num_layers)
            layer_gather = int(NF4_BYTES_PER_PARAM * quant_layer) + HALF * (spec.layer_params - quant_layer)
            notes.append("FSDP-QLoRA: the packed 4-bit storage of each block is gathered, not 16-bit layers")
        weight_extra = gather_b * spec.root_params + 2 * layer_gather
        unsharded = grad_b * trainable  # the whole unsharded gradient of one replica
        if setup.method == "full":
            grad_extra = grad_b * spec.layer_params
            if engine.fsdp_flat_params:
                # the root unit's (embeddings, head, final norm) per-parameter gradients and their
                # concatenation into its flat gradient, alive together as the backward ends (engines.py)
                root_grad_extra = 2 * grad_b * spec.root_params
        elif setup.method == "lora" and engine.lora_fsdp_shared_units:
            # the adapters share each block's FSDP unit with its frozen weights (engines.py): the unit's flat
            # gradient, its shard and its unsharded form while the block's backward runs, covers every
            # parameter of the block in the weights' dtype, as if none were frozen. The root unit (embeddings,
            # head, final norm) trains nothing and gets no gradient.
            flat_b = FP32 if setup.precision == "fp32" else HALF
            unsharded = flat_b * spec.layer_params * spec.num_layers
            grads = max(grads, -(-unsharded // gpus))
            grad_extra = flat_b * spec.layer_params
            notes.append("FSDP units mix frozen weights and adapters: gradients sized as if nothing were frozen")
        weights = weights_sh
        if no_sync:
            # under no_sync every GPU accumulates "the full model gradients (instead of gradient shards)"
            # (torch.distributed.fsdp docs) until the last micro-step reduce-scatters them: the previous
            # step's shards were freed by zero_grad(set_to_none), so the whole unsharded gradient is what
            # the GPU holds between micro-steps
            grad_extra = max(0, unsharded - grads)
            notes.append("FSDP no_sync: full unsharded gradients kept between micro-steps")
        notes.append(
            f"FSDP over {gpus} GPUs: weights, gradients and optimizer states sharded; gathered units counted in weights"
        )
    elif shard == "zero2":
        if setup.method == "full" and regime == "amp":
            # DeepSpeed keeps the 16-bit model replicated and the fp32 master copy partitioned
            weights = HALF * n + -(-FP32 * n // gpus)
        grads = -(-grads // gpus)
        opt_state = -(-opt_state // gpus)
        opt_transient = -(-opt_transient // gpus)
        grad_extra = min(trainable, ZERO2_BUCKET_ELEMS) * (HALF if regime != "fp32" else FP32)
        notes.append(
            f"ZeRO-2 over {gpus} GPUs: gradients and optimizer states sharded; reduce bucket counted in gradients"
        )
    elif shard == "ddp":
        # DDP's reducer copies every gradient into flat buckets (gradient_as_bucket_view=False default)
        grad_extra = grads
        notes.append("DDP replicates the model; its gradient buckets double the gradient memory")

    # ---- activations ----
    tokens = setup.micro_batch * setup.seq_len
    trained = _trained_modules(spec, setup.method, tuple(setup.lora_targets))
    ledger_trained = trained
    if setup.uses_adapters and regime != "fp32" and trained is not None:
        # the frozen 16-bit base linears save no input; peft's fp32 copies (counted below) replace them
        ledger_trained = frozenset(t for t in trained if t == "lm_head")
    if setup.method == "qlora" and ledger_trained is not None:
        # bitsandbytes' MatMul4Bit saves its (16-bit) input A whenever the input needs a gradient, so
        # every quantized block linear keeps its input although its weight is frozen
        ledger_trained = ledger_trained | frozenset(m.path for m in spec.linears if m.in_block)
    per_layer_tok, outside_tok = layer_bytes(spec, regime, ledger_trained)
    layer_act = per_layer_tok * tokens
    if setup.attention == "eager":
        layer_act += attention_matrix_bytes(spec, regime) * setup.micro_batch * spec.num_heads * setup.seq_len**2
    else:
        # SDPA/flash keep no s x s matrix; with a padding mask or GQA transformers may repeat K/V
        pass
    if setup.uses_adapters:
        mods = resolve_targets(spec, tuple(setup.lora_targets))
        # lora_A output (r, fp32 adapters) saved by lora_B, per wrapped module
        # Under FSDP2's MixedPrecisionPolicy (``param-cast``) the adapters are gathered in 16 bit too, so
        # lora_A's output is 16 bit and peft's cast of the input to the adapters' dtype is a no-op.
        cast_adapters = mixed_precision == MIXED_PARAM_CAST and shard == "fsdp" and regime != "fp32"
        adapter_b = HALF if cast_adapters else FP32
        adapter_tok = sum(adapter_b * setup.lora_rank * m.count for m in mods if m.in_block)
        if regime != "fp32" and not cast_adapters:
            # peft casts each wrapped module's 16-bit input to the adapters' fp32 before lora_A, which
            # saves that copy for its weight gradient (modules sharing an input each make their own)
            adapter_tok += sum(FP32 * m.in_features * m.count for m in mods if m.in_block)
        layer_act += adapter_tok * tokens // max(1, spec.num_layers)
    res_b = FP32 if regime in ("fp32", "amp") else HALF
    L = spec.num_layers
    ckpt_keep = res_b * spec.hidden_size * tokens  # a checkpointed block keeps only its input
    if setup.grad_checkpointing == "none":
        stored_layers, ckpt_layers = L, 0
    elif setup.grad_checkpointing == "full":
        stored_layers, ckpt_layers = 0, L
    elif setup.grad_checkpointing == "selective":
        stored_layers, ckpt_layers = 0, L
        # every block keeps its matmul and attention outputs besides its input (the rest is recomputed)
        kept = selective_layer_bytes(spec, regime, setup.attention, selective_policy) * tokens
        if setup.attention == "eager":
            kept += (FP32 if regime == "fp32" else HALF) * setup.micro_batch * spec.num_heads * setup.seq_len**2
        kept = min(layer_act, kept)
        ckpt_keep += kept
        notes.append("selective checkpointing: each block keeps its matmul and attention outputs")
    else:
        ckpt_layers = (L + 1) // 2
        stored_layers = L - ckpt_layers
    acts = stored_layers * layer_act + ckpt_layers * ckpt_keep + outside_tok * tokens
    # one block re-run at a time during backward (selective: only what it did not keep)
    recompute = (layer_act - kept if setup.grad_checkpointing == "selective" else layer_act) if ckpt_layers else 0
    # while a block's backward runs, its gradient buffers are alive besides its saved tensors; once the
    # loss region is freed this (with the block's recomputed tensors) is the moment's transient
    grad_work = block_grad_bytes(spec, regime) * tokens
    if setup.attention == "eager":
        # eager softmax's backward holds the scores' incoming gradient (compute dtype) and, where the softmax
        # ran in fp32 over 16-bit scores (Llama-style ``softmax(dtype=float32)``, GPT-2/BERT under autocast),
        # its fp32 upcast; softmax_backward's 16-bit result is made as the probabilities' 16-bit copy (saved
        # by probs @ V, counted in the block's tensors) is freed, so it adds nothing at the widest point (a
        # traced step agrees: tests/plan/test_trace.py). Without the upcast the gradient and the result are
        # both in the compute dtype. It runs in the attention's backward, after the MLP's gradient buffers
        # are gone: the larger of the two counts.
        score_b = FP32 if regime == "fp32" else HALF
        upcast = regime != "fp32" and (spec.family not in ("gpt2", "bert") or regime == "amp")
        per_score = score_b + FP32 if upcast else 2 * score_b
        grad_work = max(grad_work, per_score * setup.micro_batch * spec.num_heads * setup.seq_len**2)
    recompute += grad_work

    # ---- logits ----
    vocab_elems = _score_elems(spec, setup.micro_batch, tokens)
    if spec.family == "bert" and regime == "half":
        # BertForMaskedLM's CrossEntropyLoss runs on the 16-bit scores (no upcast): three 16-bit copies
        logits = BERT_LOGITS_HALF_BYTES * vocab_elems
    else:
        logits = LOSS_BYTES[loss] * vocab_elems
    logits += LOSS_SOFTCAP_BYTES[loss] * vocab_elems if spec.logit_softcap else 0

    # autocast caches a 16-bit copy of every fp32 weight a matmul used, kept (saved) until backward
    cast_cache = 0
    if (
        regime == "amp"
        and mixed_precision == MIXED_AUTOCAST
        and setup.method == "full"
        and shard != "fsdp"
        and shard != "zero2"
    ):
        cast_cache = HALF * (spec.block_linear_params + spec.vocab_size * spec.hidden_size)
        notes.append("autocast keeps 16-bit copies of the fp32 weights from forward to backward")

    # ---- the three moments ----
    grads_total = grads + grad_extra
    weights_total = weights + weight_extra
    grads_sob = grads_total if setup.grad_accum > 1 else 0  # zero_grad(set_to_none) frees them between steps
    m_sob = weights_total + cast_cache + grads_sob + opt_state + acts + max(logits, recompute)
    # the first block's saved tensors (recomputed or stored) are alive while its weight grads are made;
    # its gradient buffers (grad_work) are not: they live in its MLP's backward, which ends before the
    # attention's weight gradients exist (a real run's traced allocations agree: tests/plan/test_trace.py)
    m_eob = weights_total + grads_total + opt_state + layer_act + outside_tok * tokens + root_grad_extra
    # at the step only gradient shards are left (no_sync's full gradients were reduce-scattered and freed)
    # (and under FSDP the block being reduce-scattered is done: its unsharded gradient is gone too)
    grads_step = grads if no_sync or shard == "fsdp" else grads_total
    # every FSDP unit is resharded after its backward (FSDP1's root too: it skips resharding only after the
    # forward), so the step sees the weight shards alone
    weights_step = weights if shard == "fsdp" else weights_total
    m_opt = weights_step + grads_step + opt_state + opt_transient
    peak = max(m_sob, m_eob, m_opt)
    pools = _stream_pools(shard, grads, gather_b * spec.root_params if shard == "fsdp" else 0)
    if pools:
        # the gradient shards live in the reduce-scatter stream's pool: the compute stream's own peak is
        # each moment less the shards it holds, and reserved is that plus every pool's own peak
        grad_pool, gather_pool = pools
        shards_sob = grads if setup.grad_accum > 1 else 0
        compute_peak = max(m_sob - shards_sob, m_eob - grads, m_opt - grads)
        stream_pools = compute_peak + grad_pool + gather_pool - peak
        notes.append(
            "FSDP2 collectives run on their own CUDA streams: gradient shards and the gathered root unit's "
            "buffer stay reserved in those streams' pools"
        )
    else:
        stream_pools = 0
    if peak == m_sob:
        moment = "start-of-backward"
        w, g, o = weights_total + cast_cache, grads_sob, opt_state
        a, lg, tr = acts + (recompute if recompute > logits else 0), (logits if logits >= recompute else 0), 0
    elif peak == m_eob:
        moment = "end-of-backward"
        w, g, o, a, lg = weights_total, grads_total + root_grad_extra, opt_state, layer_act + outside_tok * tokens, 0
        tr = 0
    else:
        moment = "optimizer-step"
        w, g, o, a, lg, tr = weights_step, grads_step, opt_state, 0, 0, opt_transient
    # the bytes allocated and freed within the step (everything at the peak but the persistent state:
    # own weight shards, gradients, optimizer states, DDP/ZeRO buckets), which fragment the allocator's cache
    # (no_sync's unsharded gradient too: the same sizes every step)
    kept_grads = grads + (grad_extra if shard in ("ddp", "zero2") or no_sync else 0)
    grads_at_peak = grads_sob if peak == m_sob else (grads_total if peak == m_eob else grads_step)
    transient = max(0, peak - weights - opt_state - min(kept_grads, grads_at_peak))
    slack = memory_allocator.slack_bytes(transient)
    variable_slack = memory_allocator.slack_bytes(transient, "variable") - slack
    overhead = CUDA_CONTEXT_BYTES + slack + stream_pools + tr
    if setup.attention == "sdpa" and spec.num_kv_heads != spec.num_heads:
        notes.append(
            "GQA assumed without a padding mask (SDPA enable_gqa); a padding mask makes transformers repeat K/V"
        )
    return MemoryBreakdown(
        weights=int(w),
        gradients=int(g),
        optimizer=int(o),
        activations=int(a),
        logits=int(lg),
        overhead=int(overhead),
        peak_moment=moment,
        source="formula",
        notes=tuple(notes),
        cuda_context=CUDA_CONTEXT_BYTES,
        allocator_slack=slack,
        stream_pools=int(stream_pools),
        start_of_backward=int(m_sob),
        end_of_backward=int(m_eob),
        optimizer_step=int(m_opt),
        variable_length_slack=int(variable_slack),
        transient=int(transient),
    )


# --------------------------------------------------------------------------------------------------
# Fit check (the largest micro-batch and suggestions: gpuplanner.plan.memory_fit)
# --------------------------------------------------------------------------------------------------


def fits(breakdown: MemoryBreakdown, capacity_gib: float, headroom: float = 0.95) -> bool:
    return breakdown.total <= capacity_gib * headroom * GIB
