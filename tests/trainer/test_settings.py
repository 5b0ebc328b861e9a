"""The settings contract (trainer/settings.py): one definition of the flags, one planner <-> trainer vocabulary."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from gpuplanner.plan.setup import CHECKPOINTING, PRECISIONS
from trainer import config as trainer_config
from trainer.settings import (
    PLANNER_CHECKPOINTING,
    TRAINER_CHECKPOINTING,
    TRAINER_PRECISIONS,
    TrainSettings,
    checkpointing_to_planner,
    checkpointing_to_trainer,
    precision_to_planner,
    precision_to_trainer,
)

EVERY_FIELD = TrainSettings(
    model="gpt2",
    model_config="cfg/config.json",
    data=("a.txt", "b dir"),
    eval_data=("held out.jsonl",),
    chat_template="chatml",
    train_on_prompt=True,
    method="qlora",
    lora_rank=8,
    lora_targets=("q_proj", "v_proj"),
    precision="bf16",
    grad_checkpointing="selective",
    micro_batch=3,
    grad_accum=5,
    seq_len=96,
    epochs=2,
    max_steps=7,
    lr=0.000123456789,
    compile=False,
    attn_implementation="eager",
    tf32="on",
    fsdp=True,
    device="cpu",
    checkpoint_every_minutes=2.5,
)


def test_every_field_is_set_in_the_round_trip_sample() -> None:
    """The sample below sets every field away from its default, so the round trips cover each flag."""
    default = TrainSettings()
    assert all(getattr(EVERY_FIELD, f.name) != getattr(default, f.name) for f in dataclasses.fields(TrainSettings)), (
        "a field was added to TrainSettings: set it in EVERY_FIELD"
    )


def test_argv_round_trip_over_every_field() -> None:
    argv = EVERY_FIELD.to_argv()
    assert TrainSettings.from_argv(argv) == EVERY_FIELD
    assert TrainSettings.from_argv(["train", *argv]) == EVERY_FIELD  # "train" as the first word is tolerated
    assert argv[argv.index("--grad-checkpointing") + 1] == "selective" and "--no-compile" in argv
    assert TrainSettings.from_argv([]) == TrainSettings()
    for method, rank in (("full", None), ("lora", 4)):
        one = dataclasses.replace(EVERY_FIELD, method=method, lora_rank=rank)
        assert TrainSettings.from_argv(one.to_argv()) == one


def test_the_trainer_resolves_the_flags_to_the_same_settings() -> None:
    """What the trainer parses from to_argv() (its resolved config, as run_start records it) reads back as the
    same settings: the flags cannot drift from the trainer's parser."""
    parser = argparse.ArgumentParser()
    trainer_config.add_arguments(parser)
    for settings in (dataclasses.replace(EVERY_FIELD, method="lora"), dataclasses.replace(EVERY_FIELD, fsdp=False)):
        resolved = trainer_config.resolve(parser.parse_args(settings.to_argv()))  # (QLoRA refuses FSDP)
        recorded = json.loads(json.dumps(trainer_config.to_dict(resolved)))
        assert TrainSettings.from_config(recorded) == settings
    names = {f.name for f in dataclasses.fields(TrainSettings)} - {"method"}
    assert names <= set(trainer_config.FIELDS), "every shared setting is a trainer config field"


def test_config_round_trip_over_every_field() -> None:
    for method, rank in (("full", None), ("lora", 4), ("qlora", 8)):
        one = dataclasses.replace(EVERY_FIELD, method=method, lora_rank=rank)
        assert TrainSettings.from_config(json.loads(json.dumps(one.to_config()))) == one
    assert TrainSettings().to_config() == {}


def test_a_user_commands_plan_facts_are_read_as_every_run_is() -> None:
    """A command of one's own launched against a QLoRA plan with selective checkpointing: its facts are trainer
    config entries that calibration files under qlora and the diagnosis reads back in planner words."""
    from gpuplanner.history.calibration import method_of
    from gpuplanner.launch.command_lines import plan_facts

    inputs = {"model": "gpt2", "method": "qlora", "lora_rank": 32, "precision": "bf16-mixed", "seq_len": 256}
    facts = plan_facts({"inputs": {**inputs, "grad_checkpointing": "selective", "gpu": "H100 SXM"}})
    assert facts["grad_checkpointing"] == "selective" and facts["qlora"] is True and "method" not in facts
    settings = TrainSettings.from_config(facts)
    assert (method_of(facts), settings.lora_rank, settings.seq_len, settings.planner_precision) == (
        "qlora",
        32,
        256,
        "bf16-mixed",
    )
    assert plan_facts({"inputs": {"method": "lora", "lora_rank": 0}}) == {}  # not a plan: no facts


