"""`gpuplanner plan` and `gpuplanner compare` as a user runs them: output formats and bad input."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplanner.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_direct_case(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "plan",
        "--params",
        "7B",
        "--samples",
        "100k",
        "--epochs",
        "2",
        "--seq-len",
        "1024",
        "--samples-per-min",
        "500",
        "--price",
        "2.5",
        "--gpus",
        "2",
        "--spot-discount",
        "0.6",
        "--spot-overhead-pct",
        "10",
        "--deadline-hours",
        "6",
        "--budget-usd",
        "20",
        "--json",
    )
    assert code == 0, err
    document = json.loads(out)
    # 200k samples at 500/min = 6.667 h on 2 GPUs at $2.5 = $33.33; spot 0.4 x 1.1 of that.
    assert document["runtime"]["hours"] == pytest.approx(6.6667, rel=1e-4)
    assert document["on_demand"]["cost_usd"] == pytest.approx(33.33, abs=0.01)
    assert document["spot"]["cost_usd"] == pytest.approx(33.33 * 0.44, abs=0.01)
    assert document["deadline_ok"] is False and document["budget_ok"] is False
    assert document["inputs"]["params"] == 7_000_000_000
    assert document["throughput"]["source"].startswith("measured")


def test_plan_text_report_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "--model",
        "gpt2",
        "--method",
        "full",
        "--gpu",
        "a10g",
        "--samples",
        "20000",
        "--seq-len",
        "1024",
        "--micro-batch",
        "8",
    )
    assert code == 0
    assert "Peak memory per GPU" in out and "A10G" in out and "On-demand $" in out
    assert "Traceback" not in out
    # the report says what torch's counters will read, the same figures as the JSON's
    _, document, _ = run(
        capsys, "plan", "--model", "gpt2", "--method", "full", "--gpu", "a10g", "--samples", "20000",
        "--seq-len", "1024", "--micro-batch", "8", "--json",
    )  # fmt: skip
    memory = json.loads(document)["memory"]
    assert memory["allocated_gib"] < memory["reserved_gib"] < memory["total_gib"]
    assert f"torch reads  {memory['allocated_gib']:.2f} GiB allocated, {memory['reserved_gib']:.2f} GiB reserved" in out


def test_plan_csv_and_markdown_print_only_the_document(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--model", "gpt2", "--csv")
    assert code == 0
    rows = dict(csv.reader(io.StringIO(out)))
    assert rows["field"] == "value" and float(rows["memory.total_gib"]) > 0
    code, out, _ = run(capsys, "plan", "--model", "gpt2", "--markdown")
    assert out.splitlines()[0] == "| field | value |"


def test_compare_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "compare",
        "--model",
        "llama-3.2-1b",
        "--method",
        "lora",
        "--samples",
        "10000",
        "--deadline-hours",
        "5",
        "--json",
    )
    assert code == 0
    rows = json.loads(out)
    assert rows[0]["rank"] == 1 and rows[0]["usable"] is True
    assert {"gpu", "gpus", "provider", "pricing", "memory", "spot", "on_demand"} <= set(rows[0])
    assert {row["gpus"] for row in rows} == {1, 2, 4, 8}
    assert {row["pricing"] for row in rows} == {"on-demand", "spot"}


def test_compare_text_ends_with_a_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compare", "--model", "gpt2", "--gpus", "1", "--top", "5")
    assert code == 0
    lines = out.strip().splitlines()
    # header, rule, 5 rows, blank, the prices' date, the stale warning, the recommendation, the likely range
    assert lines[0].startswith("rank") and len(lines) == 2 + 5 + 5
    # how many of the offers shown are stale and whose (issue 31), not only the oldest row's date
    assert lines[-4].startswith("Prices as of ") and " offers older than 90 days (" in lines[-4]
    assert lines[-3].startswith("warning: prices of ") and "run `gpuplanner catalog update` for " in lines[-3]
    assert " at " in lines[-2] and lines[-2].endswith(".")
    # the winner's likely (P10-P90) hours and cost follow the recommendation
    assert lines[-1].startswith("Likely for the best option: ") and "P10-P90" in lines[-1]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["plan", "--micro-batch", "0"], "--micro-batch"),
        (["plan", "--micro-batch", "abc"], "--micro-batch"),
        (["plan", "--seq-len", "-5"], "--seq-len"),
        (["plan", "--gpu", "H900"], "--gpu"),
        (["plan", "--model", "no-such-model"], "--model"),
        (["plan", "--model-config", "/nonexistent/config.json"], "--model-config"),
        (["plan", "--model", "gpt2", "--params", "7B"], "--params"),
        (["plan", "--samples", "10", "--tokens", "10"], "--tokens"),
        (["plan", "--spot-price", "1", "--spot-discount", "0.5"], "--spot-discount"),
        (["plan", "--spot-discount", "1.5"], "--spot-discount"),
        (["plan", "--method", "dora"], "--method"),
        (["compare", "--price", "2"], "--price"),
        (["plan", "--price", "2"], "--gpu"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err
    assert "Traceback" not in err


def test_malformed_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text("{not json")
    assert main(["plan", "--model-config", str(config)]) == 2
    assert "--model-config" in capsys.readouterr().err


def test_a_real_process_never_shows_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuplanner", "plan", "--epochs", "zero"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--epochs" in result.stderr and "Traceback" not in result.stderr


def _write_finished_run(path: Path, tokens_per_s: float, seq_len: int, lora_rank: int = 0) -> None:
    from trainer.protocol import encode, make_record

    config = {"seq_len": seq_len, "micro_batch": 4, "lora_rank": lora_rank}
    records = [make_record("run_start", 0, 1000.0, config=config)]
    for step in range(1, 6):
        records.append(
            make_record(
                "step",
                step,
                1000.0 + step,
                step=step,
                loss=2.0,
                tokens_total=step * 4 * seq_len,
                samples_total=step * 4,
                step_time_s=1.0,
                tokens_per_s=tokens_per_s,
                samples_per_s=tokens_per_s / seq_len,
            )
        )
    records.append(make_record("run_end", 6, 1010.0, status="finished"))
    path.write_text("".join(encode(r) for r in records))


def test_measured_runs_in_the_history_calibrate_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events, db = tmp_path / "events.jsonl", tmp_path / "history.sqlite"
    _write_finished_run(events, tokens_per_s=12_345.0, seq_len=512)
    assert (
        main(
            [
                "runs",
                "import",
                str(events),
                "--db",
                str(db),
                "--gpu-type",
                "NVIDIA A10G",
                "--model",
                "gpt2",
                "--gpus",
                "1",
                "--price",
                "1.0",
            ]
        )
        == 0
    )
    capsys.readouterr()
    flags = [
        "plan",
        "--model",
        "gpt2",
        "--method",
        "full",
        "--gpu",
        "A10G",
        "--seq-len",
        "512",
        "--db",
        str(db),
        "--json",
    ]
    code, out, _ = run(capsys, *flags)
    assert code == 0
    throughput = json.loads(out)["throughput"]
    assert throughput["source"].startswith("calibrated: runs #1 on NVIDIA A10G")
    assert throughput["tokens_per_s"] == pytest.approx(12_345.0)
    code, out, _ = run(capsys, *flags, "--no-calibration")
    assert json.loads(out)["throughput"]["source"].startswith("estimate")
    # A measurement at another sequence length is not used as is: it corrects the step model's efficiency,
    # with a wider range than the exact match.
    code, out, _ = run(capsys, *[f if f != "512" else "1024" for f in flags])
    longer = json.loads(out)["throughput"]
    assert longer["source"].startswith("calibrated from speeds measured on A10G (sequence 512)")
    assert longer["tokens_per_s"] != pytest.approx(12_345.0)
    assert longer["uncertainty_pct"] > throughput["uncertainty_pct"]


def test_a_lora_run_calibrates_lora_plans_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events, db = tmp_path / "events.jsonl", tmp_path / "history.sqlite"
    _write_finished_run(events, tokens_per_s=30_000.0, seq_len=512, lora_rank=16)
    assert (
        main(
            [
                "runs",
                "import",
                str(events),
                "--db",
                str(db),
                "--gpu-type",
                "NVIDIA A10G",
                "--model",
                "gpt2",
                "--gpus",
                "1",
                "--price",
                "1.0",
            ]
        )
        == 0
    )
    capsys.readouterr()
    flags = ["plan", "--model", "gpt2", "--gpu", "A10G", "--seq-len", "512", "--db", str(db), "--json"]
    code, out, _ = run(capsys, *flags, "--method", "full")
    assert code == 0 and json.loads(out)["throughput"]["source"].startswith("estimate")
    code, out, _ = run(capsys, *flags, "--method", "lora")
    throughput = json.loads(out)["throughput"]
    assert throughput["source"].startswith("calibrated: runs #1") and throughput["tokens_per_s"] == pytest.approx(
        30_000.0
    )


@pytest.mark.slow  # a real traced step (torch, transformers, FakeTensorMode): 16-22 s under load
def test_trace_mode_says_which_answered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "architectures": ["GPT2LMHeadModel"],
                "n_layer": 2,
                "n_embd": 128,
                "n_head": 4,
                "n_positions": 512,
                "vocab_size": 2000,
            }
        )
    )
    common = [
        "plan",
        "--model-config",
        str(config),
        "--method",
        "full",
        "--seq-len",
        "256",
        "--micro-batch",
        "2",
        "--gpu",
        "A10G",
        "--json",
    ]
    code, out, _ = run(capsys, *common, "--memory", "trace")
    assert code == 0
    document = json.loads(out)
    assert document["memory"]["source"] == "trace"
    formula = json.loads(run(capsys, *common)[1])
    assert formula["memory"]["source"] == "formula"
    traced_work = document["memory"]["total_gib"] - document["memory"]["overhead_gib"]
    formula_work = formula["memory"]["total_gib"] - formula["memory"]["overhead_gib"]
    assert traced_work == pytest.approx(formula_work, rel=0.25)
    code, out, _ = run(capsys, "plan", "--model-config", str(config), "--method", "lora", "--memory", "trace", "--json")
    fallback = json.loads(out)
    assert fallback["memory"]["source"] == "formula"
    assert any("trace mode unavailable" in w for w in fallback["warnings"])


def test_double_dash_keeps_its_meaning_outside_run_and_hosts_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--model", "gpt2", "--json", "--", "--gpus", "8"]) == 2  # not silently dropped
    capsys.readouterr()
    odd = tmp_path / "-run.jsonl"
    _write_finished_run(odd, tokens_per_s=100.0, seq_len=64)
    db = tmp_path / "history.sqlite"
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:  # "--" lets a path that starts with "-" through, as argparse always did
        assert main(["runs", "import", "--db", str(db), "--", "-run.jsonl"]) == 0
    finally:
        os.chdir(cwd)


def test_compare_fit_settings_makes_a_24gb_card_usable_and_pin_keeps_the_micro_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = ["compare", "--model", "llama-3.1-8b", "--method", "lora", "--micro-batch", "4", "--grad-accum", "4"]
    flags += ["--gpu", "RTX 3090", "--gpus", "1", "--json"]

    def rows(*extra: str) -> list[dict]:
        code, out, _ = run(capsys, *flags, *extra)
        assert code == 0
        return json.loads(out)

    plain = rows()
    assert all(not row["memory"]["fits"] and not row["fitted_settings"] for row in plain)
    fitted = rows("--fit-settings")
    assert all(row["memory"]["fits"] for row in fitted)
    # the effective batch of 16 is kept: micro-batch m x accumulation a with m * a == 16 and m < 4
    (change,) = [text for text in fitted[0]["fitted_settings"] if text.startswith("micro-batch")]
    micro, accum = (int(word) for word in change.split() if word.isdigit())
    assert micro * accum == 16 and micro < 4
    assert fitted[0]["memory"]["total_gib"] < plain[0]["memory"]["total_gib"]
    pinned = rows("--fit-settings", "--pin", "micro-batch")
    assert all(not text.startswith("micro-batch") for row in pinned for text in row["fitted_settings"] or [])
