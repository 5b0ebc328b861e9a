"""`gpuplanner hosts bench`: trainer bench on a host (this machine, or a real sshd), recorded for the planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.calibration import lookup
from gpuplanner.history.db import open_db
from gpuplanner.launch.manager import RunError, RunManager
from tests.launch.conftest import CORPUS, add_ssh_host
from trainer.protocol import config_model_name


def _flags(model_config: Path, data: Path = CORPUS) -> list[str]:
    return [
        "--model-config",
        str(model_config),
        "--data",
        str(data),
        "--seq-len",
        "32",
        "--micro-batch",
        "4",
        "--device",
        "cpu",
    ]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/models/Llama-3-8B/config.json", "Llama-3-8B"),
        ("Llama-3-8B/config.json", "Llama-3-8B"),
        ("C:\\models\\phi-2\\config.json", "phi-2"),
        ("./tiny-gpt2.json", "tiny-gpt2"),
        ("tiny-gpt2.json", "tiny-gpt2"),
        ("/abs/dir/tiny-gpt2.json", "tiny-gpt2"),
        ("config.json", "config"),
        ("runs/my-config", "my-config"),
        ("../config.json", "config"),
        ("..\\config.json", "config"),
        ("Phi-2/Config.JSON", "Phi-2"),
    ],
)
def test_a_config_file_has_one_name_everywhere(path: str, name: str) -> None:
    assert config_model_name(path) == name


def test_the_planner_names_a_config_file_as_runs_do(tmp_path: Path) -> None:
    from gpuplanner.plan.model_spec import from_config_file

    folder = tmp_path / "Llama-3.2-1B"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "_name_or_path": "meta-llama/Llama-3.2-1B",
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "vocab_size": 1000,
            }
        )
    )
    assert (
        from_config_file(folder / "config.json").name
        == "Llama-3.2-1B"
        == config_model_name(str(folder / "config.json"))
    )


def test_bench_result_ignores_what_a_login_shell_printed_first() -> None:
    from gpuplanner.launch.command_lines import bench_result

    assert bench_result(0, 'Welcome to the GPU box\n{\n "tokens_per_s": 5.0\n}\n', "") == {"tokens_per_s": 5.0}
    with pytest.raises(RuntimeError, match="printed no JSON result .*Welcome"):
        bench_result(0, "Welcome to the GPU box\n", "")
    with pytest.raises(RuntimeError, match=r"failed \(exit 1\): training failed: data not found: x"):
        bench_result(1, "", "Traceback...\ntrainer: training failed: data not found: x\n  File y\n")


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): a real bench or sshd
def test_cli_bench_records_a_measurement_the_planner_uses(
    db_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["hosts", "bench", "local", "--db", str(db_path), "--steps", "3", "--warmup-steps", "1", "--json"]
    assert main([*args, "--", *_flags(model_config)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["device"] == "cpu" and result["measured_steps"] == 3 and result["tokens_per_s"] > 0
    assert "recorded_id" not in result and "CPU" in result["not_recorded"]  # a CPU figure is no GPU's speed
    assert main([*args, "--gpu-type", "NVIDIA A10G", "--", *_flags(model_config)]) == 0
    result = json.loads(capsys.readouterr().out)
    with open_db(db_path) as db:
        cal = lookup(db, "NVIDIA A10G", config_model_name(str(model_config)), seq_len=32, precision="fp32")
    assert cal is not None and cal.source == "bench" and cal.ids == (result["recorded_id"],)
    assert cal.tokens_per_s == pytest.approx(result["tokens_per_s"])
    plan = [
        "plan",
        "--model-config",
        str(model_config),
        "--gpu",
        "A10G",
        "--seq-len",
        "32",
        "--micro-batch",
        "4",
        "--method",
        "full",
        "--db",
        str(db_path),
        "--json",
    ]
    assert main([*plan, "--precision", "fp32"]) == 0
    throughput = json.loads(capsys.readouterr().out)["throughput"]
    assert throughput["source"] == f"calibrated: trainer bench results #{result['recorded_id']} on NVIDIA A10G"
    assert throughput["tokens_per_s"] == pytest.approx(result["tokens_per_s"], rel=1e-3)
    assert main([*plan, "--precision", "bf16-mixed"]) == 0  # an fp32 measurement says nothing about bf16
    assert json.loads(capsys.readouterr().out)["throughput"]["source"].startswith("estimate")


def test_cli_bench_rejects_bad_input_clearly(
    db_path: Path, model_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["hosts", "bench", "local", "--db", str(db_path)]
    assert main(base) == 2 and "TRAINER FLAGS" in capsys.readouterr().err
    assert main([*base, "--", *_flags(model_config), "--run-dir", "x"]) == 2
    assert "--run-dir is set by the launcher" in capsys.readouterr().err
    assert main([*base, "--steps", "0", "--", *_flags(model_config)]) == 2
    assert main([*base, "stray", "--", *_flags(model_config)]) == 2  # a second host name is no trainer flag
    assert main(["hosts", "bench", "nowhere", "--db", str(db_path), "--", *_flags(model_config)]) == 2
    capsys.readouterr()
    assert main([*base, "--steps", "2", "--warmup-steps", "0", "--", *_flags(model_config, tmp_path / "no-data")]) == 1
    err = capsys.readouterr().err
    assert "trainer bench failed" in err and "no-data" in err


def test_cli_bench_without_a_trainer_python_says_how_to_get_one(
    db_path: Path, model_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUPLANNER_TRAINER_PYTHON", "/nonexistent/python")
    assert main(["hosts", "bench", "local", "--db", str(db_path), "--", *_flags(model_config)]) == 1
    err = capsys.readouterr().err
    assert "GPUPLANNER_TRAINER_PYTHON" in err and "TRAINER FLAGS" not in err


@pytest.mark.slow  # over the 5 s budget of an unmarked test (issue 25): a real bench or sshd
def test_cli_bench_refuses_a_gpu_type_the_catalog_does_not_know(
    db_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["hosts", "bench", "local", "--db", str(db_path), "--steps", "1", "--warmup-steps", "0"]
    assert main([*base, "--gpu-type", "Quantum GPU 9000", "--", *_flags(model_config)]) == 2  # before any bench
    assert "catalog knows no GPU named 'Quantum GPU 9000'" in capsys.readouterr().err
    flags = [f"--model-config={model_config}", *_flags(model_config)[2:]]  # the flag=value spelling
    assert main([*base, "--gpu-type", "NVIDIA L4", "--", *flags]) == 0
    with open_db(db_path) as db:
        cal = lookup(db, "NVIDIA L4", config_model_name(str(model_config)), precision="fp32")
    assert cal is not None  # stored under the model's own name, not "unknown"


def test_cli_bench_warns_when_the_device_name_is_unknown_to_the_catalog(
    db_path: Path, model_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A GPU whose CUDA name the catalog cannot map (no GPU here, so the manager's answer is given)
    monkeypatch.setattr(
        RunManager,
        "bench",
        lambda self, *a, **k: {
            "device": "NVIDIA Quantum 9000",
            "precision": "bfloat16",
            "tokens_per_s": 1e6,
            "step_time_s": 0.1,
            "recorded_id": 4,
            "recorded_gpu_type": "NVIDIA Quantum 9000",
        },
    )
    assert main(["hosts", "bench", "local", "--db", str(db_path), "--", *_flags(model_config)]) == 0
    out = capsys.readouterr().out
    assert "recorded as bench result #4, but the catalog knows no GPU named 'NVIDIA Quantum 9000'" in out


@pytest.mark.slow
def test_bench_over_ssh(db_path: Path, sshd, known_hosts: Path, model_config: Path) -> None:
    add_ssh_host(db_path, "box", sshd, trust=known_hosts)
    manager = RunManager(db_path)
    try:
        result = manager.bench("box", _flags(model_config), warmup_steps=1, steps=2, gpu_type="NVIDIA L4")
        assert result["measured_steps"] == 2 and result["recorded_gpu_type"] == "NVIDIA L4"
        with pytest.raises(RunError, match="trainer bench failed"):
            manager.bench("box", [*_flags(model_config), "--seq-len", "-3"], warmup_steps=0, steps=1)
    finally:
        manager.close()
    with open_db(db_path) as db:
        cal = lookup(db, "NVIDIA L4", config_model_name(str(model_config)), seq_len=32, precision="fp32")
    assert cal is not None and cal.ids == (result["recorded_id"],)
