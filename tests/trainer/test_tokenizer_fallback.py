"""No silent byte tokenizer (issue 28 item 2): a pretrained model whose tokenizer does not load fails with one
line and trains nothing; a model built from a config (or saved with ``byte_tokenizer.json``) uses bytes and says
so on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.conftest import base_args
from trainer.config import TrainConfig, validate
from trainer.data import ByteTokenizer, TokenizerError, load_tokenizer
from trainer.loop import EXIT_CONFIG, train

LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 64,
}


@pytest.fixture
def model_without_tokenizer(tmp_path: Path) -> Path:
    import transformers

    path = tmp_path / "pretrained"
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**LLAMA))
    model.save_pretrained(path, safe_serialization=True)
    (path / "tokenizer_config.json").write_text('{"tokenizer_class": "NoSuchTokenizer"}')  # broken, as users meet it
    return path


def test_a_model_whose_tokenizer_does_not_load_trains_nothing(
    tmp_path: Path, model_without_tokenizer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(TokenizerError, match="cannot be loaded"):
        load_tokenizer(str(model_without_tokenizer))
    args = {**base_args(tmp_path / "run", model_without_tokenizer), "model_config": None}
    config = TrainConfig(**{**args, "model": str(model_without_tokenizer)})
    validate(config)
    assert train(config) == EXIT_CONFIG
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"the tokenizer of {model_without_tokenizer} cannot be loaded" in lines[0], err
    records = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert not [r for r in records if r["kind"] == "step"]
    assert records[-1]["kind"] == "run_end" and records[-1]["exit_code"] == EXIT_CONFIG
    assert not (tmp_path / "run" / "final").exists()


def test_bytes_only_for_a_config_built_or_byte_saved_model(tmp_path: Path) -> None:
    assert isinstance(load_tokenizer(None), ByteTokenizer)
    saved = tmp_path / "final"
    saved.mkdir()
    ByteTokenizer().save_pretrained(saved)
    assert isinstance(load_tokenizer(str(saved)), ByteTokenizer)
