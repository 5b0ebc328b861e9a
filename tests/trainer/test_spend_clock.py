"""One spend clock: the bundled trainer's budget stop and the command monitor's count the same spend and
GPU-hours from the same start and carried-over totals, and stop at the same moment with the same words (the
monitor with no grace period: its SIGTERM comes a grace period before the cap, tests/trainer/test_monitor_cap.py).

Both objects are the real ones (the trainer's ``_Trainer`` before it loads anything, the monitor of a
user's command before it starts one); only the clock they read is stepped by hand."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import trainer.command_monitor
import trainer.spend
from trainer import dist
from trainer.command_monitor import Monitor, add_arguments
from trainer.config import TrainConfig
from trainer.loop import _Trainer
from trainer.spend import SpendClock, SpendTotals, cap_reached, cost_for_hours, instance_hour_usd, spend_usd
from trainer.telemetry import Telemetry

T0 = 5000.0


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def monotonic(self) -> float:
        return self.now


def make_monitor(run_dir: Path, price: float | None, gpus: int, nodes: int, budget: float | None, cap: float | None):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--run-dir", str(run_dir), "--gpus", str(gpus), "--nodes", str(nodes), "--simulate-gpu", "--grace-s", "0"]
    if price is not None:
        argv += ["--price-per-gpu-hour", repr(price)]
    if budget is not None:
        argv += ["--budget-usd", repr(budget)]
    if cap is not None:
        argv += ["--max-gpu-hours", repr(cap)]
    args = parser.parse_args([*argv, "--", "true"])
    monitor = Monitor(args, list(args.job[1:]))
    monitor.spend_clock.started_mono = T0
    return monitor


def make_trainer(run_dir: Path, price: float | None, world: int, budget: float | None, cap: float | None):
    config = TrainConfig(run_dir=str(run_dir), price_per_gpu_hour=price, budget_usd=budget, max_gpu_hours=cap)
    info = dist.DistInfo(rank=0, world=world, local_rank=0, local_world=world)
    tele = Telemetry(run_dir / "trainer-events.jsonl")
    return _Trainer(config, info, torch.device("cpu"), run_dir, tele, None, started=(0.0, T0))


@pytest.mark.parametrize(
    ("price", "gpus", "nodes", "before", "budget", "cap"),
    [
        (3600.0, 2, 1, None, 10.0, None),  # $2 a second: the budget is spent after 5 s
        (7.5, 4, 2, {"elapsed_s": 100.0, "gpu_hours": 0.2, "spend_usd": 1.5}, 1.6, None),  # a resumed run
        (None, 1, 1, None, None, 0.001),  # no price: only the GPU-hour cap can stop it (after 3.6 s)
    ],
)
def test_the_trainer_and_the_command_monitor_stop_at_the_same_spend(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    price: float | None,
    gpus: int,
    nodes: int,
    before: dict[str, float] | None,
    budget: float | None,
    cap: float | None,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(trainer.spend, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(trainer.command_monitor, "time", SimpleNamespace(monotonic=clock.monotonic, time=time.time))
    monitor_dir, trainer_dir = tmp_path / "monitor", tmp_path / "trainer"
    monitor_dir.mkdir()
    trainer_dir.mkdir()
    if before is not None:  # an earlier attempt ended with these totals (the monitor reads its run_end)
        end = {"v": 1, "seq": 1, "t": 1.0, "kind": "run_end", "status": "preempted", "totals": before}
        (monitor_dir / "events.jsonl").write_text(json.dumps(end) + "\n")
    monitor = make_monitor(monitor_dir, price, gpus, nodes, budget, cap)
    train = make_trainer(trainer_dir, price, gpus * nodes, budget, cap)
    if before is not None:  # what the trainer's checkpoint carries over on a resume
        train.spend_clock.carry_over(before["elapsed_s"], before["gpu_hours"], before["spend_usd"])

    try:
        stops: dict[str, tuple[float, str]] = {}
        for tenth in range(1, 200):
            clock.now = T0 + tenth / 10.0
            monitor_totals, trainer_totals = monitor.clock_totals(), train._tick()
            assert monitor_totals == trainer_totals
            if "monitor" not in stops:
                monitor._check_limits()
                if monitor.stop_reason == "budget_stop":
                    stops["monitor"] = (clock.now, monitor.stop_detail)
            if "trainer" not in stops:
                train._tick_budget()
                if train.flag.set:
                    stops["trainer"] = (clock.now, train.flag.detail)
            if len(stops) == 2:
                break
    finally:
        monitor.tele.close()
        train.tele.close()
    assert stops["monitor"] == stops["trainer"]
    when, words = stops["trainer"]
    if price is None:
        assert monitor.clock_totals().spend_usd is None and train._spend() is None  # unknown, never $0
        assert words.endswith("GPU-hours reached the cap 0.001") and when == pytest.approx(T0 + 3.6)
    else:
        assert words.startswith("spend $") and f"reached the budget ${budget:g}" in words
        spent = (before or {}).get("spend_usd", 0.0)
        expected_s = (budget - spent) * 3600.0 / (price * gpus * nodes)
        assert when == pytest.approx(T0 + expected_s, abs=0.1 + 1e-9)


def test_spend_arithmetic_and_the_cap_rule() -> None:
    assert instance_hour_usd(2.5, 8) == 20.0 and instance_hour_usd(None, 8) is None
    assert spend_usd(2.5, 8, 5400.0) == pytest.approx(30.0) and spend_usd(None, 8, 5400.0) is None
    assert cost_for_hours(2.5, 8, 1.5) == pytest.approx(30.0)
    clock = SpendClock(2.0, 3, started_mono=100.0, base=SpendTotals(60.0, 0.5, 1.0))
    assert clock.totals(now_mono=100.0 + 1800.0) == SpendTotals(1860.0, 2.0, pytest.approx(4.0))
    unpriced = SpendClock(None, 3, started_mono=0.0)
    assert unpriced.totals(now_mono=3600.0) == SpendTotals(3600.0, 3.0, None)
    assert cap_reached(SpendTotals(1.0, 1.0, None), budget_usd=0.5, max_gpu_hours=None) is None
    assert cap_reached(SpendTotals(1.0, 1.0, 0.5), budget_usd=0.5, max_gpu_hours=None) == (
        "spend $0.5000 reached the budget $0.5"
    )
    assert cap_reached(SpendTotals(1.0, 2.0, 0.1), budget_usd=0.5, max_gpu_hours=2) == (
        "2.0000 GPU-hours reached the cap 2"
    )
