"""Where a run's billed time went: streams with known phases give exact figures, old runs say "not
recorded", the sum over runs adds GPU-hours and dollars, and ``runs show`` prints it (text and JSON)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from sqlite_utils import Database

from gpuplanner.cli import main
from gpuplanner.history.analytics import summarize
from gpuplanner.history.ingest import Ingestor, ingest_records
from gpuplanner.history.runs import create_run
from gpuplanner.history.time_breakdown import NOT_RECORDED, from_dict, sum_breakdowns
from tests.history.streams import StreamBuilder
from trainer.phases import PhaseClock
from trainer.protocol import RecordError, StreamParser, check_values

T0 = 1_763_900_000.0


def resumed_run() -> StreamBuilder:
    """Two processes with known phases: 0-300 s (preempted), a 100 s gap, 400-700 s, then the
    GPUs stay held for 60 s after the job (a GPU sample at 760 s)."""
    s = StreamBuilder(t0=T0)
    a = {"phases_start": T0}
    s.add("run_start", 0.0, config={"model_name": "gpt2"}, gpus=2)
    s.step(100.0, 10, 40, 4096, phases={"startup": 60.0, "data": 10.0, "train": 30.0}, **a)
    s.add(
        "eval", 150.0, step=15, eval_loss=2.0, phases={"startup": 60.0, "data": 10.0, "train": 70.0, "eval": 10.0}, **a
    )
    full_a = {"startup": 60.0, "data": 20.0, "train": 190.0, "eval": 10.0, "checkpoint": 20.0}
    s.add("checkpoint", 300.0, step=30, path="/ck/30", phases=full_a, **a)
    s.add("preempted", 300.0, step=30)
    b = {"phases_start": T0 + 400.0}
    s.add("run_start", 400.0, config={"model_name": "gpt2"}, gpus=2, resumed_from_step=30)
    s.step(500.0, 40, 160, 16384, phases={"startup": 72.0, "train": 28.0}, **b)
    full_b = {"startup": 72.0, "data": 20.0, "train": 168.0, "checkpoint": 30.0, "eval": 10.0}
    s.add("run_end", 700.0, status="finished", totals={}, phases=full_b, **b)
    s.gpu(760.0, 0, 0.0)
    return s


def old_run() -> StreamBuilder:
    s = StreamBuilder(t0=T0)
    s.add("run_start", 0.0, config={"model_name": "gpt2"}, gpus=1)
    s.step(100.0, 10, 40, 4096)
    s.add("run_end", 200.0, status="finished", totals={})
    return s


@pytest.fixture
def runs(db: Database) -> dict[str, int]:
    new = create_run(db, name="resumed", gpu_count=2, price_usd_per_gpu_hour=3.0)
    ingest_records(db, new, resumed_run().records)
    old = create_run(db, name="old", gpu_count=1, price_usd_per_gpu_hour=2.0)
    ingest_records(db, old, old_run().records)
    return {"new": new, "old": old}


def test_known_phases_give_exact_seconds_shares_and_dollars(db: Database, runs: dict[str, int]) -> None:
    summary = summarize(db, runs["new"])
    assert summary.hours * 3600 == pytest.approx(660.0)  # 760 s less the 100 s between the processes
    data = summary.time_breakdown
    assert data is not None and data["recorded"] and data["note"] is None
    seconds = {p["phase"]: p["seconds"] for p in data["phases"]}
    assert seconds == pytest.approx(
        {
            "startup": 132.0,
            "compile": 0.0,
            "data": 40.0,
            "train": 358.0,
            "checkpoint": 50.0,
            "eval": 20.0,
            "idle_after": 60.0,
            "unaccounted": 0.0,
        }
    )
    startup = from_dict(data).phase("startup")  # type: ignore[union-attr]
    assert startup is not None
    assert startup.share == pytest.approx(0.2)
    assert startup.gpu_hours == pytest.approx(132.0 * 2 / 3600)
    assert startup.cost_usd == pytest.approx(132.0 * 2 / 3600 * 3.0)  # $0.22
    assert data["cost_usd"] == pytest.approx(summary.cost_usd)
    assert sum(p["cost_usd"] for p in data["phases"]) == pytest.approx(summary.cost_usd)
    assert sum(p["share"] for p in data["phases"]) == pytest.approx(1.0)


def test_a_run_without_phases_says_not_recorded_and_the_sum_leaves_it_out(db: Database, runs: dict[str, int]) -> None:
    old = from_dict(summarize(db, runs["old"]).time_breakdown)
    assert old is not None and not old.recorded and old.note == NOT_RECORDED and old.phases == ()
    new = from_dict(summarize(db, runs["new"]).time_breakdown)
    assert new is not None
    total = sum_breakdowns([new, old])
    assert total.runs == 2 and total.runs_not_recorded == 1 and total.share_basis == "cost"
    assert total.cost_usd == pytest.approx(new.cost_usd)
    assert total.phase("startup").share == pytest.approx(0.2)  # type: ignore[union-attr]


def test_the_sum_over_runs_weights_by_dollars(db: Database, runs: dict[str, int]) -> None:
    """A cheap long run and an expensive short one: the shares are of the money spent."""
    other = create_run(db, name="pricey", gpu_count=8, price_usd_per_gpu_hour=10.0)
    s = StreamBuilder(t0=T0 + 10_000)
    s.add("run_start", 0.0, config={}, gpus=8)
    s.add("run_end", 90.0, status="finished", totals={}, phases={"startup": 90.0}, phases_start=T0 + 10_000)
    ingest_records(db, other, s.records)
    a = from_dict(summarize(db, runs["new"]).time_breakdown)
    b = from_dict(summarize(db, other).time_breakdown)
    assert a is not None and b is not None
    total = sum_breakdowns([a, b])
    cost_a, cost_b = 660 * 2 / 3600 * 3.0, 90 * 8 / 3600 * 10.0  # $1.10 and $2.00
    assert total.cost_usd == pytest.approx(cost_a + cost_b)
    startup = total.phase("startup")
    assert startup is not None
    assert startup.cost_usd == pytest.approx(0.2 * cost_a + cost_b)
    assert startup.share == pytest.approx((0.2 * cost_a + cost_b) / (cost_a + cost_b))
    assert startup.gpu_hours == pytest.approx(132 * 2 / 3600 + 90 * 8 / 3600)
    # without a price on one run the shares fall back to GPU-hours, and there are no dollars
    no_price = sum_breakdowns([a, dataclasses.replace(b, cost_usd=None)])
    assert no_price.share_basis == "gpu_hours" and no_price.cost_usd is None


def test_the_newest_totals_of_a_process_win_in_any_order_and_once(db: Database) -> None:
    run = create_run(db, name="shuffled", gpu_count=1, price_usd_per_gpu_hour=1.0)
    records = resumed_run().records
    ingest_records(db, run, list(reversed(records)), batch_size=2)
    ingest_records(db, run, records)  # again: duplicates change nothing
    rows = db.execute("SELECT process_t, seq FROM run_phases WHERE run_id = ? ORDER BY process_t", [run]).fetchall()
    assert rows == [(T0, 3), (T0 + 400.0, 7)]  # the checkpoint and the run_end
    seconds = {p["phase"]: p["seconds"] for p in summarize(db, run).time_breakdown["phases"]}  # type: ignore[index]
    assert seconds["startup"] == pytest.approx(132.0) and seconds["train"] == pytest.approx(358.0)


def test_phase_fields_stay_out_of_eval_extras_and_event_details(db: Database, runs: dict[str, int]) -> None:
    texts = [row[0] for row in db.execute("SELECT extra_json FROM evals WHERE run_id = ?", [runs["new"]])]
    texts += [row[0] for row in db.execute("SELECT detail_json FROM events WHERE run_id = ?", [runs["new"]])]
    assert texts and not any("phases" in (text or "") for text in texts)


def test_a_killed_process_leaves_unaccounted_time_and_a_running_run_no_idle(db: Database) -> None:
    run = create_run(db, name="killed", gpu_count=1, price_usd_per_gpu_hour=1.0)
    s = StreamBuilder(t0=T0)
    s.add("run_start", 0.0, config={}, gpus=1)
    s.step(50.0, 5, 20, 2048, phases={"startup": 20.0, "train": 30.0}, phases_start=T0)
    s.gpu(80.0, 0, 90.0)  # still running: the 30 s after the last step are not "idle after the job"
    ingest_records(db, run, s.records)
    data = summarize(db, run).time_breakdown
    seconds = {p["phase"]: p["seconds"] for p in data["phases"]}  # type: ignore[index]
    assert seconds["idle_after"] == 0.0 and seconds["unaccounted"] == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"phases": {"train": -1.0}, "phases_start": T0}, "phases.train"),
        ({"phases": {"train": "x"}, "phases_start": T0}, "phases.train"),
        ({"phases": [1, 2], "phases_start": T0}, "bad phases"),
        ({"phases": {"train": 1.0}}, "phases_start"),
        ({"phases_start": T0}, "bad phases"),
    ],
)
def test_malformed_phases_are_rejected_with_the_field_named(fields: dict, words: str) -> None:
    record = {"v": 1, "seq": 0, "t": T0, "kind": "checkpoint", "step": 1, "path": "/x", **fields}
    with pytest.raises(RecordError, match=words.replace(".", r"\.")):
        check_values(record)
    parser = StreamParser()
    assert parser.feed((json.dumps(record) + "\n").encode()) == [] and parser.malformed == 1
    assert words in (parser.last_error or "")


def test_runs_show_prints_the_breakdown_as_text_and_json(
    db_path: Path, db: Database, runs: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "show", str(runs["new"]), "--db", str(db_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    startup = next(p for p in document["time_breakdown"]["phases"] if p["phase"] == "startup")
    assert startup["label"] == "start-up and model load" and startup["share"] == pytest.approx(0.2)
    assert main(["runs", "show", str(runs["new"]), "--db", str(db_path)]) == 0
    text = capsys.readouterr().out
    assert "time breakdown (where the billed time went):" in text
    line = next(line for line in text.splitlines() if "start-up and model load" in line)
    assert line.split()[-3:] == ["s", "20.0%", "$0.22"]
    assert "compilation" not in text  # phases that took no time are left out
    assert main(["runs", "show", str(runs["old"]), "--db", str(db_path)]) == 0
    assert NOT_RECORDED in capsys.readouterr().out


def test_phase_clock_counts_every_second_once() -> None:
    now = [100.0]
    clock = PhaseClock(90.0, now=lambda: now[0])  # the process started 10 s ago: start-up so far
    assert clock.switch("data") == "startup"
    now[0] = 104.0
    clock.switch("compile")
    now[0] = 110.0
    clock.switch("train")
    clock.move("compile", "train", 2.5)
    now[0] = 111.0
    totals = clock.totals()
    assert totals == {"startup": 10.0, "compile": 3.5, "data": 4.0, "train": 3.5, "checkpoint": 0.0, "eval": 0.0}
    assert sum(totals.values()) == pytest.approx(now[0] - 90.0)
    with pytest.raises(ValueError, match="unknown phase 'nap'"):
        clock.switch("nap")


def test_ingest_from_bytes_keeps_phases(db: Database) -> None:
    run = create_run(db, name="bytes", gpu_count=2, price_usd_per_gpu_hour=3.0)
    ingestor = Ingestor(db, run, "file")
    data = resumed_run().data()
    for i in range(0, len(data), 97):  # arbitrary chunks, half lines included
        ingestor.feed_bytes(data[i : i + 97])
    ingestor.flush()
    assert db.execute("SELECT COUNT(*) FROM run_phases WHERE run_id = ?", [run]).fetchone()[0] == 2


def test_deleting_a_run_deletes_its_phases(db: Database, runs: dict[str, int]) -> None:
    from gpuplanner.history.runs import delete_run

    delete_run(db, runs["new"])
    assert db.execute("SELECT COUNT(*) FROM run_phases").fetchone()[0] == 0


def test_tiny_dollars_read_without_an_exponent() -> None:
    from gpuplanner.export.human import human_money  # runs show's phase costs

    assert [human_money(v) for v in (0.22, 0.0137, 5.67e-05, 8.52e-08, 0.0, 1234.5)] == [
        "$0.22",
        "$0.0137",
        "$0.0000567",
        "$0.0000000852",
        "$0.00",
        "$1,234.50",
    ]
