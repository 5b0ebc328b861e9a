"""A plan's settings in words for the PDF report: the form's labels, people's units, set values only."""

from __future__ import annotations

from gpuplanner.ui.plan.plan_settings_text import count_text, settings_rows

INPUTS = {
    "model": "mixtral-8x7b",
    "params": 46_702_792_704,
    "active_params": 12_879_925_248,
    "experts": 8,
    "experts_per_token": 2,
    "model_source": "preset",
    "method": "qlora",
    "lora_rank": 64,
    "lora_targets": ["q_proj", "v_proj"],
    "precision": "bf16-mixed",
    "optimizer": "adamw-8bit",
    "micro_batch": 2,
    "grad_accum": 8,
    "seq_len": 4096,
    "grad_checkpointing": "every-other",
    "attention": "sdpa",
    "gpu": "A100 80GB",
    "gpus": 4,
    "sharding": "fsdp",
    "tf32": True,
    "samples": None,
    "tokens": 120_000_000,
    "epochs": 2.0,
    "tokens_per_s": None,
    "pricing": "spot",
    "spot_price": 0.95,
    "restart_minutes": 10.0,
    "checkpoint_minutes": 30.0,
    "deadline_hours": 36.0,
    "budget_usd": 500.0,
    "max_gpu_hours": None,
    "headroom": 0.9,
}


def test_every_setting_reads_as_the_form_names_it() -> None:
    rows = dict(settings_rows(INPUTS))
    assert rows["Model"] == "mixtral-8x7b (preset)"
    assert rows["Parameters"] == "46.7 B (12.9 B active)" and rows["Experts"] == "8, 2 per token"
    assert rows["Method"] == "QLoRA (4-bit base), rank 64 on q_proj, v_proj"
    assert rows["Precision"] == "bf16 mixed" and rows["TF32 (fp32 matmuls)"] == "on"
    assert rows["Optimizer"] == "8-bit AdamW"
    assert rows["Micro-batch"] == "2 sequences per GPU" and rows["Accumulation steps"] == "8"
    assert rows["Sequence length"] == "4,096 tokens"
    assert rows["Global batch"] == "64 sequences (262,144 tokens)"  # 2 x 8 x 4 GPUs
    assert rows["Gradient checkpointing"] == "every other block" and rows["Attention"] == "SDPA (fused)"
    assert rows["GPUs"] == "4 x A100 80GB" and rows["Sharding"] == "FSDP (fully sharded)"
    assert rows["Data per epoch"] == "120,000,000 tokens" and rows["Epochs"] == "2"
    assert rows["Spot price per GPU-hour"] == "$0.95" and rows["Deadline"] == "1 d 12 h"
    assert rows["Budget"] == "$500.00" and rows["Usable GPU memory"] == "90%"
    assert "Measured speed" not in rows and "Max GPU-hours" not in rows  # unset: not listed
    assert not any("_" in label for label in rows)


def test_one_gpu_has_no_sharding_and_counts_read_short() -> None:
    rows = dict(settings_rows({**INPUTS, "gpus": 1, "method": "full", "experts": None, "active_params": None}))
    assert "Sharding" not in rows and rows["Method"] == "full fine-tune" and "Experts" not in rows
    assert [count_text(n) for n in (124_439_808, 8_030_261_248, 999, 1.2e12)] == ["124 M", "8.03 B", "999", "1.20 T"]
