"""Peak memory of one training step with and without the chunked cross-entropy, on a 128k vocabulary.

A one-block GPT-2 (hidden 64) with Llama 3's vocabulary size (128,256), 4 x 64 tokens, on the CPU:
the logits are most of a step's memory, as on a real model with a large vocabulary and long sequences.
Each step (forward, backward, AdamW step) runs under torch's ``MemTracker``, which records every tensor
the step allocates, in fp32 and under bf16 autocast (fp32 master weights). Prints the peak of each
path, the ratio, and the loss's own share by ``trainer.losses.loss_memory_bytes``.

Run: ``OMP_NUM_THREADS=2 PYTHONPATH=. .venv/bin/python tests/benchmarks/trainer_memory.py``.
"""

from __future__ import annotations

import argparse
import contextlib

import torch

from trainer import losses

MIB = 2**20


def peak_step(impl: str, args: argparse.Namespace, autocast_dtype: torch.dtype | None) -> tuple[int, float]:
    """(peak bytes of one whole step, loss) for ``impl``."""
    import transformers
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(
        "gpt2",
        n_layer=args.layers,
        n_embd=args.hidden,
        n_head=2,
        n_positions=args.seq_len,
        vocab_size=args.vocab,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    head, _ = losses.install(model, impl, torch.device("cpu"))
    ids = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    autocast = (lambda: torch.autocast("cpu", dtype=autocast_dtype)) if autocast_dtype else contextlib.nullcontext
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        loss = losses.causal_loss_sum(model, {"input_ids": ids}, torch.device("cpu"), autocast, head)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    peak = tracker.get_tracker_snapshot("peak")
    return int(sum(v["Total"] for v in peak.values())), float(loss.detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()
    tokens = args.batch * args.seq_len
    print(f"GPT-2, {args.layers} block(s), hidden {args.hidden}, vocabulary {args.vocab:,}, {tokens} tokens per step")
    for label, dtype, compute_bytes in (("fp32", None, 4), ("bf16 autocast", torch.bfloat16, 2)):
        plain, loss_a = peak_step("plain", args, dtype)
        chunked, loss_b = peak_step("chunked", args, dtype)
        expect = {
            impl: losses.loss_memory_bytes(tokens, args.vocab, args.hidden, compute_bytes, impl)
            for impl in ("plain", "chunked")
        }
        print(
            f"{label:>14}: peak step memory plain {plain / MIB:7.1f} MiB, chunked {chunked / MIB:7.1f} MiB, "
            f"ratio {plain / chunked:.2f}x (loss {loss_a:.3f} vs {loss_b:.3f}); the loss's own peak: "
            f"plain {expect['plain'] / MIB:.1f} MiB, chunked {expect['chunked'] / MIB:.1f} MiB"
        )


if __name__ == "__main__":
    main()
