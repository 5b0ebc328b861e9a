"""Checks before a launch: each names the launch dialog's field and says what to change."""

from __future__ import annotations

import json
from pathlib import Path

from gpuplanner.launch.preflight import check_launch, hf_id_for, local_files, preset_named
from gpuplanner.ui.runs.launch_request import demo_dir

EXISTS, READ = local_files()


def _values(**over: object) -> dict:
    values = {"model_config": str(demo_dir() / "tiny-gpt2.json"), "data": [str(demo_dir() / "corpus")], "seq_len": 64}
    values.update(over)
    return values


def test_the_demo_settings_pass() -> None:
    assert check_launch(_values(), "This machine", None, EXISTS, READ) == []


def test_sequence_longer_than_the_models_positions() -> None:
    problems = check_launch(_values(seq_len=512), "This machine", None, EXISTS, READ)
    assert problems == [
        "Sequence length (tokens): 512 is longer than the model's 64 positions (n_positions in tiny-gpt2.json);"
        " use 64 or less."
    ]


def test_missing_files_and_bad_json(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    problems = check_launch(
        _values(model_config=str(tmp_path / "nope.json"), data=[str(tmp_path / "gone.txt")]),
        "This machine",
        None,
        EXISTS,
        READ,
    )
    assert problems == [
        f"Model config: {tmp_path / 'nope.json'} does not exist on this machine.",
        f"Data: {tmp_path / 'gone.txt'} does not exist on this machine.",
    ]
    [problem] = check_launch(_values(model_config=str(bad)), "This machine", None, EXISTS, READ)
    assert problem.startswith(f"Model config: {bad} is not valid JSON")


def test_model_folder_and_preset_names(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    problems = check_launch(_values(model_config=None, model=str(folder)), "This machine", None, EXISTS, READ)
    assert problems == [f"Model: {folder} has no config.json (a saved Hugging Face model folder has one)."]
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 128}))
    [problem] = check_launch(
        _values(model_config=None, model=str(folder), seq_len=256), "This machine", None, EXISTS, READ
    )
    assert "256 is longer than the model's 128 positions (max_position_embeddings" in problem
    [problem] = check_launch(_values(model_config=None, model="llama-3.1-8b"), "This machine", None, EXISTS, READ)
    assert (
        problem.startswith("Model: 'llama-3.1-8b' is the planner's short name") and "meta-llama/Llama-3.1-8B" in problem
    )
    assert check_launch(_values(model_config=None, model="meta-llama/Llama-3.1-8B"), "h", None, EXISTS, READ) == []
    [problem] = check_launch(_values(model_config=None, model="gpt2", seq_len=2048), "This machine", None, EXISTS, READ)
    assert "2,048 is longer than the model's 1,024 positions (n_positions in the gpt2 preset)" in problem


def test_presets_carry_their_hugging_face_id() -> None:
    assert hf_id_for("llama-3.1-8b") == "meta-llama/Llama-3.1-8B"
    assert hf_id_for("Qwen2.5-7B") == "Qwen/Qwen2.5-7B"
    assert hf_id_for("gpt2-124m") == "gpt2"  # an alias
    assert hf_id_for("someone/own-model") == "someone/own-model"
    key, cfg = preset_named("mistralai/Mistral-7B-v0.3")  # type: ignore[misc]
    assert key == "mistral-7b-v0.3" and cfg["hidden_size"] == 4096


def test_last_probe_without_torch() -> None:
    probe = {"ok": False, "missing": ["torch"], "install_hint": "python3 -m pip install torch"}
    [problem] = check_launch(_values(), "gpu-box", probe, EXISTS, READ)
    assert problem == (
        "Host: the last probe of gpu-box found no torch; install with: python3 -m pip install torch "
        "(probe it again in the Hosts pane after installing)."
    )
