"""Item 2 of issue 17: ``--qlora`` loads the base in 4-bit NF4 with double quantisation (bitsandbytes),
prepares it with peft and trains LoRA adapters on it. bitsandbytes runs on the CPU (0.46+), so the
real path is tested here; without bitsandbytes the trainer says how to install it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import base_args, read_events
from tests.trainer.test_precision import save_byte_tokenizer
from trainer.config import TrainConfig, validate
from trainer.loop import EXIT_CONFIG, EXIT_OK, train
from trainer.model import QLoRAUnavailable, build_model, param_count, resolve_precision, training_flops

CPU = torch.device("cpu")
LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "vocab_size": 257,
    "bos_token_id": 256,
    "eos_token_id": 256,
    "tie_word_embeddings": False,
}
# bitsandbytes' CPU path warns that an optional kernel package is missing; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def llama_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import transformers

    path = tmp_path_factory.mktemp("ckpt") / "tiny-llama-bf16"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**LLAMA)).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    save_byte_tokenizer(path)
    return path


def _config(tmp_path: Path, ckpt: Path, **kw) -> TrainConfig:
    args = {**base_args(tmp_path / "run", ckpt, **kw), "model_config": None, "model": str(ckpt)}
    cfg = TrainConfig(**args)
    validate(cfg)
    return cfg


def test_the_base_loads_in_nf4_with_double_quantisation(tmp_path: Path, llama_bf16: Path) -> None:
    bnb = pytest.importorskip("bitsandbytes", reason="pip install bitsandbytes (the qlora extra)")
    cfg = _config(tmp_path, llama_bf16, qlora=True, lora_rank=4, lora_targets=["all-linear"], precision="bf16-mixed")
    precision = resolve_precision("bf16-mixed", CPU)
    model = build_model(cfg, 257, 256, precision=precision, device=CPU)
    four_bit = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(four_bit) == 2 * 7  # q, k, v, o, gate, up, down in both blocks
    for m in four_bit:
        state = m.weight.quant_state
        assert state.quant_type == "nf4" and state.nested  # double quantisation: the scales are quantised too
        assert m.compute_dtype == torch.bfloat16
        assert m.weight.dtype == torch.uint8 and not m.weight.requires_grad
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained) and all(p.dtype == torch.float32 for p in trained.values())
    # prepare_model_for_kbit_training: the unquantised base (norms, embeddings, head) in fp32
    frozen_float = [p for p in model.parameters() if not p.requires_grad and p.is_floating_point()]
    assert frozen_float and all(p.dtype == torch.float32 for p in frozen_float)
    # FLOPs count the 4-bit weights at their real size: the same as the 16-bit LoRA model's
    lora = build_model(
        _config(tmp_path, llama_bf16, lora_rank=4, lora_targets=["all-linear"], precision="bf16-mixed"),
        257,
        256,
        precision=precision,
    )
    assert training_flops(model, 32, "off") == training_flops(lora, 32, "off")
    assert sum(param_count(p) for p in model.parameters()) == sum(p.numel() for p in lora.parameters())


@pytest.mark.slow
def test_a_qlora_run_trains_the_adapters(tmp_path: Path, llama_bf16: Path) -> None:
    pytest.importorskip("bitsandbytes", reason="pip install bitsandbytes (the qlora extra)")
    cfg = _config(
        tmp_path,
        llama_bf16,
        qlora=True,
        lora_rank=8,
        lora_targets=["all-linear"],
        precision="bf16-mixed",
        max_steps=6,
        lr=1e-2,
        eval_every_steps=6,
    )
    assert train(cfg) == EXIT_OK
    events = read_events(tmp_path / "run")
    start = events[0]
    assert start["param_dtypes"]["frozen_uint8"] > 0 and start["param_dtypes"]["trained_float32"] > 0
    losses = [e["loss"] for e in events if e["kind"] == "step"]
    assert len(losses) == 6 and all(x == x for x in losses)
    assert losses[-1] < losses[0]  # the adapters learn on the 4-bit base
    assert events[-1]["status"] == "finished"
    assert (tmp_path / "run" / "final" / "adapter_model.safetensors").exists()
    saved = json.loads((tmp_path / "run" / "final" / "adapter_config.json").read_text())
    assert saved["r"] == 8


def test_qlora_settings_are_checked(tmp_path: Path, llama_bf16: Path) -> None:
    with pytest.raises(ValueError, match="--qlora trains LoRA adapters on a 4-bit base: give --lora-rank"):
        _config(tmp_path, llama_bf16, qlora=True)
    bad = TrainConfig(**base_args(tmp_path / "r", tmp_path / "m.json", qlora=True, lora_rank=4))
    with pytest.raises(ValueError, match="give --model"):
        validate(bad)
    with pytest.raises(ValueError, match="--fsdp"):
        _config(tmp_path, llama_bf16, qlora=True, lora_rank=4, fsdp=True)


def test_without_bitsandbytes_the_run_says_how_to_install_it(
    tmp_path: Path, llama_bf16: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # what an environment without it imports
    cfg = _config(tmp_path, llama_bf16, qlora=True, lora_rank=4, precision="bf16-mixed")
    with pytest.raises(QLoRAUnavailable, match="pip install bitsandbytes"):
        build_model(cfg, 257, 256, device=CPU)
    assert train(cfg) == EXIT_CONFIG
    end = read_events(tmp_path / "run")[-1]
    assert end["status"] == "failed" and "pip install bitsandbytes" in end["error"]
