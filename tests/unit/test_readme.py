"""README.md is the front door: short, its images and links resolve, its console examples are true.

Every `$ gpuplanner ...` example of README.md and docs/*.md is run and compared with the output it
shows (tools/update_doc_examples.py rewrites drifted ones; a block that cannot run says why).

The user guide's own links and images are checked by `mkdocs build --strict` (in `make test`, and in
tests/packaging/test_fresh_clone.py); the README and CONTRIBUTING.md live outside docs/, so their
relative links are checked here.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gpuplanner.cli import build_parser
from tests.conftest import REPO_ROOT
from tools.update_doc_examples import Command, all_examples, compare, mismatch, rewritten, run, update

README = REPO_ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def relative_targets(path: Path) -> list[str]:
    targets = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
            targets.append(target.split("#", 1)[0])
    return targets


def test_the_readme_is_a_front_door_under_200_lines() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "make run" in text and "make test" in text
    assert "![" in text and "docs/screenshots/plan.png" in text


@pytest.mark.parametrize("document", ["README.md", "CONTRIBUTING.md"])
def test_every_relative_link_and_image_exists(document: str) -> None:
    targets = relative_targets(REPO_ROOT / document)
    missing = [t for t in targets if not (REPO_ROOT / t).exists()]
    assert missing == []
    if document == "README.md":
        images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
        assert images and all((REPO_ROOT / image).stat().st_size > 10_000 for image in images)


@pytest.mark.parametrize("document", ["README.md", "docs/index.md"])
def test_the_commands_named_on_the_front_page_are_the_clis(document: str) -> None:
    text = " ".join((REPO_ROOT / document).read_text(encoding="utf-8").split())
    listed = re.search(r"command line:? \(?(`gpuplanner plan`(?:, `[a-z-]+`)+)", text)
    assert listed is not None
    names = re.findall(r"`(?:gpuplanner )?([a-z-]+)`", listed.group(1))
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(names) == sorted(subcommands.choices)


def runnable_commands() -> list[Command]:
    return [command for example in all_examples() if example.run for command in example.commands]


def test_the_tour_and_the_guides_estimates_are_run() -> None:
    """The examples that are checked: the tour's plan and compare, and the guide's sweep estimates."""
    checked = {(c.document, c.argv[0]) for c in runnable_commands()}
    assert {
        ("README.md", "plan"),
        ("README.md", "compare"),
        ("README.md", "runs"),
        ("docs/sweeps.md", "sweep"),
    } <= checked
    for example in all_examples():
        if not example.run:  # a block left out says why, on the line before its fence
            lines = (REPO_ROOT / example.document).read_text(encoding="utf-8").splitlines()
            assert re.fullmatch(r"<!-- example: not run \([^)]+\) -->", lines[example.start - 2]), example.name


@pytest.mark.parametrize("command", runnable_commands(), ids=lambda c: f"{c.document}:{c.line}")
def test_every_console_example_prints_what_it_documents(command: Command, tmp_path: Path) -> None:
    printed = run(command, tmp_path)
    problem = compare(command, printed)
    assert problem is None, f"{command.document}:{command.line} drifted (tools/update_doc_examples.py):\n{problem}"


PRINTED = [
    "Speed    1,554 tokens/s",
    "  weights 4.41 GiB",
    "  total 20.44 GiB",
    "Prices as of 2025-06-15 (530 days old)",
    "Spot $31.18",
]


def test_an_example_matches_exactly_or_with_its_excerpts_cut() -> None:
    assert mismatch(PRINTED, PRINTED) is None
    assert mismatch(["Speed    1,554 tokens/s", "  ...", "Spot $31.18"], PRINTED) is None
    assert mismatch(["Speed    1,554 tokens/s", "...", "  total 20.44 GiB", "..."], PRINTED) is None
    # the age of the prices grows every day: compared as "N days old"
    assert mismatch([*PRINTED[:3], "Prices as of 2025-06-15 (531 days old)", PRINTED[4]], PRINTED) is None
    # one figure off, one line left out without "...", one line the command no longer prints: drift
    assert "627 tokens/s" in str(mismatch(["Speed    627 tokens/s", *PRINTED[1:]], PRINTED))
    assert mismatch(PRINTED[:-1], PRINTED) is not None
    assert mismatch(["Speed    1,554 tokens/s", "...", "  gradients 0.05 GiB", "..."], PRINTED) is not None
    assert mismatch(["...", "Spot $31.18", "Spot $31.18"], PRINTED) is not None


def test_a_header_only_example_compares_the_tables_columns() -> None:
    documented = ("run_id  name  hours", "1       demo  0.009882")
    command = Command("README.md", 1, ("$ gpuplanner runs list",), ("runs", "list"), documented, header_only=True)
    assert compare(command, ["run_id  name  hours"]) is None  # the widths of an empty table differ
    assert "tags" in str(compare(command, ["run_id  name  hours  tags"]))
    assert compare(Command("README.md", 1, ("$ x",), ("runs", "list"), documented), ["run_id  name  hours"])


def test_a_rewrite_takes_the_printed_lines_and_keeps_the_cuts() -> None:
    documented = ("Speed    627 tokens/s", "  ...", "  total 19.00 GiB", "Spot $77.23")
    assert rewritten(documented, PRINTED) == [
        "Speed    1,554 tokens/s",
        "  ...",
        "  total 20.44 GiB",
        PRINTED[3],
        "Spot $31.18",
    ]
    assert rewritten(("old",), PRINTED) == PRINTED


def test_the_tool_rewrites_a_drifted_example_and_leaves_the_rest(tmp_path: Path) -> None:
    document = tmp_path / "page.md"
    stale = [
        "Text before.",
        "",
        "```console",
        "$ gpuplanner sweep size --budget-usd 10000   # the size a budget buys",
        "1 x H100 SXM (bf16-mixed, on-demand): 9.99 GPU-hours (budget_usd binds) = 5.297e+21 FLOPs",
        "  ...",
        "```",
        "",
        "<!-- example: not run (a synopsis) -->",
        "```",
        "$ gpuplanner catalog gpus [--json]",
        "```",
    ]
    document.write_text("\n".join(stale) + "\n", encoding="utf-8")
    reports = update(document, check=True, base=tmp_path / "home")
    assert len(reports) == 1 and "9.99 GPU-hours" in reports[0]
    assert document.read_text(encoding="utf-8").splitlines() == stale  # --check changes nothing
    update(document, check=False, base=tmp_path / "home")
    lines = document.read_text(encoding="utf-8").splitlines()
    assert lines[4] == "1 x H100 SXM (bf16-mixed, on-demand): 3,717.47 GPU-hours (budget_usd binds) = 5.297e+21 FLOPs"
    assert lines[:4] == stale[:4] and lines[5:] == stale[5:]
    assert update(document, check=True, base=tmp_path / "home") == []
