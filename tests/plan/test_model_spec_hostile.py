"""Hostile config.json files (issue 13, item 3): every field the model spec reads is checked, with
limits no real model comes near; the error names the file and the field; no traceback, no giant
allocation. Plus a Hypothesis fuzz of the reader with arbitrary JSON."""

from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner import cli
from gpuplanner.plan import model_config
from gpuplanner.plan import model_spec as ms
from gpuplanner.plan.setup import PlanInputError

BASE = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 160,
    "vocab_size": 300,
}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300, "n_positions": 128}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


CASES: list[tuple[dict[str, Any], str, str]] = [
    (BASE, '"num_hidden_layers": 100000000', "num_hidden_layers"),
    (BASE, '"num_hidden_layers": NaN', "num_hidden_layers"),
    (BASE, '"hidden_size": Infinity', "hidden_size"),
    (BASE, '"hidden_size": 1e400', "hidden_size"),
    (BASE, '"vocab_size": -Infinity', "vocab_size"),
    (BASE, '"vocab_size": "32000"', "vocab_size"),
    (BASE, '"num_attention_heads": {"a": 1}', "num_attention_heads"),
    (BASE, '"intermediate_size": [1]', "intermediate_size"),
    (BASE, '"max_position_embeddings": "lots"', "max_position_embeddings"),
    (BASE, '"max_position_embeddings": 1e400', "max_position_embeddings"),
    (BASE, '"head_dim": 1e30', "head_dim"),
    (BASE, '"num_key_value_heads": true', "num_key_value_heads"),
    (BASE, '"tie_word_embeddings": "false"', "tie_word_embeddings"),
    (BASE, '"hidden_act": {"x": 1}', "hidden_act"),
    (BASE, '"final_logit_softcapping": NaN', "final_logit_softcapping"),
    (BASE, '"architectures": "LlamaForCausalLM"', "architectures"),
    (BASE, '"text_config": {"hidden_size": NaN}', "text_config.hidden_size"),
    (BASE, '"vocab_size": ' + "9" * 5000, "config.json"),  # > 4300 digits: Python refuses to read it
    (GPT2, '"resid_pdrop": "0.1"', "resid_pdrop"),
    (GPT2, '"attn_pdrop": NaN', "attn_pdrop"),
    (GPT2, '"resid_pdrop": 1e400', "resid_pdrop"),
    (GPT2, '"n_positions": 1e308', "n_positions"),
    ({**GPT2, "model_type": "bert"}, '"hidden_dropout_prob": -0.5', "hidden_dropout_prob"),
    ({**GPT2, "model_type": "bert"}, '"num_labels": 1e12', "num_labels"),
    ({**GPT2, "model_type": "bert"}, '"type_vocab_size": 1e9', "type_vocab_size"),
]


def with_field(base: dict[str, Any], field_json: str) -> str:
    """The base config as JSON text with one more (raw, possibly non-standard) field."""
    return json.dumps(base)[:-1] + ", " + field_json + "}"


@pytest.mark.parametrize(("base", "field_json", "named"), CASES)
def test_each_hostile_field_is_named(tmp_path: Path, base: dict[str, Any], field_json: str, named: str) -> None:
    path = write(tmp_path, with_field(base, field_json))
    tracemalloc.start()
    try:
        with pytest.raises(PlanInputError) as caught:
            ms.from_config_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak  # no multi-GB allocation before refusing (measured, not timed)
    message = str(caught.value)
    assert message.startswith("--model-config: ") and str(path) in message and named in message, message
    assert "\n" not in message


def test_deep_nesting_and_huge_models(tmp_path: Path) -> None:
    deep = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(PlanInputError, match="nested deeper"):
        ms.from_config_file(deep)
    wide = {**BASE, "hidden_size": 131072, "num_attention_heads": 1024, "num_key_value_heads": 1024}
    wide.update(num_hidden_layers=4096, intermediate_size=1 << 21, vocab_size=1 << 23)
    with pytest.raises(PlanInputError, match="more than any real model"):
        ms.from_config(wide)
    assert ms.from_config(BASE).n_params > 0  # the limits leave real shapes alone
    for preset in ms.list_presets():
        assert ms.from_preset(preset).n_params > 0


def test_cli_gives_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.plan",))
    path = write(tmp_path, with_field(BASE, '"num_hidden_layers": 100000000'))
    code = cli.main(["plan", "--model-config", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "num_hidden_layers" in err and str(path) in err


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
KNOWN = sorted(
    {
        *model_config._INT_LIMITS,
        *model_config._PROBABILITIES,
        *model_config._BOOLS,
        *model_config._STRINGS,
        "architectures",
        "text_config",
    }
)
FIELD_VALUES = st.one_of(
    JSON,
    st.integers(min_value=1, max_value=200),
    st.sampled_from(["llama", "gpt2", "bert", "qwen2", "gemma2", "mistral", "olmo2", "x"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([BASE, GPT2, {**GPT2, "model_type": "bert"}, {}]),
    changes=st.dictionaries(st.sampled_from(KNOWN), FIELD_VALUES, max_size=4),
    junk=st.dictionaries(st.text(max_size=8), JSON, max_size=2),
)
def test_fuzz_reader(base: dict[str, Any], changes: dict[str, Any], junk: dict[str, Any]) -> None:
    cfg = {**base, **junk, **changes}
    try:
        spec = ms.from_config(cfg)
    except PlanInputError as exc:
        text = str(exc)
        assert text.startswith("--model-config: ") and "\n" not in text and len(text) < 400
        return
    for value in (spec.n_params, spec.hidden_size, spec.num_layers, spec.vocab_size, spec.layer_params):
        assert isinstance(value, int) and 1 <= value <= ms.MAX_PARAMS
    assert 0 <= spec.resid_dropout <= 1 and 0 <= spec.attn_dropout <= 1
    assert all(math.isfinite(x) for x in (spec.resid_dropout, spec.attn_dropout))
    json.dumps(spec.hf_config, allow_nan=True)  # the config it keeps is still plain JSON data


@settings(max_examples=100, deadline=None)
@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=200) | st.builds(json.dumps, JSON))
def test_fuzz_reader_files(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(text, encoding="utf-8")
    try:
        ms.from_config_file(path)
    except PlanInputError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
