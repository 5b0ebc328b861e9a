"""The planner's input layer (`gpuplanner.plan.inputs`): one set of rules for the CLI and the form.

Covers issue 13's planner items (a spot run that never finishes, LoRA in fp32 that does not fit,
values that parse but overflow, empty names, ``--price=--``) and fuzzes every `plan`/`compare` flag.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner.cli import main
from gpuplanner.plan.inputs import RANGES, PlanInputs, parse_value
from gpuplanner.plan.memory_fit import fit_suggestions
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.setup import PlanInputError, TrainSetup
from gpuplanner.ui.plan.plan_form_fields import default_values
from gpuplanner.ui.plan.plan_inputs import inputs_from_values, request_from_values


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} in JSON")


def strict_json(text: str) -> Any:
    """JSON as the standard allows it: NaN and Infinity are refused."""
    return json.loads(text, parse_constant=_reject_constant)


def numbers_in(document: Any) -> list[float]:
    if isinstance(document, bool) or document is None or isinstance(document, str):
        return []
    if isinstance(document, (int, float)):
        return [float(document)]
    if isinstance(document, dict):
        return [x for v in document.values() for x in numbers_in(v)]
    return [x for v in document for x in numbers_in(v)]


def assert_one_line_naming(err: str, flag: str) -> None:
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err, err
    assert "Traceback" not in err


# ------------------------------------------------------------------------------ issue 13, item 1


def test_a_spot_run_that_never_finishes_reads_as_such() -> None:
    """`plan --interruptions-per-hour 20 --checkpoint-minutes 600` formatted a None count (TypeError)."""
    argv = ("plan", "--interruptions-per-hour", "20", "--checkpoint-minutes", "600", "--no-calibration")
    code, out, err = run(*argv)
    assert code == 0, err
    assert "Spot     never finishes at $" in out
    assert "the run would never finish" in out
    code, out, _ = run(*argv, "--json")
    assert code == 0
    spot = strict_json(out)["spot"]
    assert spot["hours"] is None and spot["expected_interruptions"] is None and spot["cost_usd"] is None
    assert spot["price_per_gpu_hour"] > 0


# ------------------------------------------------------------------------------ issue 13, item 2


def test_lora_in_fp32_that_does_not_fit_is_planned_with_valid_suggestions() -> None:
    """The fit suggestions built QLoRA + fp32 (an invalid setup) and the whole plan was refused."""
    code, out, err = run(
        "plan", "--method", "lora", "--precision", "fp32", "--gpu", "RTX 3090", "--json", "--no-calibration"
    )
    assert code == 0, err
    document = strict_json(out)
    assert document["memory"]["fits"] is False
    suggestions = document["memory"]["suggestions"]
    assert suggestions and not any(s.startswith("QLoRA (4-bit base) instead of LoRA") for s in suggestions)
    assert any("larger GPU" in s for s in suggestions)


def test_fit_suggestions_skip_invalid_combinations() -> None:
    spec = from_preset("llama-3.1-8b")
    setup = TrainSetup(method="lora", precision="fp32", micro_batch=4, seq_len=2048)
    suggestions = fit_suggestions(spec, setup, 24.0, 0.95)
    assert suggestions  # something fits: a combination with a valid precision, or FSDP
    for text in suggestions:
        assert "instead of LoRA" not in text  # QLoRA of this setup would be fp32: not offered
    with pytest.raises(PlanInputError):
        TrainSetup(method="qlora", precision="fp32")


# ------------------------------------------------------------------------------ issue 13, item 4


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--seq-len", "1e308"], "--seq-len"),
        (["--micro-batch", "1e308"], "--micro-batch"),
        (["--samples", "1e308"], "--samples"),
        (["--tokens", "1e308"], "--tokens"),
        (["--params", "1e300"], "--params"),
        (["--gpus", "1e9"], "--gpus"),
        (["--epochs", "1e300"], "--epochs"),
        (["--budget-usd", "1e300"], "--budget-usd"),
        (["--price=--"], "--price"),
        (["--spot-price=--"], "--spot-price"),
        (["--model", ""], "--model"),
        (["--model", "   "], "--model"),
        (["--gpu", ""], "--gpu"),
        (["--model-config", ""], "--model-config"),
        (["--seq-len", "1e999"], "--seq-len"),
        (["--mfu", "nan"], "--mfu"),
        (["--mfu", "0"], "--mfu"),
        (["--headroom", "0"], "--headroom"),
        (["--interruptions-per-hour", "inf"], "--interruptions-per-hour"),
        (["--lora-targets", " , "], "--lora-targets"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "compare"])
def test_overflowing_values_and_empty_names_are_refused(command: str, argv: list[str], flag: str) -> None:
    code, out, err = run(command, *argv, "--no-calibration")
    assert code == 2
    assert out == ""
    assert_one_line_naming(err, flag)


def test_the_largest_values_a_range_admits_give_finite_numbers() -> None:
    code, out, err = run(
        "plan",
        "--params",
        "1e13",
        "--seq-len",
        str(2**24),
        "--micro-batch",
        "65536",
        "--grad-accum",
        "1000000",
        "--gpus",
        "1000000",
        "--samples",
        "1e13",
        "--epochs",
        "10000",
        "--spot-discount",
        "0.99",
        "--interruptions-per-hour",
        "1000",
        "--deadline-hours",
        "1e7",
        "--budget-usd",
        "1e12",
        "--no-calibration",
        "--json",
    )
    assert code == 0, err
    assert all(math.isfinite(x) for x in numbers_in(strict_json(out)))


# ------------------------------------------------------------------------------ one set of rules


def test_headroom_of_one_is_valid_for_the_cli_the_form_and_the_engine() -> None:
    code, out, err = run("plan", "--headroom", "1", "--json", "--no-calibration")
    assert code == 0, err
    assert strict_json(out)["inputs"]["headroom"] == 1.0
    assert request_from_values({**default_values(), "headroom": "1"}).headroom == 1.0
    for bad in ("0", "1.01"):
        with pytest.raises(PlanInputError) as caught:
            request_from_values({**default_values(), "headroom": bad})
        assert caught.value.field == "headroom"
        code, _, err = run("plan", "--headroom", bad)
        assert code == 2 and "--headroom" in err


def test_the_cli_and_the_form_build_the_same_inputs() -> None:
    from gpuplanner.cli import build_parser
    from gpuplanner.commands.plan import inputs_from_args

    flags = {
        "micro-batch": "8",
        "seq-len": "4k",
        "gpus": "2",
        "epochs": "1.5",
        "spot-discount": "0.6",
        "mean-hours-between-interruptions": "20",
        "deadline-hours": "12",
        "budget-usd": "400",
        "headroom": "0.9",
    }
    argv = ["plan", "--model", "gpt2", "--method", "full"]
    for key, text in flags.items():
        argv += [f"--{key}", text]
    cli = inputs_from_args(build_parser().parse_args(argv))
    form = inputs_from_values({**default_values(), "model": "gpt2", "method": "full", **flags})
    assert form == PlanInputs(**{**cli.__dict__, "gpu": form.gpu, "samples": form.samples})
    assert cli.seq_len == 4000 and cli.gpus == 2 and cli.headroom == 0.9


def test_exclusive_inputs_are_refused_naming_the_last_one() -> None:
    with pytest.raises(PlanInputError) as caught:
        PlanInputs(spot_discount=0.5, spot_price=1.0)
    assert caught.value.field == "spot-price" and "not both" in caught.value.message
    with pytest.raises(PlanInputError) as caught:
        PlanInputs(samples=10, tokens=10)
    assert caught.value.field == "tokens"
    with pytest.raises(PlanInputError) as caught:
        PlanInputs(model="gpt2", params=7e9)
    assert caught.value.field == "params"


def test_values_of_the_wrong_type_are_refused_naming_the_input() -> None:
    for field, value in (("seq_len", 2.5), ("seq_len", True), ("price", "3"), ("epochs", float("nan"))):
        with pytest.raises(PlanInputError) as caught:
            PlanInputs(**{field: value})
        assert caught.value.field == field.replace("_", "-")
    with pytest.raises(PlanInputError) as caught:
        PlanInputs(micro_batch=None)  # type: ignore[arg-type]
    assert caught.value.message == "needs a value"


def test_parse_value_reads_suffixes_and_keeps_whole_numbers_whole() -> None:
    assert parse_value("params", "7B") == 7e9
    assert parse_value("seq-len", "2k") == 2000 and isinstance(parse_value("seq-len", "2k"), int)
    assert parse_value("samples", "1,000") == 1000
    for text in ("abc", "", "1e999", "nan", "-inf", "2.5"):
        with pytest.raises(PlanInputError) as caught:
            parse_value("seq-len", text)
        assert caught.value.field == "seq-len"


# ------------------------------------------------------------------------------ fuzz


NUMERIC_FLAGS = tuple(RANGES)
CHOICE_FLAGS = {
    "method": ("full", "lora", "qlora", "dora"),
    "precision": ("fp32", "fp16-mixed", "bf16-mixed", "bf16", "int4"),
    "optimizer": ("adamw", "adamw-fused", "adamw-8bit", "sgd", "adafactor"),
    "grad-checkpointing": ("none", "full", "every-other"),
    "attention": ("eager", "sdpa"),
    "sharding": ("ddp", "zero2", "fsdp"),
    "pricing": ("on-demand", "spot"),
}
HOSTILE = ("", "--", "abc", "nan", "inf", "-inf", "1e308", "1e999", "-1", "0", "1e-320", "9" * 400, "7B", "0x10", "1_0")


def _number_text(flag: str) -> st.SearchStrategy[str]:
    """Mostly values inside the input's range (its bounds included), else hostile or arbitrary texts."""
    rule = RANGES[flag]
    inside = (
        st.integers(int(rule.low), int(rule.high)).map(str)
        if rule.whole
        else st.floats(rule.low, rule.high, exclude_min=not rule.low_included, exclude_max=not rule.high_included).map(
            repr
        )
    )
    return st.one_of(inside, inside, inside, st.sampled_from(HOSTILE), st.floats(allow_nan=True).map(repr))


