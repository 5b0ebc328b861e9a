"""The configurations the GPU check runs, in priority order (what runs out of time goes last).

Chosen to cover the planner's regimes on one GPU: a ~1B Llama fully fine-tuned (bf16-mixed) with
checkpointing off, selective and full, at two sequence lengths, once compiled; LoRA on ~1B and ~8B;
QLoRA on ~1B; the Hugging Face ``Trainer`` on two of them; and one deliberate out-of-memory probe whose
micro-batch the planner says does not fit (chosen at run time for the GPU found).

The dry run keeps every row and its code path, at tiny shapes on the CPU (``shapes.DRY_RUN``),
with the fake NVML, 1 warm-up and 2 measured steps.
"""

from __future__ import annotations

from typing import Any

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _row(name: str, **kw: Any) -> dict[str, Any]:
    row = {
        "name": name,
        "kind": "bench",
        "shape": "llama-1b",
        "method": "full",
        "lora_rank": 16,
        "lora_targets": list(LORA_TARGETS),
        "checkpointing": "off",
        "compile": False,
        "seq_len": 2048,
        "micro_batch": 4,
        "expect_s": 30,  # about how long it takes on an H100, start-up included: started if this is left
        "budget_s": 60,  # and stopped at this, or at the time limit if that comes first
        "nvml": False,
        "pairs_with": None,  # an hf row: the bundled-trainer row it is compared with
        "oom_probe": False,
    }
    row.update(kw)
    return row


def rows(dry_run: bool) -> list[dict[str, Any]]:
    """Every configuration (budgets in seconds on a GPU; the dry run scales sequence and batch down)."""
    out = [
        _row("full-1b-s2048", nvml=True, expect_s=35, budget_s=75),
        _row("lora-1b-s2048"),
        _row("hf-full-1b-s2048", kind="hf", pairs_with="full-1b-s2048", expect_s=40, budget_s=90),
        _row("hf-lora-1b-s2048", kind="hf", method="lora", pairs_with="lora-1b-s2048", expect_s=40, budget_s=90),
        _row("full-1b-s2048-selective", checkpointing="selective"),
        _row("full-1b-s2048-every", checkpointing="every"),
        _row("full-1b-s4096", seq_len=4096, micro_batch=2),
        _row("oom-1b-s2048", oom_probe=True, expect_s=25),
        # the 8B base is built in fp32 on the CPU from random weights before it moves: most of its time
        _row(
            "lora-8b-s2048-every",
            shape="llama-8b",
            method="lora",
            checkpointing="every",
            micro_batch=2,
            expect_s=100,
            budget_s=180,
        ),
        _row("full-1b-s2048-compile", compile=True, expect_s=90, budget_s=150),
        _row("qlora-1b-s2048", method="qlora", expect_s=45, budget_s=90),
    ]
    if dry_run:
        for row in out:
            row["seq_len"] = 64 if row["seq_len"] == 4096 else 32
            row["micro_batch"] = 2
            row["expect_s"], row["budget_s"] = 30, 90
    return out
