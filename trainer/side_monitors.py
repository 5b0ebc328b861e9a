"""What watches a run beside the loop: one GPU sampler per node (NVML, or a labelled simulation on the
CPU) writing ``gpu`` records, and the cloud preemption-notice watcher that requests the stop."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from . import dist
from .config import TrainConfig
from .nvml_sampler import Activity, GpuSampler, open_source
from .preemption import PREEMPTED, MetadataWatcher, StopFlag
from .telemetry import Telemetry, node_rank_from_env, node_telemetry


@contextlib.contextmanager
def side_monitors(
    c: TrainConfig,
    info: dist.DistInfo,
    device: torch.device,
    run_dir: Path,
    tele: Telemetry,
    activity: Activity,
    flag: StopFlag,
    sample: bool = True,
) -> Iterator[None]:
    """Run the sampler (unless ``sample`` is false: ``trainer bench``) and the notice watcher for the
    block; on leaving, take a last sample and stop both."""
    sampler = node_tele = None
    if info.local_rank == 0 and sample and c.gpu_interval_s > 0:  # one sampler per node
        indices = None if device.type != "cuda" else list(range(max(1, info.local_world)))
        source = open_source(indices, activity, force_simulated=device.type != "cuda")
        if not info.is_main:  # another node's GPUs: its own events file (see telemetry.node_telemetry)
            node_tele = node_telemetry(run_dir, node_rank_from_env(info.rank, info.local_world))
        sampler = GpuSampler(source, (node_tele or tele).emit, c.gpu_interval_s).start()
    watcher = None
    if c.preemption_url or c.preemption_provider != "auto":
        watcher = MetadataWatcher(
            c.preemption_url,
            c.preemption_provider,
            c.preemption_poll_s,
            lambda notice: flag.request(PREEMPTED, notice),
        ).start()
    try:
        yield
    finally:
        if watcher is not None:
            watcher.stop()
        if sampler is not None:
            sampler.sample_once()
            sampler.stop()
        if node_tele is not None:
            node_tele.close()
