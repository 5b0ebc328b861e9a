"""Benchmark: our trainer against the Hugging Face ``Trainer`` on the same work, in one run.

Same GPT-2 config (random init), same packed data, sequence length, micro-batch, step count and
optimizer (AdamW); warm-up steps are not measured on either side. Prints tokens/s of each and the
ratio (ours / HF). Run: ``OMP_NUM_THREADS=2 .venv/bin/python tests/benchmarks/trainer_vs_hf.py``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "corpus"


def ours(cfg_path: Path, args: argparse.Namespace, tmp: Path) -> float:
    from trainer.bench import bench
    from trainer.config import TrainConfig

    cfg = TrainConfig(run_dir=str(tmp / "ours"), model_config=str(cfg_path), data=[str(CORPUS)], seq_len=args.seq_len,
                      micro_batch=args.batch, max_steps=args.steps, lr=1e-4, warmup_steps=0, eval_fraction=0.0,
                      device=args.device, precision=args.precision, cache_dir=str(tmp / "cache"),
                      reset_position_ids=args.reset_position_ids)
    result = bench(cfg, warmup_steps=args.warmup, steps=args.steps)
    return result["tokens_per_s"], result


def hf(cfg_path: Path, args: argparse.Namespace, tmp: Path) -> float:
    import transformers
    from trainer import data as data_mod

    tokens = data_mod.tokenize_cached(data_mod.data_files([str(CORPUS)]), data_mod.ByteTokenizer(), "text", tmp / "cache")
    packed = data_mod.pack(tokens, args.seq_len, 256, 0.0)

    class Packed(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return packed.n_train

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.from_numpy(packed.sequences([i])[0])
            return {"input_ids": ids, "labels": ids}

    raw = json.loads(cfg_path.read_text())
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(raw.pop("model_type"), **raw), attn_implementation="sdpa")
    span: dict[str, float] = {}

    class Timer(transformers.TrainerCallback):
        """Wall time from the first measured step's start to the last step's end, so the data
        loading between steps counts on this side too (our trainer's step times include it)."""

        def on_step_begin(self, a, state, control, **kw):  # noqa: ANN001
            if state.global_step == args.warmup:
                span["start"] = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):  # noqa: ANN001
            span["end"] = time.perf_counter()

    targs = transformers.TrainingArguments(
        output_dir=str(tmp / "hf"), per_device_train_batch_size=args.batch, max_steps=args.steps + args.warmup,
        learning_rate=1e-4, warmup_steps=0, logging_steps=10_000, save_strategy="no", report_to=[],
        use_cpu=args.device == "cpu", bf16=args.precision == "bf16", dataloader_num_workers=0, disable_tqdm=True,
        seed=0)
    transformers.Trainer(model=model, args=targs, train_dataset=Packed(), callbacks=[Timer()]).train()
    return args.batch * args.seq_len * args.steps / (span["end"] - span["start"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--reset-position-ids", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg = tmp / "config.json"
        cfg.write_text(json.dumps({"model_type": "gpt2", "n_layer": args.layers, "n_embd": args.hidden,
                                   "n_head": args.heads, "n_positions": max(1024, args.seq_len), "vocab_size": 257,
                                   "bos_token_id": 256, "eos_token_id": 256}))
        hf_tps = hf(cfg, args, tmp)
        our_tps, detail = ours(cfg, args, tmp)
    print(json.dumps({"ours_tokens_per_s": round(our_tps, 1), "hf_trainer_tokens_per_s": round(hf_tps, 1),
                      "ratio_ours_over_hf": round(our_tps / hf_tps, 3), "mfu_ours": detail["mfu"],
                      "device": detail["device"], "params": detail["params"], "seq_len": args.seq_len,
                      "batch": args.batch, "steps": args.steps}, indent=2))


if __name__ == "__main__":
    main()
