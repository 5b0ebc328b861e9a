"""The time of one optimizer step, from first principles: compute, memory-bound work, communication.

One optimizer step on one GPU is ``grad_accum`` micro-steps of ``micro_batch x seq_len`` tokens plus
the optimizer update. Each micro-step costs

- matmul time: the model's matmul FLOPs (6 per parameter per token to train, 4 with frozen weights,
  plus one forward again where activations are recomputed) at the GPU's 16-bit (or fp32) peak times
  a matmul efficiency that falls for small matrices: ``efficiency x h/(h + h_half) x T/(T + t_half)``
  for hidden size ``h`` and ``T`` tokens per micro-batch;
- attention time: the score and value products (fused kernels compute only the causal half; eager
  attention computes the whole square and moves every score through memory several times);
- memory-bound time: element-wise work (norms, activations, residual adds, dropout, rotary), the
  logits and loss, and LoRA adapters' thin matmuls, dropout and casts (peft), as bytes over the HBM
  bandwidth; QLoRA adds the dequantization of the 4-bit weights on every pass;
- a fixed launch overhead per layer (kernel launches and Python between them);
- FSDP's exposed communication: gathering the weights for forward and backward and
  reduce-scattering the gradients, of which ``overlap`` of the compute hides the most.

The optimizer update reads and writes every trained parameter's weight, gradient and states at the
HBM bandwidth; DDP and ZeRO-2 all-reduce (or reduce-scatter) gradients once per step, overlapped with
the backward of the last micro-step. Multi-node runs add the inter-node network to every collective.

:class:`StepWork` holds what depends only on the model, setup and GPU; :func:`step_time` turns it
into seconds with the fitted :class:`StepParams` (cheap, so the fit can call it many times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuplanner.plan import engines
from gpuplanner.plan.setup import PlanInputError, TrainSetup

FORWARD_FLOPS_PER_PARAM = 2.0
# GPUs per node when a run spans nodes (all catalog offers have at most 8 per instance).
GPUS_PER_NODE = 8
# Share of a link's bandwidth a NCCL ring reaches (bus bandwidth / link bandwidth), NCCL-tests on
# NVLink and InfiniBand typically show 75-85%.
LINK_EFFICIENCY = 0.8
# Bytes per score element an eager (unfused) attention moves per layer over a training step: the
# 16-bit scores written and read, the fp32 softmax written and read, its 16-bit copy, the mask add and
# the backward's reads and writes of the same tensors (about three times the forward's 8).
EAGER_BYTES_PER_SCORE = 24.0
# Element-wise traffic of an engine that runs a block's norms, rotary embedding and activations as eager
# PyTorch ops (engines.Engine.fused_elementwise False), in bytes per token and layer with 16-bit activations,
# counted from transformers' LlamaDecoderLayer (the same chains as torchtitan's, torchtune's and LitGPT's
# own blocks) rather than fitted. Forward: each RMSNorm upcasts to fp32 and runs ``to(float32)``, ``pow(2)``,
# ``mean``, ``* rsqrt``, ``to(bf16)``, ``weight *``: 36 bytes per hidden element, two per block (72); two
# residual adds (12); the attention output's transpose and ``contiguous`` (4); rotary on q and k
# (``q * cos``, ``rotate_half``'s neg and cat, ``* sin``, the add: 20 per q/k element); the MLP's
# activation and gate product (10 per intermediate element). The backward of each reads the saved input(s)
# and the incoming gradient and writes one gradient: about twice the forward, so three times in all.
EAGER_BYTES_PER_HIDDEN = 3 * (72.0 + 12.0 + 4.0)
EAGER_BYTES_PER_QK = 3 * 20.0
EAGER_BYTES_PER_INTERMEDIATE = 3 * 10.0
# Under torch.compile (TrainSetup.compile) the eager chains above do not run: TorchInductor "fuses
# pointwise and reduction operations" into generated Triton kernels (PyTorch docs, torch.compiler /
# "TorchInductor: a PyTorch-native compiler", dev-discuss.pytorch.org), so a compiled block's norms,
# rotary embedding and activations move what the fused engines' do (the fitted elementwise_bytes).
# Fused attention's share of the peak on a GPU generation, relative to the generations it was tuned on
# (Ampere, Ada: the fitted attention_efficiency). FlashAttention-2, PyTorch's SDPA flash backend and the
# Triton kernels built like it issue Ampere-style mma.sync instructions and reach "50-73% of the
# theoretical maximum FLOPs/s on A100" (Dao 2023, FlashAttention-2, abstract), but "only 35%
# utilization on the H100 GPU" (Shah et al. 2024, FlashAttention-3, abstract): 35/73 = 0.48 of it,
# while cuBLAS's GEMMs use Hopper's wgmma and keep the matmul efficiency.
ATTENTION_GENERATION_FACTOR = {"Hopper": 0.48}
# Logits and cross entropy per token and vocabulary entry: the engine's loss traffic (engines.LOSS_TRAFFIC).
# QLoRA: every pass over a 4-bit weight reads its 0.5 bytes (+ scales) and writes and reads back a
# 16-bit copy for the matmul.
QLORA_DEQUANT_BYTES_PER_PARAM = 4.5
# NF4 with double quantization: 4 bits plus the block scales (memory.NF4_BYTES_PER_PARAM)
QLORA_GATHER_BYTES_PER_PARAM = 0.5 + 1 / 64
# Gradient clipping by global norm moves every gradient three times (norm read, scale read and write).
CLIP_BYTES_PER_GRAD_BYTE = 3.0
# Optimizer update bytes per trained parameter (weights, gradients and states read and written).
# Keys: (optimizer, 16-bit pure weights?).
# "adamw" is torch.optim.AdamW as PyTorch runs it by default on CUDA: the foreach implementation
# (torch/optim/adamw.py ``_multi_tensor_adamw``, torch 2.0-2.7; also transformers' default "adamw_torch"),
# one pass over memory per foreach op: weight decay ``_foreach_mul_(params)`` (read p, write p: 2
# tensor accesses), ``_foreach_lerp_(exp_avgs, grads)`` (3), ``_foreach_mul_(exp_avg_sqs)`` (2),
# ``_foreach_addcmul_(exp_avg_sqs, grads, grads)`` (3), ``_foreach_sqrt`` into a new list (2),
# ``_foreach_div_`` and ``_foreach_add_`` on it (2 + 2), ``_foreach_addcdiv_(params, exp_avgs, denom)`` (4):
# 20 accesses of a parameter-sized tensor, 80 bytes per fp32 parameter, 40 per 16-bit one.
# "adamw-fused" (``fused=True``) is one kernel: p, g, m, v read, p, m, v written (28 bytes fp32) and the
# gradients zeroed (4).
OPTIMIZER_BYTES = {
    ("adamw", False): 80.0,
    ("adamw", True): 40.0,
    ("adamw-fused", False): 32.0,
    ("adamw-fused", True): 16.0,
    ("adamw-8bit", False): 18.0,  # 8-bit m and v
    ("adamw-8bit", True): 10.0,
    ("adafactor", False): 20.0,
    ("adafactor", True): 10.0,
    ("sgd", False): 16.0,
    ("sgd", True): 8.0,
}


class ModelShape(Protocol):
    """What the speed formulas read of a model (read-only, so frozen dataclasses such as ModelSpec match)."""

    @property
    def n_params(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def tied_embeddings(self) -> bool: ...


class GpuLike(Protocol):
    """What the step model reads of a GPU (read-only, so the frozen GpuSpec matches)."""

    @property
    def name(self) -> str: ...
    @property
    def bandwidth_gbs(self) -> float: ...
    @property
    def interconnect_gbs(self) -> float: ...

    def peak_tflops(self, precision: str) -> float: ...


@dataclass(frozen=True)
class StepParams:
    """The fitted constants of the step model for one GPU generation (see resources/catalog/speed_model.toml)."""

    matmul_efficiency: float  # share of the peak large matmuls reach
    hidden_half: float  # hidden size at which matmuls reach half of it
    tokens_half: float  # tokens per micro-batch at which matmuls reach half of it
    attention_efficiency: float  # fused attention's share of the matmul efficiency
    elementwise_bytes: float  # bytes per token, layer and (2h + intermediate) of element-wise work, per 16-bit byte
    launch_s_per_layer: float  # fixed seconds per layer per micro-step
    adapter_bytes: float = 30.0  # bytes per token and adapted feature of a LoRA adapter's memory-bound work
    bandwidth_efficiency: float = 0.8  # share of the HBM bandwidth memory-bound kernels reach
    overlap: float = 0.8  # share of compute that hides FSDP/DDP communication
    network_gbs: float = 25.0  # inter-node bandwidth per node, GB/s one direction
    fp32_efficiency: float = 0.9  # share of the plain fp32 (CUDA-core) peak large SGEMMs reach

    def validate(self) -> None:
        for name in ("matmul_efficiency", "attention_efficiency", "bandwidth_efficiency", "fp32_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.5:
                raise PlanInputError("speed-model", f"{name} must be a positive share, got {value!r}")
        for name in ("hidden_half", "tokens_half", "elementwise_bytes", "launch_s_per_layer", "adapter_bytes"):
            if getattr(self, name) < 0:
                raise PlanInputError("speed-model", f"{name} must be zero or more, got {getattr(self, name)!r}")
        if not 0.0 <= self.overlap <= 1.0:
            raise PlanInputError("speed-model", f"overlap must be between 0 and 1, got {self.overlap!r}")
        if not self.network_gbs > 0:
            raise PlanInputError("network-gbs", f"must be a positive bandwidth in GB/s, got {self.network_gbs!r}")


@dataclass(frozen=True)
class StepWork:
    """What one optimizer step on one GPU has to do, independent of the fitted constants."""

    tokens_per_micro: float
    grad_accum: int
    hidden: int
    peak_flops: float
    bandwidth: float  # bytes/s, HBM
    # per micro-step:
    matmul_flops: float  # model FLOPs (no recomputation)
    recompute_matmul_flops: float
    attention_flops: float  # model FLOPs of the attention products (full square, the MFU convention)
    attention_executed_flops: float  # what the kernel computes, recompute included
    recompute_share: float  # forward passes recomputed: 1 full, 0.5 every-other, 0 none
    elementwise_units: float  # tokens x layers x (2h + inter) x activation bytes x (1 + recompute share)
    fixed_bytes: float  # logits, eager scores, QLoRA dequantization, weight gradients: bytes at HBM bandwidth
    adapter_units: float  # tokens x adapted features (in + out of every adapted module) x (1 + recompute/3)
    layers: int
    fsdp_bytes: float  # FSDP gathers + reduce-scatter per micro-step (bytes per GPU)
    # per optimizer step:
    optimizer_bytes: float
    sync_bytes: float  # DDP/ZeRO-2 gradient traffic per step
    intra_gbs: float
    nodes: int
    gpus_in_node: int
    tensor_cores: bool = True  # 16-bit (or TF32) matmuls on tensor cores; False: fp32 on CUDA cores
    attention_factor: float = 1.0  # the GPU generation's ATTENTION_GENERATION_FACTOR


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on one GPU, by part. ``step_s`` is their sum."""

    compute_s: float  # matmuls and attention, without recomputation
    recompute_s: float
    memory_s: float  # element-wise, logits, dequantization and the optimizer update
    communication_s: float  # exposed (not hidden behind compute)
    overhead_s: float  # kernel launches
    tokens: float  # per GPU per step

    @property
    def step_s(self) -> float:
        return self.compute_s + self.recompute_s + self.memory_s + self.communication_s + self.overhead_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s