@st.composite
def plan_argv(draw: st.DrawFn, files: dict[str, Path]) -> list[str]:
    """A `plan` or `compare` command line over every flag (``--memory trace`` aside: it takes seconds)."""
    command = draw(st.sampled_from(["plan", "compare"]))
    argv = [command]
    flags = NUMERIC_FLAGS + tuple(CHOICE_FLAGS) + ("model", "gpu", "lora-targets", "db", "memory")
    flags += ("top",) if command == "compare" else ()
    for flag in dict.fromkeys(draw(st.lists(st.sampled_from(flags), max_size=7))):
        if flag in CHOICE_FLAGS:
            value = draw(st.sampled_from(CHOICE_FLAGS[flag]))
        elif flag == "model":
            which = draw(st.sampled_from(["--model", "--model-config", "--params"]))
            if which == "--model-config":
                argv += [which, draw(st.sampled_from([str(files["config"]), "", str(files["not_json"])]))]
            elif which == "--params":
                argv += [which, draw(_number_text("params"))]
            else:
                argv += [which, draw(st.sampled_from(["gpt2", "llama-3.1-8b", "", "no-such-model"]))]
            continue
        elif flag == "gpu":
            value = draw(st.sampled_from(["T4", "L4", "A100 80GB", "H100 SXM", "RTX 3090", "", "H900"]))
        elif flag == "lora-targets":
            value = draw(st.sampled_from(["q_proj,v_proj", "attention", "all-linear", "", " , "]))
        elif flag == "db":
            value = draw(
                st.sampled_from([str(files["missing_db"]), str(files["folder"]), str(files["not_json"]), "", "--"])
            )
        elif flag == "memory":
            value = draw(st.sampled_from(["formula", "fake"]))
        elif flag == "top":
            value = draw(st.sampled_from(["1", "3", "0", "-2", "1e308", "x", "--"]))
        else:
            value = draw(_number_text(flag))
        argv.append(f"--{flag}={value}")  # "=": a value may start with "-"
    output = draw(st.sampled_from(["--json", "--json", "--csv", "--markdown", "text"]))
    argv += [output] if output != "text" else []
    argv += draw(st.sampled_from([["--no-calibration"], [], ["--list-models"]]))
    return argv


