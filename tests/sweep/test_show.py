"""Looking back at a search: `gpuplanner sweep show` over a real search of the tiny model on this machine
(tags on every trial, cost per trial, spend curve, counts, the best trial launched again from its command),
and the look-back arithmetic on hand-made figures."""

from __future__ import annotations

import csv
import io
import json
import shlex
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import connect
from gpuplanner.history.tags import tags_of
from gpuplanner.sweep.lookback import TrialRow, best_against_spend, best_run_command, spend_curve
from tests.sweep.conftest import trainer_flags


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def trial(number: int, value: float | None, ended: float, spend: float = 0.0) -> TrialRow:
    return TrialRow(number, "complete", "complete", "finished", number, "local", {"lr": 0.1}, value, value, 6,
                    spend, 0.0, ended - 1.0, ended)  # fmt: skip


def test_spend_curve_sums_each_runs_latest_spend() -> None:
    # run 1 spends 1, 2, 3 at t=0,2,4; run 2 spends 5, 6 at t=1,3: the total at each record by hand
    points = [(0.0, 1, 1.0), (2.0, 1, 2.0), (4.0, 1, 3.0), (1.0, 2, 5.0), (3.0, 2, 6.0)]
    assert spend_curve(points) == [(0.0, 1.0), (1.0, 6.0), (2.0, 7.0), (3.0, 8.0), (4.0, 9.0)]
    thinned = spend_curve([(float(i), 1, float(i)) for i in range(1000)], limit=50)
    assert len(thinned) == 50 and thinned[-1] == (999.0, 999.0) and thinned[0] == (0.0, 0.0)


def test_best_against_spend_keeps_only_improvements() -> None:
    curve = [(0.0, 0.0), (10.0, 4.0), (20.0, 9.0), (30.0, 12.0)]
    rows = [trial(0, 2.0, 10.0), trial(1, 2.5, 20.0), trial(2, 1.5, 30.0), trial(3, None, 25.0)]
    assert best_against_spend(rows, curve) == [(4.0, 2.0, 0), (12.0, 1.5, 2)]


def test_best_command_keeps_the_trainer_flags_and_drops_the_trials_share() -> None:
    config = json.dumps({"trainer_args": ["--lr", "0.01", "--max-gpu-hours", "0.5", "--budget-usd=3", "--data", "a b"]})
    command = best_run_command("lr", trial(4, 1.0, 5.0), config, {"project": "x", "sweep": "lr"})
    assert command == "gpuplanner run --host local --name lr-best-trial-4 --tag project=x -- --lr 0.01 --data 'a b'"