def test_unknown_or_bad_flags_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="--no-such-flag"):
        TrainSettings.from_argv(["--no-such-flag", "1"])
    with pytest.raises(ValueError, match="grad-checkpointing"):
        TrainSettings.from_argv(["--grad-checkpointing", "full"])  # the planner's word, not the trainer's
    with pytest.raises(ValueError, match="LoRA rank"):
        TrainSettings(method="lora")


def test_checkpointing_vocabulary_is_lossless_both_ways() -> None:
    assert PLANNER_CHECKPOINTING == CHECKPOINTING  # the planner's names are the contract's
    assert TRAINER_CHECKPOINTING == trainer_config.CHOICES["grad_checkpointing"]
    assert [checkpointing_to_trainer(p) for p in CHECKPOINTING] == ["off", "every", "every-other", "selective"]
    for planner in CHECKPOINTING:
        assert checkpointing_to_planner(checkpointing_to_trainer(planner)) == planner
    for trainer in TRAINER_CHECKPOINTING:
        assert checkpointing_to_trainer(checkpointing_to_planner(trainer)) == trainer
    assert checkpointing_to_planner("selective") == "selective"  # was "none" in the old diagnosis mapping
    with pytest.raises(ValueError):
        checkpointing_to_trainer("sometimes")


def test_precision_vocabulary_is_lossless_both_ways() -> None:
    assert TRAINER_PRECISIONS == trainer_config.CHOICES["precision"]
    for planner in PRECISIONS:
        assert precision_to_planner(precision_to_trainer(planner)) == planner
    for trainer in TRAINER_PRECISIONS:
        planner = precision_to_planner(trainer)
        if trainer == "auto":
            assert planner is None  # the device decides: run_start's precision names the result
        else:
            assert planner in PRECISIONS
            # fp16 is the trainer's other name of fp16-mixed: the same setting
            assert precision_to_trainer(planner) == ("fp16-mixed" if trainer == "fp16" else trainer)
    with pytest.raises(ValueError):
        precision_to_trainer("int8")


def test_from_planner_and_back() -> None:
    settings = TrainSettings.from_planner(
        method="lora", lora_rank=16, precision="bf16-mixed", grad_checkpointing="selective", seq_len=2048, data=["d"]
    )
    assert settings.to_argv() == [
        "--data", "d", "--lora-rank", "16", "--precision", "bf16-mixed", "--grad-checkpointing", "selective",
        "--seq-len", "2048",
    ]  # fmt: skip
    assert (settings.planner_checkpointing, settings.planner_precision) == ("selective", "bf16-mixed")
    plain = TrainSettings.from_planner(method="full", lora_rank=16, precision="auto", grad_checkpointing="none")
    assert plain == TrainSettings() and plain.to_argv() == []


def test_older_history_rows_are_read() -> None:
    """A user command's plan facts (v7 and earlier): a method key and the planner's spellings."""
    facts = {"model": "gpt2", "method": "qlora", "precision": "bf16-mixed", "seq_len": 256, "micro_batch": 2}
    settings = TrainSettings.from_config({**facts, "grad_checkpointing": "full"})
    assert (settings.method, settings.lora_rank, settings.seq_len) == ("qlora", 16, 256)
    assert settings.grad_checkpointing == "every" and settings.planner_checkpointing == "full"
    garbage = TrainSettings.from_config({"seq_len": "long", "lora_rank": True, "precision": "int3", "data": 5})
    assert garbage == TrainSettings()


def test_the_contract_imports_only_the_standard_library() -> None:
    code = (
        "import sys, trainer.settings as s; s.TrainSettings.from_argv(['--seq-len', '8']); print(sorted(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(eval(out))
    assert not loaded & {"torch", "numpy", "transformers", "gpuplanner"}