def has_lm_head(model: object) -> bool:
    """False for sequence classifiers (and bare encoders): no vocabulary-sized output per token."""
    architecture = str(getattr(model, "architecture", "") or "")
    return not architecture.endswith("ForSequenceClassification") and architecture != "BertModel"


def matmul_params(model: ModelShape) -> float:
    """Parameters that take part in a matmul per token: all but the input embedding lookup, and of a
    mixture of experts only the experts a token is routed to (``active_params``).

    With tied embeddings the shared matrix still costs a matmul in the output head, if there is one.
    """
    embedding = model.vocab_size * model.hidden_size
    head = embedding if model.tied_embeddings and has_lm_head(model) else 0
    # a mixture of experts sends each token through experts_per_token experts: only those count
    used = int(getattr(model, "active_params", model.n_params))
    return max(float(used - embedding + head), 1.0)


RECOMPUTE_SHARE = {"none": 0.0, "full": 1.0, "every-other": 0.5, "selective": 0.0}  # selective: no matmul re-run


def alternate_matmul_share(model: ModelShape) -> float:
    """Share of a block's matmul FLOPs in its 2nd, 4th, 6th ... linear (in the model's order): what a
    selective policy that keeps every other matmul output recomputes (activation_ledger's alternate policy)."""
    linears = [m for m in getattr(model, "linears", ()) if getattr(m, "in_block", False)]
    total = sum(m.weight_params for m in linears)
    if not total:
        return 0.5
    return float(sum(m.weight_params for m in linears[1::2]) / total)


