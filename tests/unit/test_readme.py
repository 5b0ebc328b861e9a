"""README.md is the front door: short, its images and links resolve, its tour's commands work.

The user guide's own links and images are checked by `mkdocs build --strict` (in `make test`, and in
tests/packaging/test_fresh_clone.py); the README and CONTRIBUTING.md live outside docs/, so their
relative links are checked here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpuplanner import cli
from tests.conftest import REPO_ROOT

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


def tour_commands() -> list[list[str]]:
    """The `gpuplanner plan|compare ...` lines of the README's console examples."""
    commands = []
    for line in README.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\$ gpuplanner ((?:plan|compare) .*)", line)
        if match:
            commands.append(shlex.split(match.group(1)))
    return commands


def test_the_tour_plans_and_compares_as_the_readme_shows(capsys: pytest.CaptureFixture[str]) -> None:
    commands = tour_commands()
    assert [c[0] for c in commands] == ["plan", "compare"]
    quoted = README.read_text(encoding="utf-8")
    for argv in commands:
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        if argv[0] == "plan":
            # the model line and the verdict the README quotes come from this command
            assert out.splitlines()[0] in quoted
            assert any(line.strip().startswith("total") and "fits" in line for line in out.splitlines())
