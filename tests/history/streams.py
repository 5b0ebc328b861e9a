"""Synthetic telemetry streams built with trainer.protocol, for the history tests."""

from __future__ import annotations

from typing import Any

from trainer.protocol import encode, make_record

T0 = 1_763_800_000.0
GIB = 1 << 30


class StreamBuilder:
    """Appends records with rising seq; ``lines()``/``data()`` give the encoded stream."""

    def __init__(self, t0: float = T0) -> None:
        self.t0 = t0
        self.records: list[dict[str, Any]] = []

    def add(self, kind: str, at: float, **fields: Any) -> dict[str, Any]:
        record = make_record(kind, len(self.records), self.t0 + at, **fields)
        self.records.append(record)
        return record

    def gpu(
        self,
        at: float,
        index: int,
        util: float,
        mem_used: int = 10 * GIB,
        mem_total: int = 80 * GIB,
        node: str = "n0",
        power: float = 300.0,
        throttle: int = 0,
        clock: float = 1980,
    ) -> None:
        self.add(
            "gpu",
            at,
            node=node,
            index=index,
            util_pct=util,
            mem_used_bytes=mem_used,
            mem_total_bytes=mem_total,
            power_w=power,
            temp_c=60.0,
            sm_clock_mhz=clock,
            throttle_reasons=throttle,
            simulated=False,
        )

    def step(
        self,
        at: float,
        step: int,
        samples_total: int,
        tokens_total: int,
        step_time_s: float = 1.0,
        data_wait_s: float = 0.0,
        **extra: Any,
    ) -> None:
        fields: dict[str, Any] = dict(
            step=step,
            epoch=0.0,
            loss=2.0 - step * 1e-4,
            lr=1e-4,
            tokens_total=tokens_total,
            samples_total=samples_total,
            tokens_per_s=1000.0,
            samples_per_s=10.0,
            step_time_s=step_time_s,
            data_wait_s=data_wait_s,
            peak_mem_bytes=20 * GIB,
            mfu=0.4,
            spend_usd=0.0,
        )
        fields.update(extra)
        self.add("step", at, **fields)

    def data(self) -> bytes:
        return "".join(encode(r) for r in self.records).encode()


def hand_computed_run(sample_every_s: float = 60.0) -> StreamBuilder:
    """The issue's example: 8 GPUs for 1.25 h, 60% mean utilisation, 200k samples."""
    s = StreamBuilder()
    s.add("run_start", 0.0, config={"model_name": "gpt2"}, host="h1", gpus=8, resumed_from_step=None)
    n = int(4500 / sample_every_s)
    for i in range(n):
        for g in range(8):
            s.gpu(i * sample_every_s + 1.0, g, 40.0 if (i + g) % 2 else 80.0)
        if i % 10 == 0:
            s.step(i * sample_every_s + 2.0, i, samples_total=200_000 * i // n, tokens_total=200_000 * i // n * 512)
    s.step(4499.0, n, samples_total=200_000, tokens_total=200_000 * 512)
    s.add("run_end", 4500.0, status="finished", totals={})
    return s
