"""FLOPs per token, MFU-based throughput and multi-GPU scaling against hand-computed cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuplanner.plan.setup import PlanInputError, TrainSetup
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


@dataclass(frozen=True)
class Gpu:
    name: str = "Test GPU"
    interconnect_gbs: float = 300.0
    default_mfu: float = 0.4
    tflops: object = None

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
    assert default.mfu == 0.4 and "assumed default" in default.source


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
    # 512 tokens per step compute in milliseconds; 7 GB of gradients over 5 GB/s take 1.4 s.
    eight = estimate_throughput(
        SHAPE, TrainSetup(gpus=8, micro_batch=1, seq_len=512), Gpu(interconnect_gbs=5.0), SHAPE.n_params
    )
    assert eight.scaling_efficiency < 0.01


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
