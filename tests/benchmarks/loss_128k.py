"""The next-token loss at a 128k vocabulary: peak memory and time per micro-batch, plain against chunked
(and Liger's fused kernel where ``liger-kernel`` is installed, on CUDA).

One micro-batch is the output head and the loss, forward and backward: ``hidden @ W.T`` (the head's
input, ``tokens x hidden``, against a ``vocabulary x hidden`` weight) and the summed cross-entropy,
with the gradients of the head's input and weight. Plain computes the full logits and
``F.cross_entropy`` of their fp32 copy (``trainer.losses.logits_cross_entropy``); chunked is
``trainer.losses.chunked_linear_cross_entropy``. Peak memory is that of the tensors the micro-batch
allocates (torch's ``MemTracker``; on CUDA ``max_memory_allocated``), the inputs and weight not
counted; time is the median of ``--repeats`` timed micro-batches after one untimed one.

Run: ``PYTHONPATH=. .venv/bin/python tests/benchmarks/loss_128k.py [--device cuda]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import torch

from trainer import losses

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _plain(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return losses.logits_cross_entropy((h @ w.t()).unsqueeze(0), t.unsqueeze(0))


def _chunked(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return losses.chunked_linear_cross_entropy(h, w, None, t)


def _impls(device: torch.device) -> dict[str, Step]:
    out: dict[str, Step] = {"plain": _plain, "chunked": _chunked}
    liger = losses._liger_loss() if device.type == "cuda" else None
    if liger is not None:
        out["liger"] = lambda h, w, t: liger(h, w, None, t)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _micro_batch(step: Step, h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, autocast: bool) -> None:
    h.grad = w.grad = None
    ctx = torch.autocast(h.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        loss = step(h, w, t)
    loss.backward()


def _peak_bytes(step: Step, h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, autocast: bool) -> int:
    if h.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(h.device)
        before = torch.cuda.memory_allocated(h.device)
        _micro_batch(step, h, w, t, autocast)
        return torch.cuda.max_memory_allocated(h.device) - before
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    with tracker:
        _micro_batch(step, h, w, t, autocast)
        peak = tracker.get_tracker_snapshot("peak")
    return int(sum(v["Total"] for v in peak.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per micro-batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (the matmuls in bf16)")
    args = parser.parse_args()
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    h = (torch.randn(args.tokens, args.hidden, generator=g) * 0.5).to(device).requires_grad_()
    w = (torch.randn(args.vocab, args.hidden, generator=g) * 0.02).to(device).requires_grad_()
    t = torch.randint(0, args.vocab, (args.tokens,), generator=g).to(device)
    chunk = losses.chunk_tokens(args.tokens, args.hidden, args.vocab)
    print(
        f"vocabulary {args.vocab}, hidden {args.hidden}, {args.tokens} tokens per micro-batch, {device}, "
        f"{'bf16 autocast' if args.bf16 else 'fp32'}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"chunked: {chunk} tokens per chunk, {-(-args.tokens // chunk)} chunks"
    )
    grads = {}
    for name, step in _impls(device).items():
        peak = _peak_bytes(step, h, w, t, args.bf16)
        times = []
        for _ in range(args.repeats):
            _sync(device)
            t0 = time.perf_counter()
            _micro_batch(step, h, w, t, args.bf16)
            _sync(device)
            times.append(time.perf_counter() - t0)
        assert w.grad is not None
        grads[name] = w.grad.float().clone()
        print(f"{name:8s} peak {peak / 2**20:8.1f} MiB   {statistics.median(times) * 1e3:8.1f} ms per micro-batch")
    diff = (grads["chunked"] - grads["plain"]).abs().max().item()
    print(f"largest difference of the weight gradients, chunked against plain: {diff:.2e}")


if __name__ == "__main__":
    main()
