"""Model specs: exact parameter counts against models transformers builds from the same configs."""

from __future__ import annotations

import json

import pytest

from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.setup import PlanInputError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = {
    "llama": {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
        "vocab_size": 300,
        "tie_word_embeddings": False,
    },
    "llama-tied-bias": {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 96,
        "vocab_size": 300,
        "tie_word_embeddings": True,
        "attention_bias": True,
        "mlp_bias": True,
    },
    "qwen2": {
        "model_type": "qwen2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 320,
        "tie_word_embeddings": False,
    },
    "gemma2": {
        "model_type": "gemma2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 128,
        "vocab_size": 256,
    },
    "mistral": {
        "model_type": "mistral",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "intermediate_size": 128,
        "vocab_size": 256,
    },
    "qwen3": {
        "model_type": "qwen3",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": 256,
    },
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300, "n_positions": 128},
    "bert-mlm": {
        "model_type": "bert",
        "architectures": ["BertForMaskedLM"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 300,
        "max_position_embeddings": 128,
    },
    "bert-cls": {
        "model_type": "bert",
        "architectures": ["BertForSequenceClassification"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 300,
        "num_labels": 3,
    },
    "bert-base": {
        "model_type": "bert",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 300,
    },
}


def build(cfg: dict, device: str = "cpu"):
    cfg = dict(cfg)
    mt = cfg.pop("model_type")
    arch = (cfg.pop("architectures", None) or [""])[0]
    config = transformers.AutoConfig.for_model(mt, **cfg)
    if mt == "bert":
        cls = {
            "BertForMaskedLM": transformers.AutoModelForMaskedLM,
            "BertForSequenceClassification": transformers.AutoModelForSequenceClassification,
        }.get(arch, transformers.AutoModel)
    else:
        cls = transformers.AutoModelForCausalLM
    with torch.device(device):
        return cls.from_config(config)


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ms.list_presets())
def test_preset_parameter_count_is_exact(name: str) -> None:
    spec = ms.from_preset(name)
    cfg = {k: v for k, v in ms._presets()[name].items() if k != "aliases"}
    model = build(cfg, device="meta")
    assert spec.n_params == count(model)
    assert spec.n_tensors == len(list(model.parameters()))
    assert spec.source == "preset"


def test_known_sizes() -> None:
    assert ms.from_preset("gpt2").n_params == 124_439_808
    assert ms.from_preset("llama-3.1-8b").n_params == 8_030_261_248
    assert ms.from_preset("Qwen/Qwen2.5-7B").n_params == 7_615_616_512
    assert ms.from_preset("gemma-2-9b").n_params == 9_241_705_984


@pytest.mark.parametrize("key", sorted(TINY))
def test_config_parameter_count_is_exact(key: str) -> None:
    spec = ms.from_config(TINY[key])
    model = build(TINY[key])
    assert spec.n_params == count(model)
    assert spec.source == "config"
    # block linear weights (what QLoRA quantizes) match the model's modules
    lin = sum(
        m.weight.numel()
        for n, m in model.named_modules()
        if type(m).__name__ in ("Linear", "Conv1D") and (".layers." in n or ".h." in n or ".layer." in n)
    )
    assert spec.quantizable_params == lin


def test_bert_variants_differ_as_documented() -> None:
    base = ms.from_config({**TINY["bert-mlm"], "architectures": ["BertModel"]})
    mlm = ms.from_config(TINY["bert-mlm"])
    assert base.architecture == "BertModel" and mlm.architecture == "BertForMaskedLM"
    h, v = 64, 300
    # MLM: no pooler (h*h+h), adds transform dense (h*h+h), its LayerNorm (2h) and the decoder bias (v)
    assert mlm.n_params - base.n_params == 2 * h + v


@pytest.mark.parametrize(
    ("key", "targets"),
    [
        ("llama", ("q_proj", "v_proj")),
        ("llama", ("all-linear",)),
        ("qwen2", ("attention",)),
        ("gpt2", ("c_attn",)),
        ("gpt2", ("all-linear",)),
        ("bert-mlm", ("query", "value")),
        ("gemma2", ("all-linear",)),
    ],
)
def test_lora_trainable_params_match_peft(key: str, targets: tuple[str, ...]) -> None:
    peft = pytest.importorskip("peft")
    spec = ms.from_config(TINY[key])
    model = build(TINY[key])
    mods = ms.resolve_targets(spec, targets)
    names = "all-linear" if targets == ("all-linear",) else sorted({m.name if m.in_block else m.path for m in mods})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft: Conv1D fan_in_fan_out notice
        pm = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=names))
    trainable = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    assert ms.lora_trainable_params(spec, 4, targets) == trainable


