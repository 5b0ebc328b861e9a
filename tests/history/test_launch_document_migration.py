"""Schema v8: the launcher's document leaves the run's config (``runs.launch_json``), and the config becomes the
trainer's own ``run_start`` config, for rows stored before it too."""

from __future__ import annotations

import json
from pathlib import Path

from gpuplanner.history.calibration import measurements
from gpuplanner.history.db import connect, open_db, schema_version
from gpuplanner.history.runs import get_run, run_for_stream
from gpuplanner.history.schema import MIGRATIONS

TRAINER_CONFIG = {
    "model_config": "resources/demo/tiny-gpt2.json",
    "data": ["resources/demo/corpus"],
    "lora_rank": 4,
    "qlora": False,
    "seq_len": 64,
    "micro_batch": 8,
    "grad_checkpointing": "selective",
    "precision": "auto",
}


def _v7_database(path: Path, run_dir: Path) -> None:
    """Rows as v7 stored them: a LoRA run launched by GPU Planner (its config the launch document, the trainer's
    run_start config only in the events), a user's command launched against a plan (plan facts beside the
    command), a launched run that never started, and an imported run (a plain trainer config)."""
    db = connect(path)
    MIGRATIONS.apply(db, stop_before="m009_launch_document")
    db.execute("PRAGMA user_version = 7")
    launch = {"nodes": [{"host": "local", "run_dir": str(run_dir), "tag": "node0", "pgid": 4321}], "gpus": 1}
    lora_args = ["--model-config", "resources/demo/tiny-gpt2.json", "--lora-rank", "4", "--seq-len", "64"]
    rows = [
        (1, "finished", "launch:local", {"trainer_args": lora_args, "launch": launch}),
        (
            2,
            "finished",
            "launch:local",
            {"command": ["python", "train.py"], "workdir": "/w", "model": "gpt2", "method": "qlora", "seq_len": 256},
        ),
        (3, "failed", "launch:local", {"trainer_args": ["--model", "gpt2"], "launch": {"nodes": [], "gpus": 1}}),
        (4, "finished", "/data/events.jsonl", {**TRAINER_CONFIG, "lora_rank": 0}),
    ]
    for run_id, status, source, config in rows:
        db.execute(
            "INSERT INTO runs (id, status, gpu_type, gpu_count, model_name, config_json, source, created_at)"
            " VALUES (?, ?, 'H100', 1, 'tiny-gpt2', ?, ?, 0)",
            [run_id, status, json.dumps(config), source],
        )
        db.execute(
            "INSERT INTO steps (run_id, seq, t, step, tokens_per_s, samples_per_s) VALUES (?, 2, 2.0, 1, 1000.0, 10.0)",
            [run_id],
        )
    start = {"config": TRAINER_CONFIG, "precision": "fp32"}
    db.execute(
        "INSERT INTO events (run_id, seq, t, kind, detail_json) VALUES (1, 1, 1.0, 'run_start', ?)", [json.dumps(start)]
    )
    monitor = {"config": {"kind": "command", "command": ["python", "train.py"], "gpus": 1}}
    db.execute(
        "INSERT INTO events (run_id, seq, t, kind, detail_json) VALUES (2, 1, 1.0, 'run_start', ?)",
        [json.dumps(monitor)],
    )
    db.conn.commit()
    db.close()


def test_old_rows_move_the_launch_document_out_of_the_config(db_path: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "1"
    run_dir.mkdir(parents=True)
    _v7_database(db_path, run_dir)
    with open_db(db_path) as db:
        assert schema_version(db) == 10
        launched = get_run(db, 1)
        assert launched.config == TRAINER_CONFIG  # what the trainer ran, from its run_start
        assert launched.launch is not None and launched.launch["launch"]["nodes"][0]["pgid"] == 4321
        assert launched.launch["trainer_args"][:2] == ["--model-config", "resources/demo/tiny-gpt2.json"]
        command = get_run(db, 2)
        assert command.launch == {"command": ["python", "train.py"], "workdir": "/w"}
        assert command.config["method"] == "qlora" and command.config["seq_len"] == 256  # the plan facts stay
        assert command.config["kind"] == "command"  # with the monitor's run_start config
        never_started = get_run(db, 3)
        assert never_started.config_json is None and never_started.launch is not None
        imported = get_run(db, 4)
        assert imported.launch is None and imported.config == {**TRAINER_CONFIG, "lora_rank": 0}
        # calibration reads the LoRA run under lora with its sequence length (v7 filed it as full, None)
        keys = {(c.method, c.seq_len, c.ids) for c in measurements(db).values()}
        assert ("lora", 64, (1,)) in keys and ("qlora", 256, (2,)) in keys and ("full", 64, (4,)) in keys
        # the launched run's node is still found by its run directory (the launch document's new home)
        assert run_for_stream(db, run_dir / "events.jsonl")[:1] == (1,)
    assert len(list(db_path.parent.glob("history.sqlite.v7-*.bak"))) == 1
