"""How long FSDP training waits for a checkpoint: sharded asynchronous DCP saves on 2 gloo ranks.

Trains a 4-block GPT-2 (hidden 512, about 12.8M parameters: 155 MB of fp32 weights and AdamW states)
for 6 steps on 2 CPU processes with ``--fsdp`` and a checkpoint every 2 steps, then prints, per
checkpoint, what training waited for (``blocking_s``: the previous write and staging the shards) and
how long the checkpoint took until its manifest was written (``seconds``), with the median step time
and each rank's parameter bytes after the meta-device initialisation.

Run: ``PYTHONPATH=. .venv/bin/python tests/benchmarks/fsdp_checkpoint.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run, config = Path(tmp) / "run", Path(tmp) / "model.json"
        config.write_text(
            json.dumps(
                {"model_type": "gpt2", "n_layer": args.layers, "n_embd": args.hidden, "n_head": 8}
                | {"n_positions": 64, "vocab_size": 257}
            )
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        cmd += ["--master-port", str(port), "-m", "trainer", "train", "--run-dir", str(run)]
        cmd += ["--model-config", str(config), "--data", str(ROOT / "tests" / "data" / "corpus"), "--seq-len", "32"]
        cmd += ["--micro-batch", "2", "--max-steps", str(args.steps), "--checkpoint-every-steps", "2"]
        cmd += ["--checkpoint-every-minutes", "0", "--log-interval-s", "0", "--gpu-interval-s", "0"]
        cmd += ["--no-events-stdout", "--device", "cpu", "--fsdp", "--precision", "fp32"]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr[-3000:])
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    start = events[0]
    steps = [e["step_time_s"] for e in events if e["kind"] == "step"]
    print(f"parameters {start['params']:,}; each rank holds {start['param_bytes_per_rank'] / 1e6:.1f} MB of them")
    print(f"median step {statistics.median(steps):.3f} s")
    for e in events:
        if e["kind"] == "checkpoint":
            print(
                f"checkpoint step {e['step']}: {e['bytes'] / 1e6:.0f} MB, training waited {e['blocking_s']:.3f} s, "
                f"complete (manifest written) after {e['seconds']:.3f} s"
            )


if __name__ == "__main__":
    main()
