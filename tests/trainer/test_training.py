"""In-process training on the shipped corpus with a tiny config-built GPT-2 (CPU, seconds)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.conftest import CORPUS, TINY_GPT2, final_weights, make_config, read_events
from trainer import checkpoint
from trainer import data as data_mod
from trainer.loop import EXIT_OK, train
from trainer.model import build_model
from trainer.step import accumulate


def test_loss_goes_down_and_outputs_are_complete(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    cfg = make_config(run, model_config, max_steps=30, eval_every_steps=15, checkpoint_every_steps=10)
    assert train(cfg) == EXIT_OK
    events = read_events(run)
    steps = [e for e in events if e["kind"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 31))
    first, last = sum(e["loss"] for e in steps[:3]) / 3, sum(e["loss"] for e in steps[-3:]) / 3
    assert last < first - 1.0, (first, last)  # byte-level: ln(257)=5.55 at start
    evals = [e for e in events if e["kind"] == "eval"]
    assert [e["step"] for e in evals] == [15, 30] and evals[1]["eval_loss"] < evals[0]["eval_loss"]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[0]["kind"] == "run_start" and events[-1]["kind"] == "run_end"
    assert events[-1]["status"] == "finished" and events[-1]["totals"]["steps"] == 30
    assert steps[-1]["tokens_total"] == 30 * 4 * 32 and steps[-1]["samples_total"] == 120
    for key in ("tokens_per_s", "samples_per_s", "step_time_s", "data_wait_s", "peak_mem_bytes", "lr", "spend_usd"):
        assert key in steps[-1]
    assert steps[-1]["mfu"] is None  # no peak FLOP/s known for a CPU
    assert (run / "final" / "model.safetensors").exists() and (run / "config.resolved.toml").exists()
    ckpts = [e for e in events if e["kind"] == "checkpoint"]
    assert [e["step"] for e in ckpts] == [10, 20, 30] and all(e["seconds"] > 0 and e["bytes"] > 0 for e in ckpts)
    # keep_checkpoints=3 default: all three kept, each with a valid completion marker
    assert [p.name for p in checkpoint.complete(run)] == ["step-00000030", "step-00000020", "step-00000010"]


def test_accumulation_gradient_equals_one_big_batch(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, tmp_path / "unused.json")
    cfg.model_config = None
    corpus = data_mod.tokenize_cached(data_mod.data_files([str(CORPUS)]), data_mod.ByteTokenizer(), "text", tmp_path)
    packed = data_mod.pack(corpus, 32, 256)
    ids = torch.from_numpy(packed.sequences(list(range(8))))

    def grads(chunks: int) -> dict[str, torch.Tensor]:
        import transformers

        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(
                **{
                    **TINY_GPT2,
                    "resid_pdrop": 0.0,
                    "embd_pdrop": 0.0,
                    "attn_pdrop": 0.0,
                    "bos_token_id": 256,
                    "eos_token_id": 256,
                }
            )
        )
        micro = [{"input_ids": part} for part in ids.chunk(chunks)]
        accumulate(
            model,
            micro,
            torch.device("cpu"),
            torch.autocast("cpu", enabled=False).__class__ and (lambda: torch.autocast("cpu", enabled=False)),
            global_targets=8 * 31,
        )
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    big, small = grads(1), grads(4)
    for name in big:
        torch.testing.assert_close(small[name], big[name], rtol=1e-5, atol=1e-7)


def test_accumulated_training_matches_big_batch_training(tmp_path: Path, model_config: Path) -> None:
    mc = tmp_path / "nodrop.json"
    mc.write_text(model_config.read_text().replace("}", ', "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}'))
    a = make_config(tmp_path / "a", mc, micro_batch=4, grad_accum=1, max_steps=3)
    b = make_config(tmp_path / "b", mc, micro_batch=1, grad_accum=4, max_steps=3)
    assert train(a) == EXIT_OK and train(b) == EXIT_OK
    wa, wb = final_weights(tmp_path / "a"), final_weights(tmp_path / "b")
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-4, atol=1e-5)


def test_corrupt_newest_checkpoint_falls_back_to_previous(tmp_path: Path, model_config: Path) -> None:
    run = tmp_path / "run"
    assert train(make_config(run, model_config, max_steps=4, checkpoint_every_steps=2)) == EXIT_OK
    newest = checkpoint.checkpoints_dir(run) / "step-00000004"
    with open(newest / "model.pt", "r+b") as fh:  # flip bytes in the middle of the weights
        fh.seek(2000)
        fh.write(b"\x00garbage\x00")
    half = checkpoint.checkpoints_dir(run) / "step-00000003"  # a half-written one: no marker
    shutil.copytree(checkpoint.checkpoints_dir(run) / "step-00000002", half)
    (half / checkpoint.MARKER).unlink()
    assert checkpoint.newest_valid(run).name == "step-00000002"
    assert train(make_config(run, model_config, max_steps=6, checkpoint_every_steps=2)) == EXIT_OK
    events = read_events(run)
    starts = [e for e in events if e["kind"] == "run_start"]
    assert starts[-1]["resumed_from_step"] == 2
    assert [e["step"] for e in events if e["kind"] == "step"][-4:] == [3, 4, 5, 6]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))  # seq keeps rising across the resume


def test_budget_guard_checkpoints_and_stops_at_the_cap(tmp_path: Path, model_config: Path) -> None:
    from transformers import GPT2LMHeadModel  # noqa: F401 (loaded once per test process, not per run)

    run = tmp_path / "run"
    # $3600 per GPU-hour = $1 per second: a $3 budget is spent after 3 s, loading included.
    cfg = make_config(run, model_config, max_steps=100000, price_per_gpu_hour=3600.0, budget_usd=3.0)
    assert train(cfg) == EXIT_OK
    events = read_events(run)
    start, end = events[0], events[-1]
    assert start["kind"] == "run_start" and end["kind"] == "run_end" and end["status"] == "budget_stop"
    steps = [e for e in events if e["kind"] == "step"]
    assert steps and all(e["spend_usd"] < 3.0 for e in steps[:-1])  # stopped at the first step past the cap
    # Paid time runs from the start (loading included), the span the records' times cover: at $1/s the
    # spend is the seconds since run_start, for every step and for the totals of run_end.
    for record, spend in [*((e, e["spend_usd"]) for e in steps), (end, end["totals"]["spend_usd"])]:
        assert abs(spend - (record["t"] - start["t"])) < 0.05, (record, start["t"])
    assert 3.0 <= steps[-1]["spend_usd"] <= end["totals"]["spend_usd"]
    assert end["totals"]["steps"] == steps[-1]["step"] < 100000
    assert checkpoint.newest_valid(run).name == f"step-{steps[-1]['step']:08d}"
    assert (run / "final" / "model.safetensors").exists()
    # Spend is carried across resumes: with the cap already reached, a resume stops before any step.
    assert train(cfg) == EXIT_OK
    again = read_events(run)[len(events) :]
    assert not [e for e in again if e["kind"] == "step"]
    assert again[-1]["status"] == "budget_stop" and again[-1]["totals"]["spend_usd"] > steps[-1]["spend_usd"]


def test_gpu_hour_cap_and_early_stop_on_target(tmp_path: Path, model_config: Path) -> None:
    cfg = make_config(tmp_path / "a", model_config, max_steps=100000, max_gpu_hours=0.3 / 3600)
    assert train(cfg) == EXIT_OK
    assert read_events(tmp_path / "a")[-1]["status"] == "budget_stop"
    cfg = make_config(tmp_path / "b", model_config, max_steps=200, eval_every_steps=2, target_eval_loss=4.0)
    assert train(cfg) == EXIT_OK
    events = read_events(tmp_path / "b")
    evals = [e for e in events if e["kind"] == "eval"]
    assert events[-1]["status"] == "early_stop" and evals[-1]["eval_loss"] <= 4.0
    assert all(e["eval_loss"] > 4.0 for e in evals[:-1]) and events[-1]["totals"]["steps"] < 200


def test_early_stop_on_plateau(tmp_path: Path, model_config: Path) -> None:
    # lr 0 keeps the eval loss flat: patience 2 stops after the third evaluation.
    cfg = make_config(
        tmp_path,
        model_config,
        lr=0.0,
        max_steps=100,
        eval_every_steps=1,
        early_stop_patience=2,
        early_stop_min_delta=0.01,
    )
    assert train(cfg) == EXIT_OK
    events = read_events(tmp_path)
    assert events[-1]["status"] == "early_stop" and events[-1]["totals"]["steps"] == 3


def test_lora_trains_only_adapters(tmp_path: Path, model_config: Path) -> None:
    pytest.importorskip("peft")
    run = tmp_path / "run"
    cfg = make_config(run, model_config, max_steps=3, lora_rank=4, lora_targets=["c_attn"])
    assert train(cfg) == EXIT_OK
    files = sorted(p.name for p in (run / "final").iterdir())
    assert "adapter_model.safetensors" in files and "model.safetensors" not in files
    saved = torch.load(checkpoint.newest_valid(run) / "model.pt", weights_only=True)
    assert saved and all("lora_" in k for k in saved)
    start = [e for e in read_events(run) if e["kind"] == "run_start"][0]
    assert 0 < start["trainable_params"] < start["params"] / 10


def test_grad_checkpointing_every_other_layer(tmp_path: Path, model_config: Path) -> None:
    from trainer.config import TrainConfig

    cfg = TrainConfig(model_config=str(model_config), data=[str(CORPUS)], grad_checkpointing="every-other")
    model = build_model(cfg, 257, 256)
    flags = [m.gradient_checkpointing for m in model.transformer.h]
    assert flags == [True, False]


def test_document_positions_and_ids_restart_at_each_document() -> None:
    from trainer.chat import START, TARGET
    from trainer.packing import document_layout

    flags = np.array([[TARGET, TARGET, START, TARGET, TARGET, TARGET, START | TARGET, TARGET]], dtype=np.uint8)
    positions, docs = document_layout(flags)
    assert positions.tolist() == [[0, 1, 0, 1, 2, 3, 0, 1]]
    assert docs.tolist() == [[0, 0, 1, 1, 1, 1, 2, 2]]


def test_sample_order_is_a_pure_function_of_seed_and_epoch_and_reshards_exactly(tmp_path: Path) -> None:
    corpus = data_mod.tokenize_cached(data_mod.data_files([str(CORPUS)]), data_mod.ByteTokenizer(), "text", tmp_path)
    packed = data_mod.pack(corpus, 32, 256)

    def consumed(world: int, start: data_mod.Position, steps: int) -> list[int]:
        out: list[int] = []
        plans = [data_mod.StepPlan(packed, 7, start, 2, 2, world, r, steps) for r in range(world)]
        for i in range(steps * 2):
            step_ids = [int(x) for p in plans for x in p.indices(i)]
            out += step_ids
        return out

    one = consumed(1, data_mod.Position(0, 0), 10)
    assert one == consumed(1, data_mod.Position(0, 0), 10)
    assert sorted(set(one)) == sorted(one)  # no repeats within the epoch
    # two ranks (global batch 8) over the same samples: the same multiset per step
    two = consumed(2, data_mod.Position(0, 0), 5)
    for s in range(5):
        assert sorted(two[s * 8 : (s + 1) * 8]) == sorted(one[s * 8 : (s + 1) * 8])
    # resuming mid-epoch continues exactly where the position says
    assert consumed(1, data_mod.Position(0, 16), 6) == one[16 : 16 + 24]


def test_training_runs_without_kv_cache_and_the_saved_model_keeps_it(tmp_path: Path, model_config: Path) -> None:
    import json

    from trainer.model import save_final

    cfg = make_config(tmp_path / "run", model_config)
    model = build_model(cfg, 257, 256)
    assert model.config.use_cache is False  # no DynamicCache built and filled on every training forward
    save_final(model, data_mod.ByteTokenizer(), tmp_path / "final")
    assert json.loads((tmp_path / "final" / "config.json").read_text())["use_cache"] is True
    assert model.config.use_cache is False


def test_bench_measures_the_wall_span_of_the_measured_steps(tmp_path: Path, model_config: Path) -> None:
    from trainer.bench import bench

    result = bench(make_config(tmp_path / "run", model_config), warmup_steps=2, steps=4)
    assert result["measured_steps"] == 4 and result["tokens_per_s"] > 0
    assert result["tokens_per_s"] == pytest.approx(4 * 4 * 32 / (4 * result["step_time_s"]))


def test_fused_gelu_is_the_same_function_and_the_saved_model_is_unchanged(tmp_path: Path, model_config: Path) -> None:
    import json

    from trainer.model import fuse_activations, save_final

    def fused_gelus(model: torch.nn.Module) -> int:
        return sum(isinstance(m, torch.nn.GELU) and m.approximate == "tanh" for m in model.modules())

    fused = build_model(make_config(tmp_path / "run", model_config), 257, 256)
    plain = build_model(make_config(tmp_path / "run", model_config, fused_kernels=False), 257, 256)
    assert fused_gelus(fused) == TINY_GPT2["n_layer"] and fused_gelus(plain) == 0
    assert fuse_activations(fused) == 0  # nothing left to replace
    plain.load_state_dict(fused.state_dict())
    ids = torch.randint(0, 256, (2, 16))
    grads = []
    for model in (fused, plain):
        model.eval()  # no dropout: the two forwards must see the same function
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    with torch.no_grad():
        assert torch.allclose(fused(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)
    save_final(fused, data_mod.ByteTokenizer(), tmp_path / "final")
    assert json.loads((tmp_path / "final" / "config.json").read_text())["activation_function"] == "gelu_new"


def test_fused_kernels_leave_other_activations_alone(tmp_path: Path) -> None:
    import json

    llama = tmp_path / "llama.json"
    llama.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "vocab_size": 257,
            }
        )
    )
    model = build_model(make_config(tmp_path / "run", llama), 257, 256)
    assert not any(isinstance(m, torch.nn.GELU) for m in model.modules())  # SiLU is already one kernel
