"""The process wrapper caps the job's output (issue 27 item 9): a real wrapper process and a real child
that writes far more than the cap; the file keeps the head and the tail and says what it skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuplanner.launch.payload import WRAPPER

CAP = 4096
CHILD = """
import sys
for i in range(20000):
    sys.stdout.write(f"line {i:05d}\\n")
sys.stdout.flush()
print("a short warning", file=sys.stderr)
sys.exit(3)
"""


def test_output_past_the_cap_keeps_head_and_tail_and_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "GPUPLANNER_LOG_CAP_BYTES": str(CAP)}
    with open(run_dir / "node0.out", "ab") as out, open(run_dir / "node0.err", "ab") as err:
        code = subprocess.run(
            [sys.executable, str(WRAPPER), str(run_dir), "node0", "--", sys.executable, "-c", CHILD],
            stdout=out,
            stderr=err,
            env=env,
            timeout=120,
        ).returncode
    assert code == 0
    assert json.loads((run_dir / "node0.exit").read_text())["exit_code"] == 3
    written = "".join(f"line {i:05d}\n" for i in range(20000)).encode()
    data = (run_dir / "node0.out").read_bytes()
    head, rest = data[: CAP // 2], data[CAP // 2 :]
    assert head == written[: CAP // 2]
    held, _, tail = rest.partition(b" follow]\n")
    assert tail == written[-(CAP - CAP // 2) :]
    assert f"this output reached {CAP // 2} bytes, half its cap of {CAP}".encode() in held
    assert f"[gpuplanner: {len(written) - CAP} bytes of output skipped here; the last {CAP // 2}".encode() in held
    assert len(data) < CAP + 400  # the cap and two lines, never the 240 KB written
    # a stream under the cap is copied as it is
    assert (run_dir / "node0.err").read_bytes() == b"a short warning\n"
