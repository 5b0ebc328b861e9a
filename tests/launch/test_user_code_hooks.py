"""User code under ``gpuplanner run`` reports honest figures without edits (issue 30 items 2 and 3):
nanoGPT-style telemetry every 5 iterations records every token and the true tokens/s; an unmodified Hugging
Face ``Trainer`` script reports loss and tokens/s through the start-up hook the monitor puts on its path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.analytics import summarize
from gpuplanner.history.db import connect
from tests.conftest import REPO_ROOT
from tests.launch.conftest import rows

pytestmark = pytest.mark.slow
SCRIPTS = REPO_ROOT / "tests" / "data" / "user_scripts"


def run_cli(db_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    capsys.readouterr()
    code = main(
        ["run", "--db", str(db_path), "--host", "local", "--json", "--price", "2", "--env", "OMP_NUM_THREADS=1", *args]
    )
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and doc["state"] == "finished", doc
    return doc


def summary_of(db_path: Path, run_id: int) -> dict:
    db = connect(db_path)
    try:
        return summarize(db, run_id).as_dict()
    finally:
        db.close()


def test_nanogpt_style_logging_every_five_steps_records_the_true_counts(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_cli(
        db_path, capsys, "--workdir", str(SCRIPTS), "--", sys.executable, "nanogpt_style.py", "--max-iters", "40"
    )
    run_id = doc["run_id"]
    truth = json.loads((Path(doc["run_dir"]) / "truth.json").read_text())
    assert truth["tokens"] == 40 * 12 * 64
    steps = rows(db_path, "SELECT step, tokens_total, tokens_per_s FROM steps WHERE run_id = ? ORDER BY seq", run_id)
    assert [s[0] for s in steps] == list(range(5, 41, 5))
    assert steps[-1][1] == truth["tokens"]  # every token, not one step's per call
    assert steps[0][2] is None  # no rate from one logged step
    for (_, _, rate), interval in zip(steps[1:], truth["intervals"][1:]):
        assert rate == pytest.approx(interval["tokens"] / interval["dt"], rel=0.1)
    summary = summary_of(db_path, run_id)
    rates = sorted(i["tokens"] / i["dt"] for i in truth["intervals"][1:])
    assert summary["tokens"] == truth["tokens"]
    assert summary["samples"] is None and summary["samples_per_min"] is None  # none logged: unknown, not 0
    assert summary["tokens_per_s"] == pytest.approx(
        (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2 if len(rates) % 2 == 0 else rates[len(rates) // 2],
        rel=0.1,
    )


def tiny_llama(folder: Path) -> Path:
    """A tiny Llama-style model's config.json in a folder of its own (what --model-dir names)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    folder.mkdir()
    config.save_pretrained(folder)
    return folder


def test_an_unmodified_hf_trainer_script_reports_loss_and_tokens_per_s(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = tiny_llama(tmp_path / "tiny-llama")
    script = [sys.executable, str(SCRIPTS / "hf_unmodified.py"), "--model-dir", str(model_dir), "--steps", "6"]
    doc = run_cli(db_path, capsys, "--", *script)
    steps = rows(
        db_path, "SELECT step, loss, tokens_total, tokens_per_s FROM steps WHERE run_id = ? ORDER BY seq", doc["run_id"]
    )
    assert [s[0] for s in steps] == [2, 4, 6]  # the Trainer's logging steps
    assert all(loss is not None and loss > 0 for _, loss, _, _ in steps)
    assert [s[2] for s in steps] == [2 * 4 * 32, 4 * 4 * 32, 6 * 4 * 32]  # input tokens the Trainer saw
    assert steps[0][3] is None and all(rate > 0 for _, _, _, rate in steps[1:])
    summary = summary_of(db_path, doc["run_id"])
    assert summary["tokens"] == 6 * 4 * 32 and summary["tokens_per_s"] > 0 and summary["final_loss"] > 0
    # opted out: the same script runs, and reports no steps
    off = run_cli(db_path, capsys, "--no-auto-hooks", "--", *script)
    assert rows(db_path, "SELECT COUNT(*) FROM steps WHERE run_id = ?", off["run_id"]) == [(0,)]


def test_a_script_that_reports_only_to_tensorboard_gets_its_loss_curve(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tensorboard")
    doc = run_cli(db_path, capsys, "--", sys.executable, str(SCRIPTS / "tensorboard_only.py"), "--steps", "6")
    steps = rows(db_path, "SELECT step, loss, lr, tokens_total FROM steps WHERE run_id = ? ORDER BY seq", doc["run_id"])
    assert [s[0] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert [s[1] for s in steps] == [pytest.approx(3.0 / i) for i in range(1, 7)]
    assert [s[2] for s in steps] == [pytest.approx(1e-3 * (1 - i / 7)) for i in range(1, 7)]
    assert all(s[3] is None for s in steps)  # TensorBoard says nothing of tokens: unknown, not made up
