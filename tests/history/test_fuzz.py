"""Property-based fuzzing (Hypothesis, bounded for CI) of the telemetry parser, ingest and the `runs` and
`catalog` command lines (issue 13): no exception escapes, bad input is one line naming what is wrong,
good input gives finite numbers and valid JSON."""

from __future__ import annotations

import io
import json
import math
import string
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuplanner import cli
from gpuplanner.history import jsonsafe, open_db
from gpuplanner.history.analytics import summarize
from gpuplanner.history.ingest import Ingestor
from gpuplanner.history.runs import create_run
from tests.history.streams import StreamBuilder
from trainer.protocol import (
    COUNT_FIELDS,
    FINITE_FIELDS,
    GPU_FIELDS,
    INT64_MAX,
    KINDS,
    NONNEGATIVE_FIELDS,
    PERCENT_FIELDS,
    STEP_FIELDS,
    STORED_NUMBERS,
    StreamParser,
    check_values,
    validate,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2**63 - 1, 2**63, -(2**63), 10**30, 1e30, 1e300, -1e300, 0.5, -0.0, 100.0, 100.5]),
    st.floats(allow_nan=True, allow_infinity=True),
)
VALUES = st.one_of(
    NUMBERS,
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
FIELDS = sorted({*STEP_FIELDS, *GPU_FIELDS, "eval_loss", "status", "path", "config", "gpus", "resumed_from_step"})


@st.composite
def records(draw: Any) -> dict[str, Any]:
    """A record: mostly a sane envelope, with fields of any kind and value."""
    record: dict[str, Any] = {
        "v": draw(st.sampled_from([1, 1, 1, 2, "1", None])),
        "seq": draw(st.one_of(st.integers(min_value=0, max_value=50), NUMBERS)),
        "t": draw(st.one_of(st.floats(min_value=1.7e9, max_value=1.8e9), NUMBERS)),
        "kind": draw(st.sampled_from([*sorted(KINDS), "bogus", 5])),
    }
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=8)):
        record[name] = draw(VALUES)
    if record["kind"] == "run_start" and draw(st.booleans()):
        record["config"] = draw(st.dictionaries(st.sampled_from(["model_name", "price_per_gpu_hour", "x"]), VALUES))
    return record


def line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, allow_nan=True) + "\n").encode()


def assert_sane(record: dict[str, Any]) -> None:
    """What a reader may rely on in any record the parser returned."""
    assert 0 <= record["seq"] <= INT64_MAX and math.isfinite(record["t"])
    for name, _ in STORED_NUMBERS[record["kind"]]:
        value = record.get(name)
        if value is None:
            continue
        assert type(value) in (int, float) and math.isfinite(value)
        if name in COUNT_FIELDS:
            assert 0 <= value <= INT64_MAX and float(value).is_integer()
        if name in NONNEGATIVE_FIELDS:
            assert value >= 0
        if name in PERCENT_FIELDS:
            assert 0 <= value <= 100
        assert name in FINITE_FIELDS or value >= 0


@FUZZ
@given(st.lists(st.one_of(records().map(line), st.binary(max_size=40)), max_size=12), st.integers(1, 64))
def test_parser_never_raises_and_passes_only_sane_records(chunks: list[bytes], piece: int) -> None:
    data = b"".join(chunks)
    parser = StreamParser()
    parsed = []
    for start in range(0, len(data), piece):
        parsed.extend(parser.feed(data[start : start + piece]))
    whole = StreamParser()
    assert [r["seq"] for r in whole.feed(data)] == [r["seq"] for r in parsed]  # chunking never matters
    assert parser.offset + parser.pending_bytes == len(data)
    assert len(parsed) + parser.malformed + parser.unknown_kind <= data.count(b"\n")
    for record in parsed:
        assert_sane(record)
        check_values(validate(record))


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = open_db(tmp_path_factory.mktemp("fuzz") / "h.sqlite")
    yield db
    db.close()


@FUZZ
@given(st.lists(records(), max_size=15), st.integers(1, 5))
@pytest.mark.slow  # over the 5 s budget of an unmarked test on a quiet machine (issue 25)
def test_ingest_never_raises_and_summaries_stay_valid(fuzz_db: Any, batch: list[dict[str, Any]], size: int) -> None:
    good = StreamBuilder()
    good.add("run_start", 0, config={"model_name": "m"}, gpus=1)
    good.gpu(1, 0, 50.0)
    good.step(2, 1, samples_total=4, tokens_total=64)
    for i, record in enumerate(batch):  # interleave the hostile records with a valid stream
        if isinstance(record.get("seq"), int) and not isinstance(record["seq"], bool) and 0 <= record["seq"] < 50:
            record["seq"] = 100 + i
    data = good.data() + b"".join(line(r) for r in batch)
    run_id = create_run(fuzz_db, gpu_count=1, price_usd_per_gpu_hour=1.0)
    ingestor = Ingestor(fuzz_db, run_id, "fuzz", batch_size=size)
    ingestor.feed_bytes(data)
    stats = ingestor.flush()
    assert stats.inserted >= 3 and stats.offset == len(data)
    again = Ingestor(fuzz_db, run_id, "fuzz-again", batch_size=size)  # a second read: nothing new, no error
    again.feed_bytes(data)
    assert again.flush().inserted == 0
    direct = create_run(fuzz_db)  # records handed over as objects: checked the same way
    from gpuplanner.history.ingest import ingest_records

    ingest_records(fuzz_db, direct, good.records + batch)
    for rid in (run_id, direct):
        document = summarize(fuzz_db, rid).as_dict()
        text = jsonsafe.dumps(document)
        json.loads(text, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))
        for key in ("hours", "gpu_hours", "wall_hours", "avg_util_pct", "cost_usd", "tokens_per_s"):
            value = document[key]
            assert value is None or math.isfinite(value), (key, value)


