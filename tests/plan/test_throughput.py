"""FLOPs per token, the step model, MFU-based throughput and multi-GPU scaling against hand-computed cases."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.plan.speed_params import SpeedModel
from gpuplanner.plan.step_model import StepParams, step_time, step_work
from gpuplanner.plan.throughput import (
    estimate_throughput,
    flops_per_token,
    gradient_sync_bytes,
    matmul_params,
    measured_throughput,
    scaling_efficiency,
)


@dataclass(frozen=True)
class Shape:
    n_params: int = 1_000_000_000
    hidden_size: int = 2048
    num_layers: int = 16
    num_heads: int = 16
    head_dim: int = 128
    vocab_size: int = 32_000
    tied_embeddings: bool = False
    intermediate_size: int = 8192


@dataclass(frozen=True)
class Gpu:
    name: str = "Test GPU"
    interconnect_gbs: float = 300.0
    default_mfu: float = 0.4
    tflops: object = None
    architecture: str = "Test"
    bandwidth_gbs: float = 2000.0
    interconnect: str = "nvlink"

    def peak_tflops(self, precision: str) -> float:
        return {"bf16-mixed": 1000.0, "bf16": 1000.0, "fp16-mixed": 1000.0, "fp32": 60.0}[precision]


SHAPE = Shape()
N = 1_000_000_000 - 32_000 * 2048  # the embedding lookup costs no matmul
ATTENTION_FWD = 4 * 16 * 1024 * 16 * 128


def test_matmul_params_leave_out_the_embedding_lookup_but_not_a_tied_head() -> None:
    assert matmul_params(SHAPE) == N
    assert matmul_params(Shape(tied_embeddings=True)) == 1_000_000_000


@pytest.mark.parametrize(
    "checkpointing, per_param, attention_factor",
    [
        ("none", 6, 3),
        ("full", 8, 4),
        ("every-other", 7, 3.5),
    ],
)
def test_full_training_flops(checkpointing: str, per_param: float, attention_factor: float) -> None:
    setup = TrainSetup(seq_len=1024, grad_checkpointing=checkpointing)
    expected = per_param * N + attention_factor * ATTENTION_FWD
    assert flops_per_token(SHAPE, setup, trainable_params=SHAPE.n_params) == pytest.approx(expected)


def test_adapter_training_skips_weight_gradients() -> None:
    setup = TrainSetup(method="lora", seq_len=1024)
    assert flops_per_token(SHAPE, setup, trainable_params=1_000_000) == pytest.approx(
        4 * N + 6 * 1_000_000 + 3 * ATTENTION_FWD
    )


def test_throughput_is_peak_times_mfu_over_flops_per_token() -> None:
    setup = TrainSetup(seq_len=1024)
    result = estimate_throughput(SHAPE, setup, Gpu(), SHAPE.n_params, mfu=0.5)
    per_token = 6 * N + 3 * ATTENTION_FWD
    assert result.tokens_per_s == pytest.approx(1000e12 * 0.5 / per_token)
    assert result.samples_per_min == pytest.approx(result.tokens_per_s / 1024 * 60)
    assert "MFU 0.50 (given)" in result.source
    default = estimate_throughput(SHAPE, setup, Gpu(), SHAPE.n_params)
    assert default.source.startswith("estimate: Test GPU step model") and default.step is not None


def test_a_given_mfu_counts_model_flops_so_recomputation_makes_the_run_slower_not_faster() -> None:
    # MFU excludes recomputation: with full checkpointing the same MFU means the same tokens/s of
    # model work, and the hardware did 8N instead of 6N per parameter (HFU = MFU x 8/6 on matmuls).
    plain = estimate_throughput(SHAPE, TrainSetup(seq_len=1024), Gpu(), SHAPE.n_params, mfu=0.5)
    ckpt = estimate_throughput(
        SHAPE, TrainSetup(seq_len=1024, grad_checkpointing="full"), Gpu(), SHAPE.n_params, mfu=0.5
    )
    assert ckpt.tokens_per_s == pytest.approx(plain.tokens_per_s)
    assert ckpt.hfu == pytest.approx(0.5 * (8 * N + 4 * ATTENTION_FWD) / (6 * N + 3 * ATTENTION_FWD))
    assert plain.hfu == pytest.approx(0.5)


def test_qlora_is_slower_than_lora() -> None:
    lora = estimate_throughput(SHAPE, TrainSetup(method="lora"), Gpu(), 1_000_000)
    qlora = estimate_throughput(SHAPE, TrainSetup(method="qlora"), Gpu(), 1_000_000)
    assert qlora.tokens_per_s < lora.tokens_per_s


def test_ring_all_reduce_moves_two_n_minus_one_over_n_of_the_gradients() -> None:
    setup = TrainSetup(gpus=4, precision="bf16-mixed")
    assert gradient_sync_bytes(setup, 1000) == pytest.approx(2 * 3 / 4 * 1000 * 4)
    assert gradient_sync_bytes(TrainSetup(gpus=4, precision="bf16"), 1000) == pytest.approx(2 * 3 / 4 * 1000 * 2)


def test_scaling_efficiency_by_hand() -> None:
    # 8 GPUs, 1e9 fp32 gradients: 2 * 7/8 * 4e9 bytes = 7 GB over 10 GB/s = 0.7 s of communication.
    # One micro-step of 3 s: its backward (2 s) hides 80% x 2 s = 1.6 s, so nothing is exposed.
    setup = TrainSetup(gpus=8, grad_accum=1)
    assert scaling_efficiency(setup, 10**9, 10**9, 3.0, 10.0) == 1.0
    # Over 1 GB/s: 7 s of communication, 1.6 s hidden, 5.4 s exposed: 3 / 8.4.
    assert scaling_efficiency(setup, 10**9, 10**9, 3.0, 1.0) == pytest.approx(3.0 / 8.4)
    assert scaling_efficiency(TrainSetup(gpus=1), 10**9, 10**9, 3.0, 1.0) == 1.0


def test_more_gpus_are_faster_but_not_linear_on_a_slow_link() -> None:
    gpu = Gpu(interconnect_gbs=5.0)
    one = estimate_throughput(SHAPE, TrainSetup(gpus=1, grad_accum=64, seq_len=2048), gpu, SHAPE.n_params)
    eight = estimate_throughput(SHAPE, TrainSetup(gpus=8, grad_accum=64, seq_len=2048), gpu, SHAPE.n_params)
    assert one.tokens_per_s < eight.tokens_per_s < 8 * one.tokens_per_s
    assert "scaling efficiency" in eight.source


def test_tiny_steps_over_a_slow_link_are_communication_bound() -> None:
    # 512 tokens per step take tens of milliseconds (compute, optimizer update, launches); 7 GB of
    # gradients over 5 GB/s at 80% link efficiency take 1.75 s.
    eight = estimate_throughput(
        SHAPE, TrainSetup(gpus=8, micro_batch=1, seq_len=512), Gpu(interconnect_gbs=5.0), SHAPE.n_params
    )
    assert eight.scaling_efficiency < 0.05


def test_measured_throughput_converts_between_units() -> None:
    setup = TrainSetup(seq_len=2048)
    assert measured_throughput(setup, samples_per_min=60).tokens_per_s == pytest.approx(2048)
    assert measured_throughput(setup, tokens_per_s=2048).samples_per_min == pytest.approx(60)
    with pytest.raises(PlanInputError) as info:
        measured_throughput(setup, tokens_per_s=0.0)
    assert info.value.field == "tokens-per-s"


def test_mfu_out_of_range_is_rejected() -> None:
    with pytest.raises(PlanInputError) as info:
        estimate_throughput(SHAPE, TrainSetup(), Gpu(), 1, mfu=1.5)
    assert info.value.field == "mfu"


SIMPLE = StepParams(
    matmul_efficiency=0.5,
    hidden_half=0.0,
    tokens_half=0.0,
    attention_efficiency=1.0,
    elementwise_bytes=0.0,
    launch_s_per_layer=0.0,
    adapter_bytes=0.0,
    bandwidth_efficiency=1.0,
    overlap=0.8,
    network_gbs=100.0,
)


def test_step_time_by_hand() -> None:
    """One GPU, 1024 tokens, no recompute: matmuls + causal attention at half the peak, logits, the weight
    gradients' write (fp32), AdamW (PyTorch's default foreach AdamW: 20 passes over parameter-sized fp32
    tensors, 80 bytes per parameter) and gradient clipping (the bundled trainer clips: norm read, scale read
    and write of fp32 gradients) at HBM speed, and the bundled trainer's eager norms, rotary and activations:
    264 bytes per hidden element, 60 per q/k element and 30 per intermediate one, per token and layer."""
    setup = TrainSetup(seq_len=1024)
    work = step_work(SHAPE, setup, Gpu(), SHAPE.n_params)
    time = step_time(work, SIMPLE)
    tokens = 1024
    compute = (6 * N + 0.5 * 3 * ATTENTION_FWD) * tokens / (1000e12 * 0.5)
    eager = tokens * 16 * (264 * 2048 + 60 * (2048 + 2048) + 30 * 8192)
    memory = (tokens * 32_000 * 16 + eager + 4 * SHAPE.n_params + (80 + 3 * 4) * SHAPE.n_params) / 2000e9
    assert time.compute_s == pytest.approx(compute)
    assert time.memory_s == pytest.approx(memory)
    assert time.recompute_s == 0 and time.communication_s == 0 and time.overhead_s == 0
    assert time.step_s == pytest.approx(compute + memory)
    assert time.tokens_per_s == pytest.approx(tokens / (compute + memory))


def test_attention_on_hopper_runs_at_flashattention_2s_share_of_its_peak() -> None:
    """FlashAttention-2-style kernels reach 35% of an H100's peak against 73% of an A100's: on a Hopper GPU the
    attention products take 1/0.48 of the time a GPU of the same peak and another generation gives them;
    the matmuls keep their time."""
    setup = TrainSetup(seq_len=4096)
    other = step_time(step_work(SHAPE, setup, Gpu(), SHAPE.n_params), SIMPLE)
    hopper = step_time(step_work(SHAPE, setup, Gpu(architecture="Hopper"), SHAPE.n_params), SIMPLE)
    attention = 0.5 * 3 * (4 * 16 * 4096 * 16 * 128) * 4096 / (1000e12 * 0.5)
    assert hopper.compute_s - other.compute_s == pytest.approx(attention / 0.48 - attention, rel=1e-9)
    assert hopper.memory_s == other.memory_s


def test_fused_engines_take_the_fitted_elementwise_traffic_and_eager_ones_the_counted() -> None:
    """llm-foundry (MPT's fused LayerNorm, GELU, ALiBi in the attention kernel) moves elementwise_bytes per
    token, layer and (2h + intermediate) 16-bit element; an eager engine the counted bytes of its op chains,
    whatever elementwise_bytes is; with full recompute both add a third (the forward run again)."""
    params = replace(SIMPLE, elementwise_bytes=4.0)
    tokens, layers = 1024, 16
    fused = step_work(SHAPE, TrainSetup(seq_len=1024, engine="llm-foundry"), Gpu(), SHAPE.n_params)
    eager = step_work(SHAPE, TrainSetup(seq_len=1024, engine="hf-trainer"), Gpu(), SHAPE.n_params)
    fused_bytes = tokens * layers * (2 * 2048 + 8192) * 2 * 4.0
    eager_bytes = tokens * layers * (264 * 2048 + 60 * 4096 + 30 * 8192)
    difference = step_time(eager, params).memory_s - step_time(fused, params).memory_s
    assert difference == pytest.approx((eager_bytes - fused_bytes) / 2000e9, rel=1e-9)
    assert eager_bytes > 10 * fused_bytes  # ten times the traffic of the fused kernels at this shape
    recompute = TrainSetup(seq_len=1024, engine="hf-trainer", grad_checkpointing="full")
    eager_full = step_work(SHAPE, recompute, Gpu(), SHAPE.n_params)
    extra = step_time(eager_full, params).memory_s - step_time(eager, params).memory_s
    assert extra == pytest.approx(eager_bytes / 3 / 2000e9, rel=1e-9)


def test_recomputation_is_its_own_part_and_counted_once() -> None:
    plain = step_time(step_work(SHAPE, TrainSetup(seq_len=1024), Gpu(), SHAPE.n_params), SIMPLE)
    full = step_time(
        step_work(SHAPE, TrainSetup(seq_len=1024, grad_checkpointing="full"), Gpu(), SHAPE.n_params), SIMPLE
    )
    assert full.compute_s == pytest.approx(plain.compute_s)
    # one forward again: 2N per token of matmuls and one forward of the (causal) attention
    assert full.recompute_s == pytest.approx((2 * N + 0.5 * ATTENTION_FWD) * 1024 / (1000e12 * 0.5))


def test_small_matmuls_run_below_the_large_matrix_efficiency() -> None:
    setup = TrainSetup(seq_len=128)
    work = step_work(SHAPE, setup, Gpu(), SHAPE.n_params)
    sized = StepParams(**{**SIMPLE.__dict__, "hidden_half": 2048.0, "tokens_half": 128.0})
    # h = 2048 at hidden_half 2048 and 128 tokens at tokens_half 128: a quarter of the efficiency
    slow = step_time(work, sized)
    fast = step_time(work, SIMPLE)
    assert slow.compute_s == pytest.approx(4 * fast.compute_s)


def test_fp32_runs_at_the_fp32_peak_at_its_own_efficiency() -> None:
    """fp32 matmuls run on the CUDA cores at fp32_efficiency of the fp32 peak, not at the tensor cores'
    fitted efficiency: mixed precision is 1000/60 x 0.9/0.5 = 30x faster in compute here, not 1000/60."""
    fp32 = step_time(step_work(SHAPE, TrainSetup(precision="fp32"), Gpu(), SHAPE.n_params), SIMPLE)
    bf16 = step_time(step_work(SHAPE, TrainSetup(), Gpu(), SHAPE.n_params), SIMPLE)
    assert fp32.compute_s == pytest.approx(bf16.compute_s * 1000.0 / 60.0 * 0.5 / 0.9)
    assert not step_work(SHAPE, TrainSetup(precision="fp32"), Gpu(), SHAPE.n_params).tensor_cores


def test_multi_node_runs_pay_for_the_network() -> None:
    """FSDP over 16 GPUs gathers over the node's network too; a slow network exposes communication."""
    setup = TrainSetup(gpus=16, sharding="fsdp", seq_len=512)
    work = step_work(SHAPE, setup, Gpu(), SHAPE.n_params)
    one_node = step_work(SHAPE, TrainSetup(gpus=8, sharding="fsdp", seq_len=512), Gpu(), SHAPE.n_params)
    slow = StepParams(**{**SIMPLE.__dict__, "network_gbs": 1.0})
    assert work.nodes == 2 and one_node.nodes == 1
    assert step_time(work, slow).communication_s > step_time(one_node, slow).communication_s > 0


def test_parts_add_up_and_mfu_hfu_are_reported() -> None:
    model = SpeedModel(
        shared={k: v for k, v in SIMPLE.__dict__.items() if k not in ("matmul_efficiency", "network_gbs")},
        generations={"default": 0.5},
        network_default={"nvlink": 100.0, "pcie": 10.0},
        loso_pct=20.0,
    )
    result = estimate_throughput(
        SHAPE, TrainSetup(seq_len=1024, grad_checkpointing="full"), Gpu(), SHAPE.n_params, speed_model=model
    )
    step = result.step
    assert step is not None and result.uncertainty_pct == 20.0
    assert step.step_s == pytest.approx(
        step.compute_s + step.recompute_s + step.memory_s + step.communication_s + step.overhead_s
    )
    per_gpu = result.tokens_per_s
    assert result.mfu == pytest.approx((6 * N + 3 * ATTENTION_FWD) * per_gpu / 1000e12)
    assert result.hfu == pytest.approx((8 * N + 4 * ATTENTION_FWD) * per_gpu / 1000e12)
    assert result.hfu > result.mfu


def test_a_gpu_without_bandwidth_gets_one_clear_message() -> None:
    with pytest.raises(PlanInputError) as info:
        step_work(SHAPE, TrainSetup(), Gpu(bandwidth_gbs=0.0), SHAPE.n_params)
    assert "bandwidth" in info.value.message


def test_accumulating_full_fine_tunes_read_back_their_weight_gradients() -> None:
    """Every micro-step writes each weight's gradient; with accumulation it also reads it back to add: a
    memory-bound cost per micro-step that does not shrink with the tokens (few-token full fine-tunes)."""
    one = step_work(SHAPE, TrainSetup(seq_len=1024), Gpu(), SHAPE.n_params)
    accumulating = step_work(SHAPE, TrainSetup(seq_len=1024, grad_accum=4), Gpu(), SHAPE.n_params)
    assert accumulating.fixed_bytes - one.fixed_bytes == 4 * SHAPE.n_params
    lora = TrainSetup(method="lora", seq_len=1024, grad_accum=4)
    assert (
        step_work(SHAPE, lora, Gpu(), 1000).fixed_bytes
        == step_work(SHAPE, replace(lora, grad_accum=1), Gpu(), 1000).fixed_bytes
    )