FLAG_NAMED = re.compile(r"--[a-z][a-z-]*[a-z]")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    config = folder / "config.json"
    config.write_text(
        '{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}'
    )
    (folder / "not.json").write_text("{not json")
    return {"config": config, "not_json": folder / "not.json", "missing_db": folder / "none.sqlite", "folder": folder}


@pytest.mark.slow  # 150 CLI runs of plan and compare: 9-26 s, over an unmarked test's budget under load
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_every_plan_and_compare_flag(data: st.DataObject, files: dict[str, Path]) -> None:
    """No exception escapes; bad input gets one line naming a flag and exit 2; good input gives valid JSON
    with finite numbers (or the other formats without error)."""
    argv = data.draw(plan_argv(files))
    code, out, err = run(*argv)
    if code != 0:
        assert code == 2, (argv, err)
        assert out == "", argv
        assert len(err.strip().splitlines()) == 1, (argv, err)
        assert FLAG_NAMED.search(err), (argv, err)
        assert "Traceback" not in err
        return
    assert out, argv
    if "--json" in argv:  # (--list-models --json: a list of names)
        document = strict_json(out)
        assert all(math.isfinite(x) for x in numbers_in(document)), argv


# ------------------------------------------------------------------------------ issue 30, item 5


def test_gpu_colon_count_is_the_same_as_gpu_and_gpus() -> None:
    """``--gpu H100:8`` (SkyPilot's and dstack's spelling) plans and compares as ``--gpu H100 --gpus 8``."""
    assert PlanInputs(gpu="H100:8") == PlanInputs(gpu="H100", gpus=8)
    assert PlanInputs(gpu="H100:8", gpus=8).gpus == 8  # the two forms agree: fine
    code, colon, err = run("plan", "--gpu", "H100:8", "--json")
    assert code == 0, err
    code, spelled, err = run("plan", "--gpu", "H100", "--gpus", "8", "--json")
    assert code == 0, err
    assert strict_json(colon) == strict_json(spelled)
    assert strict_json(colon)["inputs"]["gpus"] == 8
    code, out, err = run("compare", "--gpu", "H100:8", "--json")
    assert code == 0, err
    rows = strict_json(out)["options"] if isinstance(strict_json(out), dict) else strict_json(out)
    assert rows and {row["gpus"] for row in rows} == {8}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("H100:x", "the count after ':' must be a whole number"),
        ("H100:", "expected NAME or NAME:COUNT"),
        (":8", "expected NAME or NAME:COUNT"),
        ("H100:0", "--gpu: the count after ':' is GPUs"),
        ("H100:٨", "the count after ':' must be a whole number"),
    ],
)
def test_a_bad_gpu_count_is_one_line_naming_the_flag(text: str, words: str) -> None:
    code, _, err = run("plan", "--gpu", text)
    assert code == 2
    assert_one_line_naming(err, "--gpu")
    assert words in err


def test_gpu_colon_count_and_a_different_gpus_conflict() -> None:
    code, _, err = run("compare", "--gpu", "H100:8", "--gpus", "4")
    assert code == 2
    assert_one_line_naming(err, "--gpu")
    assert "'H100:8' says 8 GPUs but --gpus says 4" in err


# ------------------------------------------------------------------------------ issue 27, items 11 and 12


@pytest.mark.parametrize(
    ("argv", "flag", "words"),
    [
        (("compare", "--mfu", "1"), "--mfu", "below 1"),
        (("compare", "--price", "\u0661"), "--price", "digits 0-9"),
        (("plan", "--samples", "\u0661\u0660k"), "--samples", "digits 0-9"),
        (("runs", "report", "--month", "\u0662\u0660\u0662\u0666-\u0661\u0661"), "--month", "YYYY-MM"),
        (("catalog", "update", "--spot-advisor-url", "file:///etc/passwd"), "--spot-advisor-url", "http://"),
    ],
)
def test_look_alike_numbers_and_local_files_are_refused(argv: tuple[str, ...], flag: str, words: str) -> None:
    code, out, err = run(*argv)
    assert code == 2, (out, err)
    assert_one_line_naming(err, flag)
    assert words in err