@pytest.mark.slow  # the one search of the suite whose trials run the real trainer (the others: the protocol fake)
def test_sweep_show_looks_back_at_a_real_search(
    capsys: pytest.CaptureFixture[str], db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    flags = trainer_flags(model_config, tmp_path / "cache")
    code, out, err = run(
        capsys,
        "sweep", "run", "--db", str(db_path), "--host", "local", "--space", str(space_file), "--study", "look",
        "--trials", "3", "--max-steps", "6", "--min-steps", "3", "--reduction-factor", "2", "--budget-usd", "10000",
        "--seed", "1", "--tag", "project=search", "--tag", "owner=ana", "--json", "--", *flags,
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    conn = connect(db_path)
    try:
        tags = tags_of(conn)
        spend = dict(conn.execute("SELECT run_id, MAX(spend_usd) FROM steps GROUP BY run_id").fetchall())
        for run_id, detail in conn.execute("SELECT run_id, detail_json FROM events WHERE kind = 'run_end'"):
            end = (json.loads(detail).get("totals") or {}).get("spend_usd") or 0.0  # spent after the last step
            spend[run_id] = max(spend.get(run_id) or 0.0, end)
    finally:
        conn.close()
    run_ids = [t["run_id"] for t in result["trials"]]
    assert None not in run_ids, result["trials"]
    assert all(tags[r] == {"project": "search", "owner": "ana", "sweep": "look"} for r in run_ids)

    code, out, err = run(capsys, "sweep", "show", "look", "--db", str(db_path), "--json")
    assert code == 0, err
    review = json.loads(out)
    assert review["budget_usd"] == 10000 and review["tags"] == {"project": "search", "owner": "ana"}
    assert review["stop_reason"] == result["stop_reason"]
    counts = review["counts"]
    assert counts["trials"] == 3 == sum(counts[k] for k in ("finished", "pruned", "stopped", "failed", "running"))
    assert counts["finished"] == sum(1 for t in result["trials"] if t["state"] == "complete") >= 1
    assert counts["pruned"] == sum(1 for t in result["trials"] if t["end"] == "pruned")
    for row in review["trials"]:  # cost per trial: the trainer's own spend records of its run, its end too
        assert row["spend_usd"] == pytest.approx(spend[row["run_id"]], abs=1e-6)
    assert review["spent_usd"] == pytest.approx(sum(spend[r] for r in run_ids), abs=1e-5)
    curve = [p["spent_usd"] for p in review["spend_curve"]]
    assert curve == sorted(curve) and curve[-1] == pytest.approx(review["spent_usd"], abs=1e-5)
    best = min((t for t in result["trials"] if t["state"] == "complete"), key=lambda t: t["value"])
    assert review["best"]["number"] == best["number"] and review["best"]["value"] == pytest.approx(best["value"])
    assert review["best_curve"][-1]["best_value"] == pytest.approx(best["value"])
    assert review["best_curve"][-1]["spent_usd"] <= review["spent_usd"] + 1e-9

    # text, CSV and Markdown say the same
    code, out, _ = run(capsys, "sweep", "show", "look", "--db", str(db_path))
    assert (
        f"{counts['finished']} finished, {counts['pruned']} pruned" in out and "run it in full: gpuplanner run" in out
    )
    code, out, _ = run(capsys, "sweep", "show", "look", "--db", str(db_path), "--csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert [int(r["run"]) for r in table] == run_ids
    assert sum(float(r["spend_usd"]) for r in table) == pytest.approx(review["spent_usd"], abs=1e-3)
    target = tmp_path / "look.md"
    code, _, _ = run(capsys, "sweep", "show", "look", "--db", str(db_path), "--markdown", "--out", str(target))
    assert code == 0 and target.read_text().startswith("# Search look")

    # the best trial's command launches a full run with the same trainer flags and the search's tags
    command = review["best_command"]
    assert "--budget-usd" not in command and "--max-gpu-hours" not in command and "--tag sweep=" not in command
    words = shlex.split(command)
    assert words[:2] == ["gpuplanner", "run"]
    cut = words.index("--")
    code, out, err = run(capsys, *words[1:cut], "--db", str(db_path), "--json", *words[cut:])
    assert code == 0, err
    full = json.loads(out)
    conn = connect(db_path)
    try:
        args = json.loads(conn.execute("SELECT launch_json FROM runs WHERE id = ?", [full["run_id"]]).fetchone()[0])
        best_args = json.loads(
            conn.execute("SELECT launch_json FROM runs WHERE id = ?", [review["best"]["run_id"]]).fetchone()[0]
        )
        assert tags_of(conn, [full["run_id"]])[full["run_id"]] == {"project": "search", "owner": "ana"}
    finally:
        conn.close()
    expected = list(best_args["trainer_args"])
    if "--max-gpu-hours" in expected:  # the trial's share of a GPU-hour cap is not part of a full run
        at = expected.index("--max-gpu-hours")
        del expected[at : at + 2]
    assert args["trainer_args"] == expected and "--max-steps" in expected


def test_show_an_unknown_search_names_the_known(capsys: pytest.CaptureFixture[str], db_path: Path) -> None:
    code, out, err = run(capsys, "sweep", "show", "nothing", "--db", str(db_path))
    assert code == 2 and "no search named 'nothing'" in err and "searches: none yet" in err