def _attention_forward_flops(model: ModelShape, seq_len: int) -> float:
    """Forward FLOPs of QK^T and AV per token over the full s x s square (PaLM's accounting)."""
    return 4.0 * model.num_layers * seq_len * model.num_heads * model.head_dim


def matmul_peak_tflops(gpu: GpuLike, setup: TrainSetup) -> float:
    """Dense peak TFLOP/s the run's matmuls use: the precision's, or TF32's for fp32 with TF32 on.

    fp32 with TF32 off runs at the plain fp32 rate (PyTorch's default); a GPU without TF32 units
    (Volta, Turing) runs fp32 matmuls at that rate whatever the setting.
    """
    if setup.precision == "fp32" and setup.tf32:
        try:
            return gpu.peak_tflops("tf32")
        except PlanInputError:
            pass
    return gpu.peak_tflops(setup.precision)


def _on_tensor_cores(gpu: GpuLike, setup: TrainSetup) -> bool:
    """Whether the run's matmuls use tensor cores: 16 bit always, fp32 only with TF32 on a GPU that has it."""
    if setup.precision != "fp32":
        return True
    if not setup.tf32:
        return False
    try:
        gpu.peak_tflops("tf32")
    except PlanInputError:
        return False
    return True


def step_work(
    model: ModelShape, setup: TrainSetup, gpu: GpuLike, trainable_params: int, quantized_params: int = 0
) -> StepWork:
    """The work of one optimizer step on one GPU of ``setup.gpus``."""
    peak = matmul_peak_tflops(gpu, setup) * 1e12
    if not gpu.bandwidth_gbs > 0:
        raise PlanInputError("gpu", f"{gpu.name} has no memory bandwidth in the catalog (bandwidth_gbs)")
    tokens = float(setup.micro_batch * setup.seq_len)
    n_mm = matmul_params(model)
    engine = engines.engine_named(setup.engine)
    r = RECOMPUTE_SHARE[setup.grad_checkpointing]
    r_mm = r  # share of the forward's matmul FLOPs run again in the backward
    if setup.grad_checkpointing == "selective" and engine.selective_policy == "alternate-matmul":
        # torchtitan's "op" policy keeps every other matmul output of a block: the others are recomputed
        r_mm = alternate_matmul_share(model)
    forward = FORWARD_FLOPS_PER_PARAM * n_mm * tokens
    if setup.uses_adapters:
        matmul = 2.0 * forward + 6.0 * trainable_params * tokens
    else:
        matmul = 3.0 * forward
    att_fwd = _attention_forward_flops(model, setup.seq_len) * tokens
    attention = 3.0 * att_fwd
    causal = 0.5 if setup.attention == "sdpa" else 1.0
    executed = causal * att_fwd * (3.0 + r)
    act_bytes = 4.0 if setup.precision == "fp32" else 2.0
    inter = getattr(model, "intermediate_size", 4 * model.hidden_size)
    elementwise = tokens * model.num_layers * (2 * model.hidden_size + inter) * act_bytes * (1.0 + r / 3.0)
    if not (engine.fused_elementwise or setup.compile):
        # eager ops: the counted traffic (EAGER_BYTES_*) in place of the fused stacks' fitted elementwise_bytes
        kv = int(getattr(model, "num_kv_heads", model.num_heads)) * model.head_dim
        per_layer = (
            EAGER_BYTES_PER_HIDDEN * model.hidden_size
            + EAGER_BYTES_PER_QK * (model.num_heads * model.head_dim + kv)
            + EAGER_BYTES_PER_INTERMEDIATE * inter
        )
        fixed_eager = tokens * model.num_layers * per_layer * act_bytes / 2.0 * (1.0 + r / 3.0)
        elementwise = 0.0
    else:
        fixed_eager = 0.0
    # the loss's traffic per logit element as the engine computes it (fp32 upcast, 16 bit, fused/chunked)
    fixed = tokens * model.vocab_size * engine.loss_traffic(setup.method) if has_lm_head(model) else 0.0
    fixed += fixed_eager
    if setup.attention == "eager":
        scores = setup.micro_batch * model.num_heads * float(setup.seq_len) ** 2 * model.num_layers
        fixed += scores * EAGER_BYTES_PER_SCORE * (1.0 + r / 3.0) * act_bytes / 2.0
    if setup.method == "qlora":
        fixed += (2.0 + r) * quantized_params * QLORA_DEQUANT_BYTES_PER_PARAM
    adapter_units = 0.0
    if setup.uses_adapters:
        # trainable = rank x (in + out) x modules, so the adapted features are trainable / rank
        # peft's unfused path moves all of it, a stack's own 16-bit modules about half, fused kernels none
        adapter_units = tokens * trainable_params / setup.lora_rank * (1.0 + r / 3.0) * engine.adapter_traffic
    gpus = setup.gpus
    sharded = setup.sharding in ("zero2", "fsdp") and gpus > 1
    pure = setup.precision == "bf16"
    # adapters are trained in fp32 (peft), whatever the base weights are
    per_param = OPTIMIZER_BYTES[(setup.optimizer, pure and not setup.uses_adapters)]
    local_trainable = trainable_params / gpus if sharded else float(trainable_params)
    optimizer_bytes = per_param * local_trainable
    if engine.clips_gradients:
        # clip_grad_norm_: every gradient read for the norm, then read and written to scale it
        optimizer_bytes += (
            CLIP_BYTES_PER_GRAD_BYTE * (4.0 if setup.uses_adapters or not pure else 2.0) * local_trainable
        )
    grad_b = 2.0 if pure else 4.0
    if not setup.uses_adapters:
        # every micro-step's backward writes each weight's whole gradient (a weight-gradient GEMM's output is
        # the weight's size whatever the tokens), and accumulating micro-steps read it back to add to it:
        # memory-bound when a micro-step has few tokens (a full fine-tune at micro-batch 1 x 512)
        fixed += trainable_params * grad_b * (2.0 if setup.grad_accum > 1 else 1.0)
    fsdp_bytes = 0.0
    sync_bytes = 0.0
    if gpus > 1:
        if setup.sharding == "fsdp":
            gather_b = 4.0 if setup.precision == "fp32" else 2.0
            # all-gather for forward and again for backward, reduce-scatter of the gradients
            gathered = model.n_params * gather_b
            if setup.method == "qlora" and engine.qlora_gather == engines.GATHER_PACKED:
                # the quantized linears travel as their packed 4-bit bytes
                gathered -= quantized_params * (gather_b - QLORA_GATHER_BYTES_PER_PARAM)
            fsdp_bytes = 2.0 * gathered + trainable_params * grad_b
        else:
            sync_bytes = trainable_params * grad_b
    nodes = -(-gpus // GPUS_PER_NODE)
    return StepWork(
        tokens_per_micro=tokens,
        grad_accum=setup.grad_accum,
        hidden=model.hidden_size,
        peak_flops=peak,
        bandwidth=gpu.bandwidth_gbs * 1e9,
        matmul_flops=matmul,
        recompute_matmul_flops=r_mm * forward,
        attention_flops=attention,
        attention_executed_flops=executed,
        recompute_share=r,
        elementwise_units=elementwise,
        fixed_bytes=fixed,
        adapter_units=adapter_units,
        layers=model.num_layers,
        fsdp_bytes=fsdp_bytes,
        optimizer_bytes=optimizer_bytes,
        sync_bytes=sync_bytes,
        intra_gbs=max(gpu.interconnect_gbs, 1e-3),
        nodes=nodes,
        gpus_in_node=min(gpus, GPUS_PER_NODE),
        tensor_cores=_on_tensor_cores(gpu, setup),
        attention_factor=ATTENTION_GENERATION_FACTOR.get(str(getattr(gpu, "architecture", "")), 1.0),
    )


def _collective(nbytes: float, work: StepWork, params: StepParams, all_reduce: bool) -> float:
    """Seconds of a ring collective of ``nbytes`` per GPU: NVLink/PCIe inside a node, the network between.

    An all-gather or reduce-scatter moves (n-1)/n of the buffer through each GPU's link, an all-reduce
    twice that. Across m nodes the hierarchical collective also moves (m-1)/m of the buffer in or out of
    every node over its network (each GPU its 1/n share over its own NIC, then over NVLink).
    """
    factor = 2.0 if all_reduce else 1.0
    seconds = 0.0
    n = work.gpus_in_node
    if n > 1:
        seconds += factor * (n - 1) / n * nbytes / (work.intra_gbs * 1e9 * LINK_EFFICIENCY)
    m = work.nodes
    if m > 1:
        seconds += factor * (m - 1) / m * nbytes / (params.network_gbs * 1e9 * LINK_EFFICIENCY)
    return seconds


def matmul_efficiency(work: StepWork, params: StepParams) -> float:
    """Share of the peak the model's matmuls reach: large-matrix efficiency scaled down for small ones.

    Tensor-core matmuls (16 bit, TF32) reach the generation's fitted efficiency; plain fp32 matmuls run on
    the CUDA cores, whose SGEMM reaches a share of their own (lower) peak that does not depend on how well
    tensor cores are fed (``fp32_efficiency``).
    """
    base = params.matmul_efficiency if work.tensor_cores else params.fp32_efficiency
    size = work.hidden / (work.hidden + params.hidden_half)
    batch = work.tokens_per_micro / (work.tokens_per_micro + params.tokens_half)
    return base * size * batch


def step_time(work: StepWork, params: StepParams) -> StepTime:
    """Seconds of one optimizer step on one GPU, by part."""
    eff = matmul_efficiency(work, params)
    mm_rate = work.peak_flops * eff
    att_rate = work.peak_flops * eff * params.attention_efficiency * work.attention_factor
    bw = work.bandwidth * params.bandwidth_efficiency
    att_s = work.attention_executed_flops / att_rate
    att_recompute = work.recompute_share / (3.0 + work.recompute_share)
    compute_micro = work.matmul_flops / mm_rate + att_s * (1.0 - att_recompute)
    recompute_micro = work.recompute_matmul_flops / mm_rate + att_s * att_recompute
    memory_micro = (
        work.elementwise_units * params.elementwise_bytes + work.adapter_units * params.adapter_bytes + work.fixed_bytes
    ) / bw
    overhead_micro = params.launch_s_per_layer * work.layers
    micro_s = compute_micro + recompute_micro + memory_micro + overhead_micro
    comm = 0.0
    if work.fsdp_bytes:
        fsdp_s = _collective(work.fsdp_bytes, work, params, all_reduce=False)
        comm += work.grad_accum * max(fsdp_s - params.overlap * micro_s, 0.0)
    if work.sync_bytes:
        sync_s = _collective(work.sync_bytes, work, params, all_reduce=True)
        # bucketed all-reduce runs during the backward (2/3 of compute) of the last micro-step
        comm += max(sync_s - params.overlap * (2.0 / 3.0) * micro_s, 0.0)
    optimizer_s = work.optimizer_bytes / bw
    accum = work.grad_accum
    return StepTime(
        compute_s=accum * compute_micro,
        recompute_s=accum * recompute_micro,
        memory_s=accum * memory_micro + optimizer_s,
        communication_s=comm,
        overhead_s=accum * overhead_micro,
        tokens=accum * work.tokens_per_micro,
    )


def model_flops_per_token(work: StepWork) -> float:
    """Training FLOPs per token without recomputation (what MFU counts)."""
    return (work.matmul_flops + work.attention_flops) / work.tokens_per_micro


def hardware_flops_per_token(work: StepWork) -> float:
    """Training FLOPs per token with recomputation (what HFU counts)."""
    recompute_attention = work.recompute_share * work.attention_flops / 3.0
    return model_flops_per_token(work) + (work.recompute_matmul_flops + recompute_attention) / work.tokens_per_micro
