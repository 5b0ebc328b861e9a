"""The README's two commands, the way a newcomer meets them: in a fresh `git clone` of this repository.

What a clone lacks is what git does not carry: untracked or ignored files this checkout happens to
have. So the clone must have everything `make test` reads before pytest (the Makefile's steps in the
right order, the system-packages list and script, every page and image of the user guide), and no file
inside the source folders may be ignored by git. The full `make test` in a clone is what CI runs
(`.ci/run`); here it is the dry run plus each piece, which takes a few seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# Folders whose files the app, its tests or its docs read: nothing in them may be hidden from git.
SOURCE_FOLDERS = ("gpuplanner", "trainer", "resources", "tests", "docs", "tools", "packaging", ".ci")
GENERATED = ("__pycache__", ".egg-info", ".pyc")


def git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if shutil.which("git") is None:
        pytest.fail("git is missing: a newcomer clones the repository with it (apt-get install git)")
    head = git("rev-parse", "HEAD").strip()
    target = tmp_path_factory.mktemp("fresh") / "gpuplanner"
    git("clone", "--quiet", str(REPO_ROOT), str(target))
    git("checkout", "--quiet", "--detach", head, cwd=target)
    yield target


def env_without_make_flags() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "GPUPLANNER_INSTALL"):
        env.pop(name, None)
    return env


def test_make_test_checks_system_packages_lint_types_and_docs_before_pytest(clone: Path) -> None:
    result = subprocess.run(
        ["make", "-n", "test"], cwd=clone, env=env_without_make_flags(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()

    def first(fragment: str) -> int:
        found = [i for i, line in enumerate(lines) if fragment in line]
        assert found, f"`make -n test` never runs {fragment!r}:\n{result.stdout}"
        return found[0]

    order = [
        first("tools/ensure_system_packages.sh --for test"),
        first("pip install -e"),
        first("ruff check ."),
        first("ruff format --check ."),
        first("lint-imports"),
        first("-m mypy"),
        first("mkdocs build --strict"),
        first("-m pytest"),
    ]
    assert order == sorted(order), result.stdout
    assert len([line for line in lines if "-m pytest" in line]) == 1


def test_the_clone_has_the_system_packages_list_and_script(clone: Path) -> None:
    result = subprocess.run(
        ["bash", "tools/ensure_system_packages.sh", "--for", "test", "--check-only"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_the_user_guide_builds_strictly_from_the_clone(clone: Path, tmp_path: Path) -> None:
    """Every page, link and image the guide uses is committed (a missing screenshot fails the build)."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "screenshots" / "plan.png").is_file()


def test_nothing_the_sources_need_is_hidden_from_git() -> None:
    """An ignored file inside a source folder would exist here and be missing from every clone."""
    ignored = git("ls-files", "--others", "--ignored", "--exclude-standard", "--", *SOURCE_FOLDERS).splitlines()
    hidden = [path for path in ignored if not any(part in path for part in GENERATED)]
    assert hidden == []
