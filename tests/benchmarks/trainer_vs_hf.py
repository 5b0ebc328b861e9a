"""Benchmark: our trainer against the Hugging Face ``Trainer`` on the same work, in one run.

Same GPT-2 config (random init), same packed data, sequence length, micro-batch, step count and
optimizer (AdamW); warm-up steps are not measured on either side. Both sides train on full batches only
(HF with ``dataloader_drop_last``, as ours does): the shipped corpus packs into 58 sequences, and without
it HF's last batch of each epoch holds 2 sequences, not 8. HF's tokens are counted step by step and must
equal batch x seq_len x steps, so neither side is credited with work it did not do. Prints tokens/s of each and the
ratio (ours / HF). Both sides are timed the same way: the wall span from the end of the last
warm-up step to the end of the last step (data loading and everything between steps included).
``--rounds`` repeats the comparison, alternating which side goes first, and reports medians. Each round
also runs ours with ``--no-fused-kernels`` (op-by-op GELU, as HF runs it) to show what that is worth.
Run: ``OMP_NUM_THREADS=2 .venv/bin/python tests/benchmarks/trainer_vs_hf.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "corpus"


def ours(cfg_path: Path, args: argparse.Namespace, tmp: Path, fused_kernels: bool = True) -> tuple[float, dict]:
    from trainer.bench import bench
    from trainer.config import TrainConfig

    cfg = TrainConfig(
        run_dir=str(tmp / "ours"),
        model_config=str(cfg_path),
        data=[str(CORPUS)],
        seq_len=args.seq_len,
        micro_batch=args.batch,
        max_steps=args.steps,
        lr=1e-4,
        warmup_steps=0,
        eval_fraction=0.0,
        device=args.device,
        precision=args.precision,
        cache_dir=str(tmp / "cache"),
        reset_position_ids=args.reset_position_ids,
        fused_kernels=fused_kernels,
    )
    result = bench(cfg, warmup_steps=args.warmup, steps=args.steps)
    return result["tokens_per_s"], result


def hf(
    cfg_path: Path,
    args: argparse.Namespace,
    tmp: Path,
    data: list[str] | None = None,
    lora: dict | None = None,
    checkpointing: bool = False,
) -> float:
    """Tokens/s of the Hugging Face ``Trainer`` on ``data`` (default: the shipped corpus); ``lora``
    (``{"rank": r, "targets": [...]}``): adapters through peft on a 16-bit frozen base, as the bundled
    trainer runs LoRA; ``checkpointing``: transformers' gradient checkpointing of every layer.
    ``args.precision`` ``bf16`` or ``bf16-mixed`` is the Trainer's ``bf16=True`` (autocast)."""
    import transformers

    from trainer import data as data_mod

    corpus = data_mod.tokenize_cached(
        data_mod.data_files(data or [str(CORPUS)]), data_mod.ByteTokenizer(), "text", tmp / "cache"
    )
    packed = data_mod.pack(corpus, args.seq_len, 256)

    class Packed(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return packed.n_train

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.from_numpy(packed.sequences([i])[0])
            return {"input_ids": ids, "labels": ids}

    raw = json.loads(cfg_path.read_text())
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(raw.pop("model_type"), **raw), attn_implementation="sdpa"
    )
    bf16 = args.precision in ("bf16", "bf16-mixed")
    if lora:
        import peft

        if bf16:
            model = model.to(torch.bfloat16)  # the frozen base in 16 bit; peft keeps the adapters in fp32
        config = peft.LoraConfig(
            task_type=peft.TaskType.CAUSAL_LM,
            r=lora["rank"],
            lora_alpha=2 * lora["rank"],
            target_modules=lora["targets"],
        )
        model = peft.get_peft_model(model, config)
    span: dict[str, float] = {}
    seen = {"tokens": 0}

    class CountingTrainer(transformers.Trainer):
        """Counts the tokens each measured step really trains on (never assume batch x seq_len: a
        short last batch of an epoch would credit HF with work it did not do)."""

        def training_step(self, model, inputs, *rest, **kw):  # noqa: ANN001
            if self.state.global_step >= args.warmup:
                seen["tokens"] += int(inputs["input_ids"].numel())
            return super().training_step(model, inputs, *rest, **kw)

    class Timer(transformers.TrainerCallback):
        """Wall time from the end of the last warm-up step to the end of the last step: the measured
        steps whole, their data loading included, exactly the span ``trainer.bench`` measures."""

        def on_train_begin(self, a, state, control, **kw):  # noqa: ANN001
            if args.warmup == 0:
                span["start"] = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):  # noqa: ANN001
            if state.global_step == args.warmup:
                span["start"] = time.perf_counter()
            span["end"] = time.perf_counter()

    targs = transformers.TrainingArguments(
        output_dir=str(tmp / "hf"),
        per_device_train_batch_size=args.batch,
        max_steps=args.steps + args.warmup,
        learning_rate=1e-4,
        warmup_steps=0,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        use_cpu=args.device == "cpu",
        bf16=bf16,
        gradient_checkpointing=checkpointing,
        dataloader_num_workers=0,
        disable_tqdm=True,
        dataloader_drop_last=True,
        seed=0,
    )  # full batches only, as our trainer (and a fair comparison) has
    CountingTrainer(model=model, args=targs, train_dataset=Packed(), callbacks=[Timer()]).train()
    expected = args.batch * args.seq_len * args.steps
    if seen["tokens"] != expected:
        raise RuntimeError(f"HF trained on {seen['tokens']} tokens in the measured steps, expected {expected}")
    return seen["tokens"] / (span["end"] - span["start"])


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
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measure both sides this many times, alternating which goes first; medians reported",
    )
    args = p.parse_args()
    ours_runs: list[float] = []
    hf_runs: list[float] = []
    unfused_runs: list[float] = []  # ours with --no-fused-kernels: what the fused GELU is worth
    detail: dict = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg = tmp / "config.json"
        cfg.write_text(
            json.dumps(
                {
                    "model_type": "gpt2",
                    "n_layer": args.layers,
                    "n_embd": args.hidden,
                    "n_head": args.heads,
                    "n_positions": max(1024, args.seq_len),
                    "vocab_size": 257,
                    "bos_token_id": 256,
                    "eos_token_id": 256,
                }
            )
        )
        for r in range(max(1, args.rounds)):
            sides = ["hf", "ours", "ours_unfused"] if r % 2 == 0 else ["ours_unfused", "ours", "hf"]
            for name in sides:
                if name == "hf":
                    hf_runs.append(hf(cfg, args, tmp))
                elif name == "ours":
                    tps, detail = ours(cfg, args, tmp)
                    ours_runs.append(tps)
                else:
                    unfused_runs.append(ours(cfg, args, tmp, fused_kernels=False)[0])
    ours_tps, hf_tps = statistics.median(ours_runs), statistics.median(hf_runs)
    print(
        json.dumps(
            {
                "ours_tokens_per_s": round(ours_tps, 1),
                "hf_trainer_tokens_per_s": round(hf_tps, 1),
                "ratio_ours_over_hf": round(ours_tps / hf_tps, 3),
                "ratios_per_round": [round(o / h, 3) for o, h in zip(ours_runs, hf_runs)],
                "ratio_ours_no_fused_kernels_over_hf": round(statistics.median(unfused_runs) / hf_tps, 3),
                "ours_runs": [round(x, 1) for x in ours_runs],
                "hf_runs": [round(x, 1) for x in hf_runs],
                "mfu_ours": detail["mfu"],
                "device": detail["device"],
                "params": detail["params"],
                "seq_len": args.seq_len,
                "batch": args.batch,
                "steps": args.steps,
                "warmup": args.warmup,
                "torch_threads": torch.get_num_threads(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
