"""Hypothesis fuzz of the Slurm batch-script generator (issue 27): no newline, quote or shell character in any
input (run folder, interpreter path, trainer flags, environment values, partition, account, QoS) ever yields
an extra executed line. Each generated script is run by bash in a folder whose name holds the hostile text,
with a stand-in interpreter that records its arguments: every injection attempt would create a marker file;
none may, and the interpreter must receive exactly the arguments it was given."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplanner.launch.slurm_jobs import batch_script
from gpuplanner.launch.slurm_settings import SlurmSettingsError, parse_settings

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
PIECES = ["\n", "\r\n", "\x0b", "'", '"', "`", "$(", ")", ";", "&", "|", "\\", " ", "#", "#SBATCH --wrap=x\n", "a", "-"]


def hostile(marker: str) -> st.SearchStrategy[str]:
    attack = st.sampled_from(
        [f"\ntouch {marker}\n", f"'; touch {marker}; '", f'"; touch {marker}; "', f"$(touch {marker})"]
        + [f"`touch {marker}`", f"\\\ntouch {marker}", f"\r\ntouch {marker} #"]
    )
    piece = st.one_of(st.sampled_from(PIECES), attack, st.text(alphabet="abc$'\"\n", max_size=3))
    return st.lists(piece, min_size=1, max_size=5).map("".join)


@FUZZ
@given(st.data())
def test_no_input_adds_an_executed_line(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        marker = str(root / "INJECTED")
        text = hostile(marker)
        run_dir = root / ("run" + data.draw(text).replace("/", "_").replace("\x00", ""))
        run_dir.mkdir()
        record = root / "argv"
        python = root / ("py" + data.draw(text).replace("/", "_").replace("\x00", ""))
        python.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{record}'\n")
        python.chmod(0o755)
        flags = data.draw(st.lists(text, max_size=3))
        env = {"PYTHONPATH": data.draw(text), "LABEL": data.draw(text)}
        names: dict[str, Any] = {}
        for key in ("partition", "account", "qos"):
            if data.draw(st.booleans()):
                names[key] = data.draw(text)
        try:
            slurm = parse_settings(names)
        except SlurmSettingsError:  # refused with its field named: nothing generated
            slurm = parse_settings({})
        wrapper = str(root / "wrapper.py")
        script = batch_script(
            run_dir=str(run_dir),
            tag="node0",
            python=str(python),
            wrapper=wrapper,
            command=["-m", "trainer", "train", *flags],
            env=env,
            settings=slurm,
        )
        header = script.split("\n")[:2]
        assert header[0] == "#!/bin/bash" and header[1].startswith("# GPU Planner: node0 of ")
        done = subprocess.run(
            ["bash", "-s"],
            input=script,
            text=True,
            capture_output=True,
            cwd=root,
            env={**os.environ, "SLURM_JOB_ID": "7"},
            timeout=60,
        )
        assert not Path(marker).exists(), script
        assert done.returncode == 1  # the stand-in wrote no exit file: exit code 1, as the script says
        argv = record.read_bytes().split(b"\0")[:-1]
        expected = [wrapper, str(run_dir), "node0", "--", str(python), "-m", "trainer", "train", *flags]
        assert [a.decode() for a in argv] == expected
