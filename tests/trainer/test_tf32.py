"""``--tf32 on|off`` (issue 12): fp32 matmuls on TF32 tensor cores when on, recorded in ``run_start``,
and MFU/HFU divide by the TF32 peak when on and the fp32 peak when off; a plan with TF32 launches with it."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import make_config, read_events
from trainer import flops
from trainer.config import add_arguments, resolve
from trainer.loop import EXIT_OK, train


@pytest.fixture(autouse=True)
def _tf32_restored() -> Iterator[None]:
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_the_peak_is_tf32_when_on_and_fp32_when_off() -> None:
    h100 = "NVIDIA H100 80GB HBM3"
    assert flops.peak_flops(h100, torch.float32, tf32=True) == 494e12
    assert flops.peak_flops(h100, torch.float32, tf32=False) == 67e12
    assert flops.peak_flops("NVIDIA A100-SXM4-80GB", torch.float32, tf32=True) == 156e12
    assert flops.peak_flops(h100, torch.bfloat16, tf32=False) == 989e12  # 16-bit matmuls ignore it
    assert flops.peak_flops(h100, torch.bfloat16, tf32=True) == 989e12
    # an MFU of the same run is 494/67 = 7.4x higher against the fp32 peak than against the TF32 peak
    assert flops.peak_flops(h100, torch.float32, False) / flops.peak_flops(h100, torch.float32, True) == 67 / 494


@pytest.mark.parametrize("setting", ["on", "off"])
def test_a_run_sets_tf32_and_records_it(tmp_path: Path, model_config: Path, setting: str) -> None:
    flops.set_tf32(setting == "off")  # the opposite first: the run must set it
    run = tmp_path / "run"
    assert train(make_config(run, model_config, max_steps=1, precision="fp32", tf32=setting)) == EXIT_OK
    on = setting == "on"
    assert torch.backends.cuda.matmul.allow_tf32 is on and torch.backends.cudnn.allow_tf32 is on
    start = read_events(run)[0]
    assert start["tf32"] is on and start["config"]["tf32"] == setting


def test_the_flag_takes_on_or_off_only() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert resolve(parser.parse_args(["--data", "x", "--model-config", "m.json", "--tf32", "on"])).tf32 == "on"
    assert resolve(parser.parse_args(["--data", "x", "--model-config", "m.json"])).tf32 == "off"
    with pytest.raises(SystemExit):
        parser.parse_args(["--data", "x", "--model-config", "m.json", "--tf32", "yes"])


def test_a_plan_with_tf32_launches_the_trainer_with_it() -> None:
    from gpuplanner.plan.inputs import PlanInputs
    from gpuplanner.ui.plan.plan_inputs import trainer_settings

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for tf32, expected in ((True, "on"), (False, "off")):
        request = PlanInputs(model="gpt2", precision="fp32", tf32=tf32).to_request(default_gpu=None)
        extra = trainer_settings(request, {}, plan_id=None, price_per_gpu_hour=None)["extra"]
        assert (
            resolve(parser.parse_args(["--data", "x", "--model-config", "m.json", *shlex.split(extra)])).tf32
            == expected
        )