def test_aliases_and_unknown_model() -> None:
    assert ms.from_preset("GPT2-Medium").name == "gpt2-medium"
    assert ms.from_preset("meta-llama/Llama-3.1-8B").name == "llama-3.1-8b"
    assert ms.from_preset("mistral-7b").vocab_size == 32768
    with pytest.raises(PlanInputError) as err:
        ms.from_preset("nope-1b")
    assert err.value.field == "model" and "presets:" in str(err.value)


def test_config_file_errors(tmp_path) -> None:
    with pytest.raises(PlanInputError) as err:
        ms.from_config_file(tmp_path / "missing.json")
    assert err.value.field == "model-config"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PlanInputError):
        ms.from_config_file(bad)
    nohidden = tmp_path / "x.json"
    nohidden.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    with pytest.raises(PlanInputError):
        ms.from_config_file(nohidden)
    good = tmp_path / "config.json"
    good.write_text(json.dumps(TINY["qwen2"]))
    assert ms.from_config_file(good).n_params == count(build(TINY["qwen2"]))


@pytest.mark.parametrize("n", [1, 1000, 10**6, 124 * 10**6, 7 * 10**9, 70 * 10**9])
def test_from_param_count(n: int) -> None:
    spec = ms.from_param_count(n)
    assert spec.n_params == n and spec.source == "params" and spec.family == "llama"
    shape = ms.from_config(spec.hf_config).n_params
    if n >= 10**8:
        assert abs(shape - n) / n < 0.05
    with pytest.raises(PlanInputError):
        ms.from_param_count(0)


def test_unknown_lora_target() -> None:
    with pytest.raises(PlanInputError) as err:
        ms.lora_trainable_params(ms.from_preset("gpt2"), 8, ("q_proj_typo",))
    assert err.value.field == "lora-targets"


# Qwen-7B's (v1, remote code) config.json fields as published with the model; the model card gives
# 7.72B parameters (hidden 4096, 32 layers, MLP width 11008 = intermediate_size / 2, vocab 151936).
QWEN1_7B = {
    "architectures": ["QWenLMHeadModel"],
    "model_type": "qwen",
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "kv_channels": 128,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "seq_length": 8192,
}


def test_qwen_v1_is_read_exactly_with_its_own_module_names() -> None:
    spec = ms.from_config(QWEN1_7B, name="qwen-7b")
    per_layer = 4096 * 3 * 4096 + 3 * 4096 + 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert spec.n_params == 2 * 151936 * 4096 + 32 * per_layer + 4096 == 7_721_324_544
    assert spec.reading_note == ""
    assert spec.intermediate_size == 11008
    # peft names Qwen v1's modules c_attn, c_proj, w1, w2: they are accepted, and "attention" means c_attn + c_proj
    assert ms.lora_trainable_params(spec, 8, ("c_attn",)) == 8 * (4096 + 3 * 4096) * 32
    assert ms.lora_trainable_params(spec, 8, ("attention",)) == 8 * (4096 + 3 * 4096 + 2 * 4096) * 32
    with pytest.raises(PlanInputError) as info:
        ms.resolve_targets(spec, ("q_proj",))
    assert info.value.field == "lora-targets" and "c_attn" in info.value.message


def test_a_layout_the_planner_does_not_know_is_said_in_every_plan(tmp_path) -> None:
    from gpuplanner.plan.catalog import load_catalog
    from gpuplanner.plan.planner import PlanRequest, make_plan
    from gpuplanner.plan.runtime import Workload
    from gpuplanner.plan.setup import TrainSetup

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN1_7B, "model_type": "falcon"}))
    spec = ms.from_config_file(path)
    assert "model_type 'falcon'" in spec.reading_note and "Llama-like" in spec.reading_note
    plan = make_plan(PlanRequest(spec, TrainSetup(), Workload(tokens=10**8), gpu="H100 SXM"), load_catalog())
    assert spec.reading_note in plan.warnings
    assert ms.from_config(TINY["llama"]).reading_note == ""
    no_type = {k: v for k, v in TINY["llama"].items() if k != "model_type"}
    assert "no model_type" in ms.from_config(no_type).reading_note
