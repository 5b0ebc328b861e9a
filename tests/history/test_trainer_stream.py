"""A real events.jsonl written by the trainer's tiny CPU run, ingested into a real store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplanner.history import Ingestor, open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.runs import create_run, get_run
from gpuplanner.history.tail import ingest_file
from tests.conftest import REPO_ROOT
from tests.history.conftest import dump

pytest.importorskip("torch")


@pytest.mark.slow
def test_ingest_a_real_trainer_stream(tmp_path: Path) -> None:
    from transformers import GPT2Config

    config_dir = tmp_path / "model"
    GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=260).save_pretrained(config_dir)
    data = tmp_path / "corpus.txt"
    data.write_text("\n".join(f"line {i}: the quick brown fox jumps over the lazy dog" for i in range(200)))
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "train",
            "--run-dir",
            str(run_dir),
            "--model-config",
            str(config_dir / "config.json"),
            "--data",
            str(data),
            "--seq-len",
            "32",
            "--micro-batch",
            "2",
            "--max-steps",
            "12",
            "--device",
            "cpu",
            "--price-per-gpu-hour",
            "1.5",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    events = run_dir / "events.jsonl"
    kinds = {json.loads(line)["kind"] for line in events.read_text().splitlines() if line.strip()}
    assert {"run_start", "step", "run_end"} <= kinds

    with open_db(tmp_path / "h.sqlite") as db:
        run_id = create_run(db, gpu_type="cpu")
        stats = ingest_file(db, run_id, run_dir)
        assert stats.malformed == 0 and stats.offset == events.stat().st_size
        run = get_run(db, run_id)
        assert run.status == "finished"
        assert run.price_usd_per_gpu_hour == 1.5  # from the run's config
        summary = summarize(db, run_id)
        assert summary.steps == 12
        assert summary.samples is not None and summary.samples >= 12 * 2
        assert summary.tokens is not None and summary.tokens >= 12 * 2 * 32
        assert summary.hours > 0 and summary.cost_usd is not None and summary.cost_usd > 0
        assert summary.final_loss is not None
        if "gpu" in kinds:
            assert summary.gpu_samples > 0 and summary.simulated
        first = dump(db, run_id)
        # the same file again through a fresh reader from byte 0: nothing changes
        again = Ingestor(db, run_id, "again")
        again.feed_bytes(events.read_bytes())
        assert again.flush().inserted == 0
        second = dump(db, run_id)
        assert {k: v for k, v in second.items() if k != "stream_positions"} == {
            k: v for k, v in first.items() if k != "stream_positions"
        }
