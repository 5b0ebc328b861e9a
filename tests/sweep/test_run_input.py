"""`gpuplanner sweep run` with bad input: one clear line each, exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplanner.cli import main
from gpuplanner.history.db import connect
from gpuplanner.sweep.study import storage_path
from tests.sweep.conftest import trainer_flags


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def base(db: Path, space: Path, *extra: str) -> list[str]:
    return [
        "sweep", "run", "--db", str(db), "--host", "local,local", "--space", str(space), "--trials", "8",
        "--max-steps", "90", "--min-steps", "30", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("space_text", "extra", "needle"),
    [
        ("", ["--budget-usd", "5"], "the search space is empty, nothing to search"),
        (
            '[params.lr]\ntype = "float"\nlow = 1\nhigh = 0.1\n',
            ["--budget-usd", "5"],
            "params.lr: low (1) must be below high (0.1)",
        ),
        (
            None,
            ["--budget-usd", "0.5", "--step-seconds", "0.05"],
            # 30 steps (+2) x 1.25 / 0.9 x 0.05 s x $1/s = $2.22 > $0.50
            "--budget-usd: the cap is smaller than one trial's first milestone: budget_usd: a trial's first "
            "milestone (step 30) costs $2.2222, $0.5000 left",
        ),
        (
            None,
            ["--budget-usd", "5", "--min-steps", "90"],
            "--min-steps: the first milestone (90 steps) must come before",
        ),
        (None, ["--budget-usd", "5", "--pruner", "percentile", "--prune-percent", "50"], "--prune-at-step: must be"),
        (None, [], "--budget-usd: a search needs a cap"),
        (None, ["--budget-usd", "5", "--env", "1BAD=x"], "--env: expected KEY=VALUE"),
        (None, ["--budget-usd", "5", "--host", "nowhere"], "--host: no host named 'nowhere'"),
        (None, ["--budget-usd", "5", "--tag", "foo"], "--tag: 'foo' is not key=value"),
        (None, ["--budget-usd", "5", "--tag", "=x"], "--tag: '=x' has an empty key"),
        (None, ["--budget-usd", "5", "--tag", "sweep=mine"], "--tag: sweep= is set by the search"),
        # the study's name is every trial's sweep= tag (issue 27 item 12: each trial failed, the search said "done")
        (None, ["--budget-usd", "5", "--study", "two\nlines"], "--study: 'two\\nlines' cannot be a tag value"),
        (None, ["--budget-usd", "5", "--study", "x" * 201], "cannot be a tag value (value of 'sweep': at most 200"),
        (None, ["--budget-usd", "5", "--study", " padded"], "--study: ' padded' cannot be a tag value: no spaces"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(
    capsys: pytest.CaptureFixture[str],
    db_path: Path,
    space_file: Path,
    model_config: Path,
    tmp_path: Path,
    space_text: str | None,
    extra: list[str],
    needle: str,
) -> None:
    if space_text is not None:
        space_file.write_text(space_text)
    code, out, err = run(capsys, *base(db_path, space_file, *extra), "--", *trainer_flags(model_config, tmp_path))
    assert code == 2 and out == ""
    assert needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    db = connect(db_path)
    try:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
    finally:
        db.close()
    assert not storage_path(db_path).exists()


def test_trainer_flags_the_search_sets_are_refused(
    capsys: pytest.CaptureFixture[str], db_path: Path, space_file: Path, model_config: Path, tmp_path: Path
) -> None:
    flags = [*trainer_flags(model_config, tmp_path), "--max-steps", "5"]
    code, _, err = run(capsys, *base(db_path, space_file, "--budget-usd", "5"), "--", *flags)
    assert code == 2 and "TRAINER FLAGS: --max-steps is set by the search for every trial" in err
    code, _, err = run(capsys, *base(db_path, space_file, "--budget-usd", "5"))
    assert code == 2 and "TRAINER FLAGS: give the trainer's flags after --" in err
