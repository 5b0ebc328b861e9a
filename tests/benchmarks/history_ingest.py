"""History benchmark: sustained GPU-sample ingestion (records/s) and `runs show` on a 1M-sample run.

Run: OMP_NUM_THREADS=1 .venv/bin/python tests/benchmarks/history_ingest.py [--telemetry basic|full] [--samples N]
Targets: ingestion over 50,000 records/s (parsing bytes included); `runs show` under 200 ms.
``--telemetry full`` (the default) writes GPU records as the trainer does on a Hopper GPU with NVLink (SM
and tensor activity, PCIe and NVLink throughput, the maximum clock, a power-cap throttle now and then);
``basic`` writes the fields of the records before those were added, to compare with earlier figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuplanner import cli  # noqa: E402
from gpuplanner.history import Ingestor, open_db  # noqa: E402
from gpuplanner.history.runs import create_run  # noqa: E402
from trainer.protocol import encode, make_record  # noqa: E402

SAMPLES = 1_000_000
GPUS = 8
T0 = 1_763_800_000.0


def _util(seq: int) -> float:
    """Busy (90-99%) with a 30 s dip to 20% every 10 minutes of samples, like a run that evaluates."""
    t = seq // GPUS
    return 20.0 if t % 4800 < 240 else float(90 + seq % 10)


def _full(seq: int) -> dict[str, object]:
    """The fields a Hopper GPU with NVLink adds to each sample."""
    util = _util(seq)
    return {
        "sm_clock_max_mhz": 1980,
        "sm_active_pct": round(util * 0.65, 2),
        "sm_occupancy_pct": round(util * 0.4, 2),
        "tensor_active_pct": round(util * 0.45, 2),
        "pcie_tx_mbps": 0.9 + seq % 7,
        "pcie_rx_mbps": 25.0 + seq % 13,
        "nvlink_tx_mbps": 2048.0 + seq % 100,
        "nvlink_rx_mbps": 1024.0 + seq % 50,
    }


def stream(n: int, full: bool = True) -> bytes:
    lines = [encode(make_record("run_start", 0, T0, config={"model_name": "bench"}, gpus=GPUS))]
    for seq in range(1, n + 1):
        extra = _full(seq) if full else {}
        lines.append(
            encode(
                make_record(
                    "gpu",
                    seq,
                    T0 + seq / GPUS,
                    node="n0",
                    index=seq % GPUS,
                    util_pct=_util(seq),
                    mem_used_bytes=(40 + seq % 40) << 30,
                    mem_total_bytes=80 << 30,
                    power_w=350.0,
                    temp_c=60.0,
                    sm_clock_mhz=1980,
                    throttle_reasons=4 if full and seq % 50 == 0 else 0,
                    simulated=False,
                    **extra,
                )
            )
        )
    lines.append(encode(make_record("run_end", n + 1, T0 + (n + 1) / GPUS, status="finished")))
    return "".join(lines).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--telemetry", choices=("basic", "full"), default="full")
    parser.add_argument("--samples", type=int, default=SAMPLES)
    args = parser.parse_args()
    samples = args.samples
    data = stream(samples, full=args.telemetry == "full")
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "bench.sqlite"
        with open_db(db_path) as db:
            run_id = create_run(db, gpu_count=GPUS, price_usd_per_gpu_hour=4.0)
            ingestor = Ingestor(db, run_id, "bench")
            start, cpu_start = time.perf_counter(), time.process_time()
            for offset in range(0, len(data), 1 << 20):
                ingestor.feed_bytes(data[offset : offset + (1 << 20)])
            stats = ingestor.flush()
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        print(
            f"ingest ({args.telemetry} telemetry): {stats.inserted:,} records in {elapsed:.2f} s = {stats.inserted / elapsed:,.0f} records/s "
            f"(target > 50,000/s; bytes parsed, batches of {ingestor.batch_size}, one transaction each); "
            f"CPU {cpu:.2f} s = {stats.inserted / cpu:,.0f} records per CPU-second"
        )

        cli.COMMAND_MODULES = ("gpuplanner.commands.runs",)
        times = []
        for _ in range(5):
            out = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stdout(out):
                code = cli.main(["runs", "show", str(run_id), "--json", "--db", str(db_path)])
            times.append(time.perf_counter() - start)
            assert code == 0 and f'"gpu_samples": {samples}' in out.getvalue(), out.getvalue()[:500]
        print(
            f"runs show on a run with {samples:,} samples ({args.telemetry} telemetry): best {min(times) * 1000:.1f} ms, "
            f"worst {max(times) * 1000:.1f} ms of 5 (target < 200 ms; includes opening the database)"
        )


if __name__ == "__main__":
    main()