# -- the command lines ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    db_file = root / "h.sqlite"
    events = root / "run" / "events.jsonl"
    events.parent.mkdir()
    s = StreamBuilder()
    s.add("run_start", 0, config={"model_name": "m", "price_per_gpu_hour": 2.0}, gpus=1)
    for i in range(10):
        s.gpu(i, 0, 70.0)
        s.step(i + 0.5, i + 1, samples_total=i + 1, tokens_total=100 * (i + 1))
    s.add("run_end", 11, status="finished")
    events.write_bytes(s.data() + b'{"v":1,"seq":99,"t":1e300,"kind":"gpu"}\n')
    with open_db(db_file) as db:
        create_run(db)
    (root / "text.txt").write_text("not a database\n" * 50)
    (root / "out").mkdir()
    vms = root / "vms.csv"
    vms.write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,GpuInfo\n"
        "p4d.24xlarge,A100,8,96,1152,32.77,1e999,us-east-1,\n"
        "x,H100,1e999,1,1,nan,-1,r,\"{'Gpus': [{'Name': 'H100', 'MemoryInfo': {'SizeInMiB': 1e999}}]}\"\n"
    )
    return {
        "db": str(db_file),
        "events": str(events),
        "run_dir": str(events.parent),
        "text": str(root / "text.txt"),
        "dir": str(root),
        "missing": str(root / "missing" / "x"),
        "vms": str(vms),
    }


HOSTILE = [
    "0",
    "1",
    "2",
    "-1",
    str(2**63),
    str(2**63 - 1),
    str(10**400),
    "1e999",
    "inf",
    "-inf",
    "nan",
    "NaN",
    "",
    "--",
    "-",
    "é",
    "\u202e",
    "x" * 300,
    "0x10",
    "1_000",
]
FILES = ["db", "events", "run_dir", "text", "dir", "missing", "vms"]


@st.composite
def runs_argv(draw: Any, files: dict[str, str]) -> list[str]:
    value = st.one_of(st.sampled_from(HOSTILE), st.sampled_from([files[k] for k in FILES]), st.text(max_size=6))
    action = draw(st.sampled_from(["list", "show", "compare", "delete", "import", "export", "compact", "measured"]))
    argv = ["runs", action]
    positional = {
        "show": 1,
        "compare": draw(st.integers(1, 3)),
        "delete": 1,
        "export": 1,
        "import": 1,
    }.get(action, 0)
    for _ in range(positional):
        argv.append(draw(st.one_of(st.sampled_from(["1", "2"]), value)) if action != "import" else draw(value))
    flags = {
        "list": ["--limit", "--status"],
        "show": ["--low-util-minutes"],
        "import": ["--price", "--gpus", "--plan", "--name", "--model", "--host", "--gpu-type"],
        "export": ["--out", "--format"],
        "compact": ["--older-than-days"],
        "measured": ["--gpu", "--model"],
    }.get(action, [])
    out_targets = st.one_of(  # only ever inside the test's folder (or /dev/full): never the fixtures, never cwd
        st.sampled_from([files["dir"], files["missing"], "/dev/full", files["run_dir"]]),
        st.builds(lambda name: str(Path(files["dir"]) / "out" / name), st.sampled_from(["x.json", "é.csv", "a b"])),
    )
    for flag in draw(st.lists(st.sampled_from(flags), max_size=3, unique=True)) if flags else []:
        if flag == "--out":
            argv += [flag, draw(out_targets)]
        else:
            argv += [flag, draw(value if flag != "--format" else st.sampled_from(["json", "csv", "markdown", "xml"]))]
    fmt = draw(st.sampled_from([[], ["--json"], ["--csv"], ["--markdown"]])) if action != "export" else []
    argv += fmt
    argv += ["--db", draw(st.sampled_from([files["db"], files["db"], files["text"], files["dir"]]))]
    return argv


def call(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # only ever an exit code, never a traceback
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def check_outcome(argv: list[str], code: int, out: str, err: str) -> None:
    event(f"{argv[1]} exit {code}")
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    if code != 0:
        assert err.count("\n") == 1 and err.startswith("gpuplanner"), (argv, err)
    elif "--json" in argv or (argv[:2] == ["runs", "export"] and "--format" not in argv and "--out" not in argv):
        json.loads(out, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c} for {argv}"))


@FUZZ
@given(data=st.data())
def test_runs_command_line(cli_files: dict[str, str], data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.runs",))
    argv = data.draw(runs_argv(cli_files))
    check_outcome(argv, *call(argv))


@FUZZ
@given(data=st.data())
def test_catalog_command_line(
    cli_files: dict[str, str], data: st.DataObject, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: Any
) -> None:
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.catalog",))
    monkeypatch.setenv("GPUPLANNER_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    value = st.one_of(st.sampled_from(HOSTILE), st.text(alphabet=string.printable, max_size=8))
    action = data.draw(st.sampled_from(["gpus", "prices", "import-skypilot"]))
    argv = ["catalog", action]
    if action == "prices" and data.draw(st.booleans()):
        argv += ["--gpu", data.draw(st.one_of(value, st.sampled_from(["h100", "A100", "NVIDIA A10G"])))]
    if action == "import-skypilot":
        argv.append(data.draw(st.sampled_from([cli_files[k] for k in FILES])))
        if data.draw(st.integers(0, 4)):
            argv += ["--provider", data.draw(st.one_of(value, st.just("aws")))]
    argv += data.draw(st.sampled_from([[], ["--json"], ["--csv"]] if action == "prices" else [[], ["--json"]]))
    check_outcome(argv, *call(argv))
