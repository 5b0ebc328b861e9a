"""Issue 28 item 6: the finished model is servable: saved in the training dtype (bf16 under bf16-mixed)
with ``save_pretrained``; a LoRA run's adapter is a peft adapter, and ``--merge-lora`` adds the merged
model. Each loads with transformers/peft and generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import make_config
from trainer import checkpoint
from trainer.data import ByteTokenizer
from trainer.loop import EXIT_OK, train

LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 64,
    "vocab_size": 257,
    "tie_word_embeddings": False,
    "bos_token_id": 256,
    "eos_token_id": 256,
}
PROMPT = torch.tensor([[72, 101, 108, 108, 111]])  # "Hello" in the byte tokenizer


def _generate(model: torch.nn.Module) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model.generate(PROMPT, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=256)


@pytest.mark.slow
def test_full_fine_tune_is_saved_in_bf16_and_generates(tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    cfg = tmp_path / "llama.json"
    cfg.write_text(json.dumps(LLAMA))
    run = tmp_path / "run"
    assert train(make_config(run, cfg, max_steps=2, precision="bf16-mixed", loss_impl="chunked")) == EXIT_OK
    saved = load_file(str(run / "final" / "model.safetensors"))
    assert saved and all(t.dtype == torch.bfloat16 for t in saved.values())
    config = json.loads((run / "final" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    # the fp32 masters of the last checkpoint, rounded to bf16: exactly what final/ holds
    masters = torch.load(checkpoint.newest_valid(run) / "model.pt", weights_only=True)
    assert masters["model.embed_tokens.weight"].dtype == torch.float32
    for name, tensor in saved.items():
        assert torch.equal(tensor, masters[name].to(torch.bfloat16)), name
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    assert model.dtype == torch.bfloat16
    out = _generate(model)
    assert out.shape == (1, PROMPT.shape[1] + 4) and torch.equal(out[:, : PROMPT.shape[1]], PROMPT)


@pytest.mark.slow
# peft 0.21's PeftModel.from_pretrained reads transformers 5's deprecated is_gradient_checkpointing
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.* is deprecated:FutureWarning")
def test_lora_adapter_and_merged_model_load_and_generate_alike(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    base_dir = tmp_path / "base"
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(AutoConfig.for_model(**LLAMA))
    base.save_pretrained(base_dir, safe_serialization=True)
    ByteTokenizer().save_pretrained(base_dir)
    run = tmp_path / "run"
    from tests.trainer.conftest import base_args
    from trainer.config import TrainConfig, validate

    args = base_args(run, base_dir)
    args.update(
        model_config=None,
        model=str(base_dir),
        max_steps=3,
        lr=2e-2,
        precision="bf16-mixed",
        lora_rank=4,
        lora_targets=["q_proj", "v_proj"],
        merge_lora=True,
    )
    config = TrainConfig(**args)
    validate(config)
    assert train(config) == EXIT_OK
    final = run / "final"
    adapter = json.loads((final / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["r"] == 4
    weights = load_file(str(final / "adapter_model.safetensors"))
    assert weights and all("lora_" in k and t.dtype == torch.bfloat16 for k, t in weights.items())
    assert not (final / "model.safetensors").exists()  # the adapter alone

    with_adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16), final
    )
    merged = AutoModelForCausalLM.from_pretrained(final / "merged")  # plain transformers, no peft
    assert merged.dtype == torch.bfloat16 and not any("lora_" in n for n, _ in merged.named_parameters())
    plain_base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16)
    q = "model.layers.0.self_attn.q_proj.weight"
    delta = merged.state_dict()[q].float() - plain_base.state_dict()[q].float()
    assert delta.abs().max() > 0  # the trained adapter is in the merged weights
    out_adapter, out_merged = _generate(with_adapter), _generate(merged)
    assert out_merged.shape == (1, PROMPT.shape[1] + 4)
    assert torch.equal(out_adapter, out_merged)
    with torch.no_grad():
        a = with_adapter(input_ids=PROMPT).logits.float()
        b = merged(input_ids=PROMPT).logits.float()
    torch.testing.assert_close(a, b, rtol=0.05, atol=0.05)  # bf16: merged weights are rounded once more


def test_merge_lora_needs_lora_and_a_base_to_reload(tmp_path: Path) -> None:
    from trainer.config import TrainConfig, validate

    with pytest.raises(ValueError, match="--merge-lora merges LoRA adapters"):
        validate(TrainConfig(model_config="c.json", data=["d"], merge_lora=True))
    with pytest.raises(ValueError, match="reloads the base model: give --model"):
        validate(TrainConfig(model_config="c.json", data=["d"], merge_lora=True, lora_rank=4, fsdp=True))
    validate(TrainConfig(model_config="c.json", data=["d"], merge_lora=True, lora_rank=4))
