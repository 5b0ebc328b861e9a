"""What PyTorch's CUDA caching allocator reserves beyond the tensors it hands out: reserved vs allocated.

How the allocator behaves (c10/cuda/CUDACachingAllocator.cpp, its header comment and constants; PyTorch's
"CUDA semantics: memory management" docs; E. Yang, "When does fragmentation occur in the CUDA caching
allocator?", pytorch/devlogs 2026-06-01):

- every request is rounded up to 512 B; requests up to 1 MiB are served from 2 MiB segments, requests of
  1-10 MiB from 20 MiB segments, larger ones from a segment of their own rounded up to 2 MiB. For a model's
  tensors (tens of MiB and more) the rounding is well under 1% and is left out here.
- a freed block stays cached (``memory_reserved``, and what nvidia-smi shows) and serves a later request of
  at most its size, split when larger; blocks of different segments never merge. A step that frees and
  re-allocates tensors of differing sizes (activations, the loss region, the optimizer's temporaries) leaves
  cached blocks no request of the next moment fits: reserved exceeds the allocated peak by a share of the
  step's *transient* bytes (allocated and freed within a step), not of the persistent state (weights,
  gradients, optimizer states: allocated once, the same sizes every step).
- with batches of varying length every new longest batch needs blocks larger than any cached one, so the
  cache grows again: reserved can reach several times the transient bytes (``FRAGMENTATION_VARIABLE``).
- before it raises an out-of-memory error the allocator frees every unused cached segment and retries
  (``release_cached_blocks``), so cached-but-free memory never makes a job fail by itself and reserved
  never exceeds what the card has. ``expandable_segments:True`` (``PYTORCH_CUDA_ALLOC_CONF``) maps growing
  segments instead and leaves less slack still.

Both fractions are fitted by ``tests/benchmarks/planner_accuracy.py`` over every published row that reports
reserved memory (each source weighted equally, with a leave-one-source-out error printed beside them);
``tests/plan/test_memory_allocator.py`` checks that the values below are what that fit gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Fitted (see the module doc): reserved - allocated peak, as a share of the step's transient bytes.
# Fixed-shape batches (every micro-batch the same tokens):
FRAGMENTATION_FIXED = 0.12
# Variable-length batches, on top of the fixed share (fitted on the one published source that reports
# reserved memory over variable-length data, ms-swift; no source is left to check it on):
FRAGMENTATION_VARIABLE = 1.49

LENGTHS = ("fixed", "variable")
# the grid the fit searches: shares 0 to 5 in steps of 0.01
_GRID = [i / 100 for i in range(0, 501)]


def slack_bytes(transient: int, lengths: str = "fixed") -> int:
    """Reserved beyond the allocated peak for a step whose transient bytes are ``transient``."""
    if lengths not in LENGTHS:
        raise ValueError(f"lengths must be one of {', '.join(LENGTHS)}, got {lengths!r}")
    share = FRAGMENTATION_FIXED + (FRAGMENTATION_VARIABLE if lengths == "variable" else 0.0)
    return int(share * max(0, transient))


@dataclass(frozen=True)
class Sample:
    """One published reserved peak: its source, the planned allocated peak plus whatever else is reserved
    whatever the share (FSDP's stream pools), the step's transient bytes and the measured bytes; ``cap`` is
    the most the card can reserve."""

    source: str
    base: float
    transient: float
    measured: float
    cap: float = float("inf")


def _error(samples: Sequence[Sample], share: float, offset: float = 0.0) -> float:
    """Mean over sources of each source's mean absolute relative error (every source counts once)."""
    per: dict[str, list[float]] = {}
    for s in samples:
        pred = min(s.cap, s.base + (offset + share) * s.transient)
        per.setdefault(s.source, []).append(abs(pred / s.measured - 1.0))
    return sum(sum(v) / len(v) for v in per.values()) / len(per) if per else 0.0


def fit_share(samples: Sequence[Sample], offset: float = 0.0) -> float:
    """The share (on top of ``offset``) that minimises the mean-over-sources error; 0 with no samples."""
    if not samples:
        return 0.0
    return min(_GRID, key=lambda share: (_error(samples, share, offset), share))


def loso(
    samples: Sequence[Sample], fit: Callable[[Sequence[Sample]], float], offset: float = 0.0
) -> dict[str, tuple[float, float]]:
    """Per source: (the share fitted without it, its mean absolute % error at that share)."""
    out = {}
    for source in sorted({s.source for s in samples}):
        rest = [s for s in samples if s.source != source]
        own = [s for s in samples if s.source == source]
        share = fit(rest)
        out[source] = (share, 100.0 * _error(own, share, offset))
    return out
