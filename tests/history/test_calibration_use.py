"""Calibration says what it did (issue 30 item 4): a run that cannot calibrate says why in `runs show`
(text and `calibration` in JSON), History and the plan's source line; planned against actual on other
hardware (another GPU, the CPU) is labelled, not a percentage; `runs import --gpu-type` of a run already
in the history needs `--relabel` and is recorded as relabelled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplanner import cli
from gpuplanner.history import open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.calibration import calibration_of, measurements
from gpuplanner.history.ingest import ingest_records
from gpuplanner.history.plans import save_plan
from gpuplanner.history.runs import create_run
from gpuplanner.ui.history.history_summary import summary_html
from tests.history.streams import StreamBuilder

PLAN = {
    "inputs": {"model": "gpt2", "gpu": "RTX 4090", "gpus": 1, "seq_len": 512},
    "memory": {"weights_gib": 1.0, "total_gib": 8.0, "capacity_gib": 24.0, "fits": True},
    "throughput": {"tokens_per_s": 20_000.0, "samples_per_min": 2_000.0, "source": "mfu"},
    "runtime": {"hours": 0.01, "gpu_hours": 0.01, "effective_batch": 16},
    "on_demand": {"hours": 0.01, "cost_usd": 0.01},
}


def stream(*, simulated: bool = False, device: str | None = None, steps: int = 5, end: str = "finished") -> bytes:
    """A short run of gpt2 at sequence 512: GPU samples (simulated or not), ``steps`` timed steps."""
    s = StreamBuilder()
    extra: dict[str, Any] = {"device": device} if device else {}
    s.add("run_start", 0.0, config={"model_name": "gpt2", "seq_len": 512}, host="h1", gpus=1, **extra)
    for i in range(1, steps + 1):
        s.gpu(i * 10.0, 0, 90.0)
        if simulated:
            s.records[-1]["simulated"] = True
        s.step(i * 10.0 + 1, i, samples_total=16 * i, tokens_total=16 * 512 * i, tokens_per_s=300.0)
    s.add("run_end", steps * 10.0 + 5, status=end, totals={})
    return s.data()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_cpu_run_against_a_gpu_plan_says_why_and_is_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = tmp_path / "history.sqlite"
    with open_db(db_path) as db:
        plan_id = save_plan(db, "4090 plan", PLAN)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_bytes(stream(simulated=True))
    db_flag = ["--db", str(db_path)]
    args = ["runs", "import", str(run_dir), "--gpu-type", "RTX 4090", "--plan", str(plan_id), "--price", "1"]
    assert run(capsys, *args, *db_flag)[0] == 0
    code, out, _ = run(capsys, "runs", "show", "1", "--json", *db_flag)
    doc = json.loads(out)
    assert code == 0 and doc["calibration"]["calibrates"] is False and doc["calibration"]["reason"] == "simulated"
    hardware = doc["planned"]["hardware"]
    assert (hardware["planned_gpu"], hardware["comparable"]) == ("RTX 4090", False)
    assert "different hardware" in hardware["note"]
    assert doc["planned"]["tokens_per_s"]["diff_pct"] == pytest.approx(-98.5)  # the number is kept in JSON...
    code, text, _ = run(capsys, "runs", "show", "1", *db_flag)
    assert "calibration" in text and "no: its GPU samples are simulated" in text
    assert "other hardware" in text and "-98.5%" not in text  # ...and labelled, not printed as a %
    assert "planned vs actual (planned for RTX 4090, ran on no GPU that NVML saw" in text
    with open_db(db_path) as db:
        assert measurements(db) == {}  # nothing calibrates the 4090 with a CPU's speed
        html = summary_html(summarize(db, 1))
    assert "Calibrates the planner" in html and "no: its GPU samples are simulated" in html
    assert "other hardware" in html
    from gpuplanner.ui.history.history_model import cost_vs_plan_pct  # the History table's "vs plan %"

    with open_db(db_path) as db:
        assert cost_vs_plan_pct(summarize(db, 1)) is None
    # the plan's source line says why its speed is estimated
    code, plan_text, _ = run(capsys, "plan", "--model", "gpt2", "--gpu", "RTX 4090", "--seq-len", "512", *db_flag)
    assert code == 0 and "source: estimate" in plan_text
    assert "(run #1 does not calibrate: its GPU samples are simulated" in plan_text


@pytest.mark.parametrize(
    ("data", "gpu_type", "model", "reason", "words"),
    [
        (dict(), "A10G", "gpt2", None, "calibrates the planner's speed of gpt2 on A10G"),
        (dict(), None, "gpt2", "no_gpu_type", "its GPU type is unknown"),
        (dict(), "A10G", None, "no_model", "its model is unknown"),
        (dict(device="cpu"), "A10G", "gpt2", "cpu", "it trained on the CPU"),
        (dict(simulated=True), "A10G", "gpt2", "simulated", "its GPU samples are simulated"),
        (dict(steps=0), "A10G", "gpt2", "too_few_steps", "too few steps: 0 step record(s)"),
        (dict(end="failed"), "A10G", "gpt2", "not_finished", "the run is failed"),
    ],
)
def test_each_reason_not_to_calibrate(
    tmp_path: Path, data: dict[str, Any], gpu_type: str | None, model: str | None, reason: str | None, words: str
) -> None:
    with open_db(tmp_path / "h.sqlite") as db:
        run_id = create_run(db, gpu_type=gpu_type, model_name=model)
        records = [json.loads(line) for line in stream(**data).decode().splitlines()]
        if model is None:
            records[0]["config"] = {"seq_len": 512}
        ingest_records(db, run_id, records)
        use = calibration_of(db, run_id)
        assert (use.calibrates, use.reason) == (reason is None, reason) and use.detail.startswith(words)
        assert bool(measurements(db)) == (reason is None)  # the same rule as the planner's measurements
        assert summarize(db, run_id).calibration == use.as_dict()


def test_import_with_another_gpu_type_needs_relabel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "history.sqlite"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_bytes(stream())
    db_flag = ["--db", str(db_path)]
    assert run(capsys, "runs", "import", str(run_dir), "--gpu-type", "A10G", *db_flag)[0] == 0
    code, out, err = run(capsys, "runs", "import", str(run_dir), "--gpu-type", "RTX 4090", *db_flag)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--gpu-type" in err and "'A10G'" in err and "--relabel" in err
    with open_db(db_path) as db:
        assert db.execute("SELECT gpu_type FROM runs WHERE id = 1").fetchone() == ("A10G",)  # nothing changed
    assert run(capsys, "runs", "import", str(run_dir), "--gpu-type", "A10G", *db_flag)[0] == 0  # same: fine
    code, out, _ = run(
        capsys, "runs", "import", str(run_dir), "--gpu-type", "RTX 4090", "--relabel", "--json", *db_flag
    )
    assert code == 0 and json.loads(out)["relabelled"] == {"field": "gpu_type", "from": "A10G", "to": "RTX 4090"}
    with open_db(db_path) as db:
        assert db.execute("SELECT gpu_type FROM runs WHERE id = 1").fetchone() == ("RTX 4090",)
        events = db.execute("SELECT seq, detail_json FROM events WHERE run_id = 1 AND kind = 'relabelled'").fetchall()
        assert len(events) == 1 and events[0][0] < 0 and json.loads(events[0][1])["from"] == "A10G"
    code, out, _ = run(capsys, "runs", "show", "1", "--json", *db_flag)
    assert "relabelled from A10G with runs import --relabel" in json.loads(out)["calibration"]["detail"]
