"""Sequence classification (``--task seq-cls``) on a small labelled JSONL: learns, resumes exactly, reloads."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import final_weights, make_config, read_events
from trainer import checkpoint
from trainer import data as data_mod
from trainer.loop import EXIT_OK, train

POSITIVE = ["great", "lovely", "superb", "wonderful"]
NEGATIVE = ["awful", "boring", "terrible", "dreadful"]
SUBJECTS = ["the film", "my lunch", "this book", "the hotel", "our trip", "the concert", "his song", "that game"]


def write_reviews(path: Path, n: int = 320, seed: int = 5, int_labels: bool = False) -> Path:
    """Short reviews whose label follows a simple rule: the adjective's sentiment."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            good = rng.random() < 0.5
            word = rng.choice(POSITIVE if good else NEGATIVE)
            label: int | str = (1 if good else 0) if int_labels else ("positive" if good else "negative")
            fh.write(json.dumps({"id": i, "review": f"{rng.choice(SUBJECTS)} was {word}", "sentiment": label}) + "\n")
    return path


def cls_config(run: Path, model_config: Path, data: Path, **overrides):
    args = dict(
        task="seq-cls",
        data=[str(data)],
        text_field="review",
        label_field="sentiment",
        seq_len=32,
        micro_batch=16,
        lr=3e-3,
        eval_fraction=0.2,
        eval_batches=4,
    )
    args.update(overrides)
    return make_config(run, model_config, **args)


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    return write_reviews(tmp_path / "reviews.jsonl")


def test_label_mapping_is_deterministic() -> None:
    assert data_mod.label_names([3, 1, 10, 1]) == ["1", "3", "10"]  # integers numerically
    assert data_mod.label_names(["pos", "neg", "pos"]) == ["neg", "pos"]
    assert data_mod.label_names(["b", 2, "a"]) == ["2", "a", "b"]
    with pytest.raises(ValueError):
        data_mod.label_names([None, 1])


def test_seq_cls_learns_saves_labels_and_the_final_model_predicts(
    tmp_path: Path, model_config: Path, reviews: Path
) -> None:
    run = tmp_path / "run"
    assert (
        train(cls_config(run, model_config, reviews, max_steps=24, eval_every_steps=2, checkpoint_every_steps=12))
        == EXIT_OK
    )
    events = read_events(run)
    start = events[0]
    assert start["task"] == "seq-cls" and start["labels"] == ["negative", "positive"]
    steps = [e for e in events if e["kind"] == "step"]
    assert sum(e["loss"] for e in steps[-3:]) / 3 < sum(e["loss"] for e in steps[:3]) / 3 - 0.3
    assert steps[-1]["tokens_total"] == 24 * 16 * 32  # static shapes: padded tokens processed
    evals = [e for e in events if e["kind"] == "eval"]
    assert evals[0]["eval_examples"] == 64  # 20% of 320 held out, 4 batches of 16
    assert evals[-1]["eval_accuracy"] >= 0.9 and evals[-1]["eval_accuracy"] > evals[0]["eval_accuracy"]
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]
    assert [p.name for p in checkpoint.complete(run)] == ["step-00000024", "step-00000012"]

    import transformers

    config = json.loads((run / "final" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1}
    model = transformers.AutoModelForSequenceClassification.from_pretrained(run / "final").eval()
    texts = ["the hotel was superb", "the film was dreadful", "our trip was wonderful", "that game was boring"]
    tok = data_mod.ByteTokenizer()
    rows = [tok.encode_truncated(t, 32) for t in texts]
    ids = torch.full((len(rows), 32), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    with torch.no_grad():
        pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1).tolist()
    assert [model.config.id2label[p] for p in pred] == ["positive", "negative", "positive", "negative"]


def test_seq_cls_resume_is_exact(tmp_path: Path, model_config: Path, reviews: Path) -> None:
    common = dict(max_steps=8, checkpoint_every_steps=4, record_sample_ids=True, eval_every_steps=4)
    ref = tmp_path / "ref"
    assert train(cls_config(ref, model_config, reviews, **common)) == EXIT_OK
    # A fresh run directory holding only the step-4 checkpoint: the rest must be redone identically.
    run = tmp_path / "resumed"
    shutil.copytree(
        checkpoint.checkpoints_dir(ref) / "step-00000004", checkpoint.checkpoints_dir(run) / "step-00000004"
    )
    assert train(cls_config(run, model_config, reviews, **common)) == EXIT_OK
    events = read_events(run)
    assert events[0]["resumed_from_step"] == 4
    order = {e["step"]: e["sample_ids"] for e in read_events(ref) if e["kind"] == "step"}
    assert {e["step"]: e["sample_ids"] for e in events if e["kind"] == "step"} == {s: order[s] for s in range(5, 9)}
    a, b = final_weights(ref), final_weights(run)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    ref_eval = [e for e in read_events(ref) if e["kind"] == "eval"][-1]
    assert [e for e in events if e["kind"] == "eval"][-1]["eval_accuracy"] == ref_eval["eval_accuracy"]


def test_seq_cls_lora_trains_adapters_and_head(tmp_path: Path, model_config: Path) -> None:
    pytest.importorskip("peft")
    data = write_reviews(tmp_path / "reviews.jsonl", int_labels=True)
    run = tmp_path / "run"
    cfg = cls_config(run, model_config, data, max_steps=4, lora_rank=4, checkpoint_every_steps=2)
    assert train(cfg) == EXIT_OK
    saved = torch.load(checkpoint.newest_valid(run) / "model.pt", weights_only=True)
    assert any("lora_" in k for k in saved) and any("score" in k and "modules_to_save" in k for k in saved)
    assert all("lora_" in k or "modules_to_save" in k for k in saved)
    files = {p.name for p in (run / "final").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "base_config.json"} <= files
    assert json.loads((run / "final" / "base_config.json").read_text())["id2label"] == {"0": "0", "1": "1"}
    adapter = json.loads((run / "final" / "adapter_config.json").read_text())
    assert adapter["task_type"] == "SEQ_CLS" and "score" in adapter["modules_to_save"]
    # Resume with LoRA restores adapters and head: two more steps continue from step 4.
    assert train(cls_config(run, model_config, data, max_steps=6, lora_rank=4)) == EXIT_OK
    assert [e for e in read_events(run) if e["kind"] == "run_start"][-1]["resumed_from_step"] == 4


def test_seq_cls_bert_style_config(tmp_path: Path, reviews: Path) -> None:
    bert = tmp_path / "bert.json"
    bert.write_text(
        json.dumps(
            {
                "model_type": "bert",
                "num_hidden_layers": 1,
                "hidden_size": 32,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 64,
                "vocab_size": 257,
            }
        )
    )
    run = tmp_path / "run"
    assert train(cls_config(run, bert, reviews, max_steps=2, eval_every_steps=2)) == EXIT_OK
    config = json.loads((run / "final" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["pad_token_id"] == 256 and len(config["id2label"]) == 2
    assert [e for e in read_events(run) if e["kind"] == "eval"][0]["eval_examples"] == 64


def test_seq_cls_rejects_text_files_and_missing_labels(tmp_path: Path, model_config: Path) -> None:
    txt = tmp_path / "a.txt"
    txt.write_text("hello\n\nworld\n")
    assert train(cls_config(tmp_path / "r1", model_config, txt, max_steps=1)) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"review": "x"}\n')
    assert train(cls_config(tmp_path / "r2", model_config, bad, max_steps=1)) == 1
    with pytest.raises(ValueError, match="reset-position-ids"):
        cls_config(tmp_path / "r3", model_config, bad, reset_position_ids=True)
