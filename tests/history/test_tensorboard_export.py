"""`runs export --format tensorboard`: event files that TensorBoard's own reader reads back with the
history's curves (loss, learning rate, tokens/s, eval loss, per-GPU utilisation)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history import ingest_records, open_db
from gpuplanner.history.runs import create_run
from tests.history.streams import StreamBuilder


def _run(db_path: Path) -> int:
    s = StreamBuilder()
    s.add("run_start", 0.0, config={"model_name": "gpt2"}, host="h1", gpus=2)
    for i in range(12):
        s.gpu(i * 30.0 + 1.0, 0, 70.0 + i)
        s.gpu(i * 30.0 + 1.0, 1, 20.0)
        s.step(
            i * 30.0 + 2.0, i + 1, 8 * i, 4096 * i, lr=1e-4 * (i + 1), tokens_per_s=800.0 + 10 * i, loss=3.0 - 0.1 * i
        )
        if i % 4 == 3:
            s.add("eval", i * 30.0 + 3.0, step=i + 1, eval_loss=3.2 - 0.1 * i)
    s.add("run_end", 400.0, status="finished", totals={})
    with open_db(db_path) as db:
        run_id = create_run(db, gpu_count=2, price_usd_per_gpu_hour=2.0)
        ingest_records(db, run_id, s.records)
    return run_id


def _scalars(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_reads_back_the_runs_curves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "history.sqlite"
    run_id = _run(db_path)
    out = tmp_path / "tb"
    assert (
        main(["runs", "export", str(run_id), "--format", "tensorboard", "--out", str(out), "--db", str(db_path)]) == 0
    )
    assert f"tensorboard --logdir {out}" in capsys.readouterr().out
    scalars = _scalars(out)
    with open_db(db_path) as db:
        steps = db.execute(
            "SELECT step, t, loss, lr, tokens_per_s FROM steps WHERE run_id = ? ORDER BY seq", [run_id]
        ).fetchall()
        evals = db.execute("SELECT step, t, eval_loss FROM evals WHERE run_id = ? ORDER BY seq", [run_id]).fetchall()
        first_t = db.execute("SELECT first_t FROM runs WHERE id = ?", [run_id]).fetchone()[0]
    assert len(steps) == 12 and len(evals) == 3
    for tag, column in (("train/loss", 2), ("train/lr", 3), ("train/tokens_per_s", 4)):
        got = scalars[tag]
        assert [s for s, _, _ in got] == [row[0] for row in steps]
        assert [w for _, w, _ in got] == pytest.approx([row[1] for row in steps])
        assert [v for _, _, v in got] == pytest.approx([row[column] for row in steps], rel=1e-6)  # float32 in files
    assert [(s, v) for s, _, v in scalars["eval/loss"]] == [(row[0], pytest.approx(row[2], rel=1e-6)) for row in evals]
    # per-minute means: GPU 0 at 70+i % every 30 s (two samples a minute), GPU 1 flat at 20 %
    gpu0, gpu1 = scalars["gpu/utilization_pct/n0:0"], scalars["gpu/utilization_pct/n0:1"]
    assert [v for _, _, v in gpu1] == [20.0] * len(gpu1) and len(gpu1) in (6, 7)
    assert sum(v for _, _, v in gpu0) / len(gpu0) == pytest.approx(75.5, abs=0.6)
    assert all(0 <= s <= 400 for s, _, _ in gpu0) and gpu0[0][1] <= first_t + 60
    assert set(scalars) == {
        "train/loss",
        "train/lr",
        "train/tokens_per_s",
        "eval/loss",
        *{"gpu/utilization_pct/n0:0", "gpu/utilization_pct/n0:1"},
    }


def test_tensorboard_export_needs_a_folder_and_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path = tmp_path / "history.sqlite"
    run_id = _run(db_path)
    base = ["runs", "export", str(run_id), "--format", "tensorboard", "--db", str(db_path)]
    assert main(base) == 2
    assert "--out DIR" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main([*base, "--out", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert (
        main(["runs", "export", "999", "--format", "tensorboard", "--out", str(tmp_path / "x"), "--db", str(db_path)])
        == 1
    )
    capsys.readouterr()
    for name in ("tensorboard", "tensorboard.compat", "tensorboard.compat.proto", "tensorboard.compat.proto.event_pb2"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    assert main([*base, "--out", str(tmp_path / "tb")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'gpuplanner[tensorboard]'" in err
    assert not (tmp_path / "tb").exists()
