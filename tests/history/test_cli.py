"""`gpuplanner runs` end to end on real files: import, list, show, compare, export, delete, errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from gpuplanner import cli
from gpuplanner.history import open_db
from gpuplanner.history.plans import save_plan
from tests.history.streams import hand_computed_run
from tests.history.test_analytics import PLAN_DOC


@pytest.fixture(autouse=True)
def _only_runs_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # Other commands are built in parallel; this test needs only `runs`.
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.runs",))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(hand_computed_run().data() + b"garbage\n")
    return folder


def test_import_show_list_compare_export_delete(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_file = tmp_path / "env.sqlite"
    monkeypatch.setenv("GPUPLANNER_DB", str(db_file))  # the env var picks the database
    with open_db() as db:
        plan_id = save_plan(db, "p", PLAN_DOC)
    code, out, _ = run(
        capsys,
        "runs",
        "import",
        str(run_dir),
        "--price",
        "8",
        "--gpus",
        "8",
        "--gpu-type",
        "H100 SXM",
        "--plan",
        str(plan_id),
        "--json",
    )
    assert code == 0
    imported = json.loads(out)
    assert imported["run_id"] == 1 and imported["status"] == "finished" and imported["malformed"] == 1
    assert imported["inserted"] == len(hand_computed_run().records)
    code, out, _ = run(capsys, "runs", "import", str(run_dir / "events.jsonl"), "--json")  # again: nothing new
    assert json.loads(out)["run_id"] == 1 and json.loads(out)["inserted"] == 0

    code, out, _ = run(capsys, "runs", "show", "1", "--json")
    shown = json.loads(out)
    expected = {
        "run_id": 1,
        "status": "finished",
        "hours": 1.25,
        "gpu_hours": 10.0,
        "avg_util_pct": 60.0,
        "effective_gpu_hours": 6.0,
        "cost_usd": 80.0,
        "cost_per_sample_usd": 0.0004,
        "idle_gpu_hours": 0.0,
        "data_wait_pct": 0.0,
        "interruptions": 0,
        "samples": 200_000,
        "tokens": 102_400_000,
    }
    assert {k: shown[k] for k in expected} == pytest.approx(expected)
    assert shown["cost_per_effective_gpu_hour_usd"] == pytest.approx(13.3333, abs=1e-4)
    assert shown["cost_per_million_tokens_usd"] == pytest.approx(0.78125)
    assert shown["planned"]["hours"]["diff_pct"] == pytest.approx(25.0)
    assert run(capsys, "runs", "show", "1")[1].splitlines()[0].startswith("run_id")

    code, out, _ = run(capsys, "runs", "list", "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1 and rows[0]["cost_usd"] == "80" and rows[0]["gpu_type"] == "H100 SXM"
    code, out, _ = run(capsys, "runs", "compare", "1", "1", "--markdown")
    assert code == 0 and out.count("\n") == 4 and out.startswith("| run_id |")
    code, out, _ = run(capsys, "runs", "compare", "1", "1", "--json")
    assert [r["cost_usd"] for r in json.loads(out)] == [80.0, 80.0]

    export = tmp_path / "run1.json"
    assert run(capsys, "runs", "export", "1", "--format", "json", "--out", str(export))[0] == 0
    document = json.loads(export.read_text())
    assert document["summary"]["cost_usd"] == 80.0
    assert len(document["steps"]) == 9 and len(document["gpu_samples"]) == 600
    code, out, _ = run(capsys, "runs", "export", "1", "--format", "csv")
    assert "# steps\nseq,t,step" in out
    code, out, _ = run(capsys, "runs", "export", "1", "--format", "markdown")
    assert "## gpu_samples" in out

    code, out, _ = run(capsys, "runs", "delete", "1", "--json")
    assert code == 0 and json.loads(out) == {"deleted": 1}
    code, out, _ = run(capsys, "runs", "list", "--json")
    assert json.loads(out) == []
    with open_db(db_file) as db:
        assert db.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0] == 0  # cascaded


def test_db_flag_beats_the_environment(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPLANNER_DB", str(tmp_path / "env.sqlite"))
    assert run(capsys, "runs", "import", str(run_dir), "--db", str(tmp_path / "flag.sqlite"))[0] == 0
    assert (tmp_path / "flag.sqlite").exists() and not (tmp_path / "env.sqlite").exists()


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["runs", "import", "missing-dir"], 2, "RUN_DIR_OR_EVENTS_FILE"),
        (["runs", "import", "RUN", "--price", "-1"], 2, "--price"),
        (["runs", "import", "RUN", "--gpus", "0"], 2, "--gpus"),
        (["runs", "show", "5"], 1, "no run with id 5"),
        (["runs", "list", "--limit", "0"], 2, "--limit"),
        (["runs"], 2, "ACTION"),
    ],
)
def test_bad_input_is_one_line_without_traceback(
    capsys: pytest.CaptureFixture[str], run_dir: Path, argv: list[str], code: int, message: str
) -> None:
    open_db().close()
    argv = [str(run_dir) if a == "RUN" else a for a in argv]
    got, out, err = run(capsys, *argv)
    assert got == code
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_run_id_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(["runs", "show", "abc"])
    except SystemExit as exc:  # argparse exits; cli.main may also turn it into a return code
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    assert "positive whole number" in capsys.readouterr().err


def test_compact_downsamples(capsys: pytest.CaptureFixture[str], run_dir: Path) -> None:
    run(capsys, "runs", "import", str(run_dir))
    code, out, _ = run(capsys, "runs", "compact", "--older-than-days", "0", "--json")
    assert code == 0 and json.loads(out)["samples_removed"] == 600
    code, out, _ = run(capsys, "runs", "show", "1", "--json")
    assert json.loads(out)["avg_util_pct"] == 60.0


def test_measured_speeds_are_listed_and_a_bad_bench_result_can_be_deleted(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    from gpuplanner.history.calibration import record_bench

    db_path = tmp_path / "h.sqlite"
    assert (
        run(capsys, "runs", "import", str(run_dir), "--db", str(db_path), "--gpu-type", "H100 SXM", "--gpus", "8")[0]
        == 0
    )
    with open_db(db_path) as db:
        good = record_bench(db, gpu_type="L4", model_name="gpt2", result={"tokens_per_s": 700.0, "seq_len": 512})
        wrong = record_bench(db, gpu_type="L4 typo", model_name="gpt2", result={"tokens_per_s": 9e9, "seq_len": 512})
    code, out, _ = run(capsys, "runs", "measured", "--db", str(db_path), "--json")
    rows = {(r["gpu_type"], r["source"]): r for r in json.loads(out)}
    assert code == 0 and set(rows) == {("H100 SXM", "run"), ("L4", "bench"), ("L4 typo", "bench")}
    assert rows[("H100 SXM", "run")]["tokens_per_s_per_gpu"] == 125.0 and rows[("L4", "bench")]["ids"] == [good]
    code, out, _ = run(capsys, "runs", "measured", "--db", str(db_path), "--gpu", "L4")
    assert code == 0 and f"bench #{good}" in out and "typo" not in out and "700" in out
    assert run(capsys, "runs", "delete-bench", str(wrong), "--db", str(db_path))[0] == 0
    code, out, _ = run(capsys, "runs", "measured", "--db", str(db_path), "--json")
    assert {r["gpu_type"] for r in json.loads(out)} == {"H100 SXM", "L4"}
    code, _, err = run(capsys, "runs", "delete-bench", str(wrong), "--db", str(db_path))
    assert code == 1 and f"no bench result {wrong}" in err and len(err.strip().splitlines()) == 1
