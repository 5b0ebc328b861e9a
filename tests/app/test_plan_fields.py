"""The table of plan fields is the one truth of the planner's inputs: every PlanInputs field has a row, its
ranges and choices are the input layer's, and the CLI's flags are built from it (flag, help, metavar, kind,
group, mutual exclusion). A new input, or a flag or help written out by hand, fails here."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from gpuplanner.app.plan_fields import CLI_GROUPS, FIELD_BY_ATTR, FORM_GROUPS, NOT_INPUTS, PLAN_FIELDS, PlanField
from gpuplanner.cli import build_parser
from gpuplanner.plan.inputs import CHOICES, EXCLUSIVE, INPUT_NAMES, NAMES, RANGES, PlanInputs
from gpuplanner.plan.setup import PlanInputError


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _actions(command: str) -> dict[str, argparse.Action]:
    return {option: a for a in _subparser(command)._actions for option in a.option_strings}


def test_every_plan_input_has_one_row_and_no_row_is_a_stranger() -> None:
    attrs = [row.attr for row in PLAN_FIELDS]
    assert len(attrs) == len(set(attrs)), "an input has two rows"
    assert len({row.flag for row in PLAN_FIELDS}) == len(PLAN_FIELDS)
    assert set(attrs) | set(NOT_INPUTS) == set(INPUT_NAMES)
    assert not set(attrs) & set(NOT_INPUTS)
    assert set(INPUT_NAMES) == {f.name for f in dataclasses.fields(PlanInputs)}


def test_kinds_ranges_and_choices_are_the_input_layers() -> None:
    numbers = {row.flag for row in PLAN_FIELDS if row.kind == "number"}
    choices = {row.flag for row in PLAN_FIELDS if row.kind == "choice"}
    assert numbers == set(RANGES)
    assert choices == set(CHOICES)
    for row in PLAN_FIELDS:
        assert row.range is (RANGES[row.flag] if row.kind == "number" else None)
        assert row.choices == CHOICES.get(row.flag, ()) if row.kind == "choice" else row.choices == ()
    for name in NAMES:  # the free-text inputs are names or paths
        assert FIELD_BY_ATTR[name.replace("-", "_")].kind in ("text", "path")
    assert FIELD_BY_ATTR["tf32"].kind == "flag"
    assert FIELD_BY_ATTR["lora_targets"].kind == "names"


def test_exclusive_groups_come_from_the_input_layer() -> None:
    for group in EXCLUSIVE:
        for flag in group:
            row = next(r for r in PLAN_FIELDS if r.flag == flag)
            assert row.exclusive_with == group
            # one mutually exclusive group sits inside one argument group
            assert {next(r for r in PLAN_FIELDS if r.flag == f).cli_group for f in group} == {row.cli_group}
    assert FIELD_BY_ATTR["epochs"].exclusive_with == ()


def test_every_row_is_described_for_both_front_ends() -> None:
    for row in PLAN_FIELDS:
        assert row.flag == row.attr.replace("_", "-")
        assert row.help.strip() and row.label.strip(), row.flag
        assert row.cli_group in CLI_GROUPS
        assert row.form_group in (*FORM_GROUPS, "")
        assert (row.metavar is None) == (row.kind in ("choice", "flag")), row.flag
    assert [r.form_label for r in PLAN_FIELDS if r.flag in ("micro-batch", "price", "epochs")] == [
        "Micro-batch (sequences/GPU)",
        "Epochs",
        "Price ($/GPU-hour)",
    ]
    assert FIELD_BY_ATTR["tokens"].shown_in_form is False  # the data-size field with its unit set to tokens
    assert PlanField("x", "x", "X", "", "h", "text", "", "").form_label == "X"


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_the_cli_flags_are_the_tables(command: str) -> None:
    actions = _actions(command)
    defaults = PlanInputs()
    for row in PLAN_FIELDS:
        action = actions[row.option]
        assert action.dest == row.attr
        assert action.help == row.argparse_help
        assert action.help % {} == row.help  # argparse shows the table's text, % and all
        assert action.metavar == row.metavar
        assert action.default == getattr(defaults, row.attr)
        if row.kind == "choice":
            assert tuple(action.choices or ()) == CHOICES[row.flag]
        else:
            assert action.choices is None
        if row.kind == "flag":
            assert isinstance(action, argparse._StoreTrueAction)
    groups = {
        a.option_strings[0]: g.title
        for g in _subparser(command)._action_groups
        for a in g._group_actions
        if a.option_strings
    }
    for row in PLAN_FIELDS:
        assert groups[row.option] == (row.cli_group or "options"), row.flag
    mutex = {
        tuple(a.option_strings[0][2:] for a in g._group_actions) for g in _subparser(command)._mutually_exclusive_groups
    }
    assert {tuple(sorted(g)) for g in EXCLUSIVE} <= {tuple(sorted(g)) for g in mutex}


def test_a_number_flag_takes_the_tables_range() -> None:
    parser = _subparser("plan")
    for row in PLAN_FIELDS:
        if row.range is None:
            continue
        beyond = row.range.high * 10 + 1
        with pytest.raises(SystemExit):
            parser.parse_args([row.option, f"{beyond:g}"])
        with pytest.raises(PlanInputError) as refused:
            PlanInputs(**{row.attr: int(beyond) if row.range.whole else beyond})
        assert refused.value.field == row.flag
        assert row.range.describe() in refused.value.message
