"""The tests of one ``xdist_group`` run on one worker under ``--dist loadgroup`` (tests/conftest.py), as
the Slurm tests (one cluster per worker) and the window's shared-launcher tests rely on."""

from __future__ import annotations

from pathlib import Path

from tests.inner_pytest import run_inner_pytest

INNER_CONFTEST = "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
INNER_TESTS = """
import os
from pathlib import Path

import pytest

OUT = Path(__file__).with_name("workers")


def record(name):
    with open(OUT, "a") as handle:
        handle.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.xdist_group("cluster")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    record(f"grouped{n}")


@pytest.mark.parametrize("n", range(4))
def test_free(n):
    record(f"free{n}")
"""


def test_a_groups_tests_run_on_one_worker(tmp_path: Path) -> None:
    files = {"pytest.ini": "[pytest]\n", "conftest.py": INNER_CONFTEST, "test_inner.py": INNER_TESTS}
    # only xdist among the plugins (Qt and the rest would make each worker's start-up seconds)
    args = ["-p", "xdist", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v"]
    proc = run_inner_pytest(tmp_path, files, args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = dict(line.split() for line in (tmp_path / "workers").read_text().splitlines())
    assert len(workers) == 8
    assert len({workers[f"grouped{n}"] for n in range(4)}) == 1, workers
    assert "test_grouped[0]@cluster" in proc.stdout  # the id xdist schedules by
    assert "test_free[0]@" not in proc.stdout
