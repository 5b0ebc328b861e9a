"""Hostile `gpuplanner hosts` command lines (issue 13): whatever the arguments, the command ends with exit
0, 1 or 2, never a traceback; a refusal is one line on stderr; `--json` output is valid JSON without NaN or
Infinity; and a refused command leaves the stored hosts as they were."""

from __future__ import annotations

import io
import json
import string
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuplanner import cli

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
HOSTILE = ["0", "1", "-1", "22", str(2**63), str(10**400), "1e999", "inf", "-inf", "nan", "", "--", "-", "é"]
HOSTILE += ["\u202e", "x" * 300, "a b", "none", "local", "box", "$(touch pwned)", "`id`", ";rm -rf ~", "0x16"]


def call(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # an exit code, never a traceback
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def hosts_list(db: str) -> Any:
    code, out, err = call(["hosts", "list", "--json", "--db", db])
    assert code == 0, err
    return json.loads(out)


@st.composite
def hosts_argv(draw: Any, db: str) -> list[str]:
    good = st.sampled_from(["gpu1", "box", "127.0.0.1", "2222", "1.5", "0", "debug", "2", "0:30:00", "~/.ssh/id"])
    value = st.one_of(good, good, good, st.sampled_from(HOSTILE), st.text(alphabet=string.printable, max_size=8))
    action = draw(st.sampled_from(["list", "add", "set-price", "remove"]))
    argv = ["hosts", action]
    if action == "add":
        argv.append(draw(st.one_of(st.sampled_from(["gpu1", "gpu2", "local"]), value)))
        if draw(st.booleans()):
            argv += ["--hostname", draw(st.one_of(st.just("127.0.0.1"), value))]
        flags = ["--port", "--user", "--identity-file", "--proxy-jump", "--python", "--price"]
        flags += ["--partition", "--gpus-per-node", "--nodes", "--time-limit"]
        for flag in draw(st.lists(st.sampled_from(flags), max_size=4, unique=True)):
            argv += [flag, draw(value)]
        argv += draw(st.sampled_from([[], ["--spot"], ["--slurm"], ["--slurm", "--requeue"]]))
    elif action == "set-price":
        known = st.sampled_from(["box", "local"])
        argv += [draw(st.one_of(known, known, value)), draw(st.one_of(st.sampled_from(["1.5", "0", "none"]), value))]
        argv += draw(st.sampled_from([[], ["--spot"], ["--on-demand"], ["--spot", "--on-demand"]]))
    elif action == "remove":
        argv.append(draw(st.one_of(st.sampled_from(["gpu1", "box", "local"]), value)))
    argv += draw(st.sampled_from([[], ["--json"]]))
    return [*argv, "--db", db]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("hosts") / "h.sqlite"
    code, _, err = call(["hosts", "add", "box", "--hostname", "127.0.0.1", "--price", "2", "--db", str(path)])
    assert code == 0, err
    return str(path)


@FUZZ
@given(data=st.data())
def test_hosts_command_line(db: str, data: st.DataObject, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no user ssh config: `ssh -G` and paramiko read nothing of ours
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("gpuplanner.commands.hosts",))
    argv = data.draw(hosts_argv(db))
    before = hosts_list(db)
    code, out, err = call(argv)
    event(f"{argv[1]} exit {code}")
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err + out, (argv, err)
    if code != 0:
        assert err.count("\n") == 1 and err.startswith("gpuplanner"), (argv, err)
        assert hosts_list(db) == before, argv  # a refusal changes nothing
    elif "--json" in argv:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c} for {argv}"))
    for host in hosts_list(db):
        price = host.get("price_usd_per_gpu_hour")
        assert price is None or 0 <= price < float("inf"), (argv, host)


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_failing_local_probe_says_why_in_one_line(tmp_path: Path, json_flag: list[str]) -> None:
    """`hosts probe local` whose `trainer probe` fails without a word (issue 27 item 11): exit 1 and one line on
    stderr naming the host and what to do, with or without --json."""
    import sys
    from dataclasses import replace

    from gpuplanner.launch.hosts import get_host, update_host

    db = tmp_path / "history.sqlite"
    python = tmp_path / "python"
    # the module check passes (the real interpreter), `-m trainer probe` dies silently
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ]; then exit 3; fi\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    update_host(db, replace(get_host(db, "local"), python=str(python)))
    code, out, err = call(["hosts", "probe", "local", "--db", str(db), *json_flag])
    assert code == 1 and "Traceback" not in err
    assert err.splitlines() == [
        "gpuplanner hosts probe: local: the probe failed without a message (run `python -m trainer probe` on the "
        "host to see why)"
    ]
    if json_flag:
        assert json.loads(out)["ok"] is False
    else:
        assert out == ""
