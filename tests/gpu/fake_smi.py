"""A stand-in for ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` in the dry run.

It answers with the figures of ``tests/fake_nvml.py``'s Hopper GPU (what the fake NVML reports), so the
dry run compares the sampler with a reading that agrees, through the same parsing as on a GPU.
Unknown fields are refused the way nvidia-smi refuses them (exit 2), which exercises the fallback.
"""

from __future__ import annotations

import sys

from tests.fake_nvml import FakeGpu

GPU = FakeGpu.hopper()
ANSWERS = {
    "name": "NVIDIA H100 80GB HBM3 (fake)",
    "driver_version": "0.0 (fake)",
    "memory.used": "10240",  # MiB: the fake NVML's 10 GiB used (v2)
    "memory.total": "81920",
    "utilization.gpu": str(GPU.util),
    "clocks.sm": str(GPU.sm_clock),
    "clocks.max.sm": str(GPU.sm_clock_max),
    "power.draw": "350.50",
    "temperature.gpu": "61",
    "clocks_event_reasons.active": f"0x{GPU.clock_events:016x}",
    "pcie.link.gen.current": "5",
}  # pcie.link.width.current is left out on purpose: refused, as an old nvidia-smi refuses a field


def main(argv: list[str]) -> int:
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None:  # dmon, nvlink ...: not scripted
        print("the fake nvidia-smi answers --query-gpu only", file=sys.stderr)
        return 2
    fields = [f for f in query.split(",") if f]
    unknown = [f for f in fields if f not in ANSWERS]
    if unknown:
        print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    print(", ".join(ANSWERS[f] for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
