"""The monitor of a user's own command: ``python -m trainer exec --run-dir DIR [options] -- COMMAND...``.

Standard library only (plus nvidia-ml-py when installed), so it runs on any host with a Python. It
starts COMMAND in its process group (the one the launcher's wrapper leads, else one of its own) and
writes the same ``events.jsonl`` as the bundled trainer:

- ``run_start`` (the command, the GPUs it uses, the price), ``resumed`` when an earlier attempt of the
  run left its totals in the file;
- ``gpu`` samples of the GPUs the job uses: ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs, mapped to NVML
  devices) or else the first ``--gpus`` devices; without NVML the clearly labelled simulated source,
  driven by the job's CPU time and memory (``"simulated": true``);
- ``step`` and ``eval`` records the command's own code wrote with :mod:`gpuplanner_telemetry` into the
  file ``$GPUPLANNER_TELEMETRY_FILE`` (merged here with the run's spend, GPU-hours and elapsed time);
- ``run_end`` with the command's exit code and the totals.

It enforces ``--budget-usd`` and ``--max-gpu-hours`` (spend = price x GPUs x time since this process
started plus earlier attempts' spend: :mod:`trainer.spend`, the trainer's clock) as hard caps. The clock is
linear, so a cap's moment is known from the start and a thread sleeps until it: SIGTERM to the job's group
once the cap leaves less than the grace period (``--grace-s``, at most the cap's last tenth,
:data:`GRACE_SHARE`), SIGKILL at the cap. Past the cap only the monitor's reaction is recorded (waking, the
kill, reaping the job, ``run_end``, whose ``stop`` gives the totals at SIGTERM and SIGKILL). Any other stop
(a preemption notice, :class:`trainer.preemption.MetadataWatcher`, or a stop signal sent to the monitor) is
passed on as SIGTERM, with SIGKILL after ``--grace-s`` or at the cap, whichever is first. The job's exit
code is the monitor's (75: checkpointed, resume me), except after a budget stop, which is a finished run
(0), as for the bundled trainer.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import clock, early_signals, protocol
from .nvml_sampler import Activity, NvmlSource, NvmlUnavailable, SimulatedSource
from .preemption import DEFAULT_URLS, MetadataWatcher
from .spend import SpendClock, SpendTotals, cap_reached
from .tb_scalars import TensorBoardScalars
from .telemetry import NODE_SEQ_STRIDE, Telemetry, node_events_file, warn
from .user_records import UserRecords

EXIT_OK, EXIT_CONFIG, EXIT_RESUME = 0, 2, 75
USER_FILE = "user_telemetry.jsonl"
# Exit statuses of a job that died of a stop signal (SIGTERM, SIGINT, SIGUSR1): resumable, like 75.
SIGNAL_EXITS = (143, 130, 138)
USER_PATH = Path(__file__).resolve().parent / "user_path"  # holds gpuplanner_telemetry.py
STARTUP_PATH = USER_PATH / "startup"  # the start-up hook (sitecustomize.py): callbacks without edits
AUTO_HOOKS_ENV = "GPUPLANNER_AUTO_HOOKS"  # "0": no start-up hook
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
WRAPPER_PGID_ENV = "GPUPLANNER_WRAPPER_PGID"  # set by the launcher's wrapper for its child
GRACE_SHARE = 0.1  # a cap's grace period is at most this share of the cap's time (from this attempt's start)
POLL_S = 0.1  # how often the job's records are merged (the stops' moments are slept until exactly, on a thread)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", required=True, help="the run's folder (events.jsonl is written here)")
    p.add_argument(
        "--price-per-gpu-hour", type=float, help="US dollars per GPU-hour (none: the spend is unknown, never $0)"
    )
    p.add_argument("--gpus", type=int, default=1, help="GPUs the job uses (priced and sampled)")
    p.add_argument("--budget-usd", type=float, help="stop the job (SIGTERM, then SIGKILL) at this spend")
    p.add_argument("--max-gpu-hours", type=float, help="stop the job at this many GPU-hours")
    p.add_argument(
        "--grace-s", type=float, default=30.0, help="seconds from SIGTERM to SIGKILL (a cap: SIGKILL at the cap)"
    )
    p.add_argument("--gpu-interval-s", type=float, default=2.0, help="seconds between GPU samples (0: none)")
    p.add_argument("--cwd", help="working directory of the command (default: the run dir)")
    p.add_argument("--nodes", type=int, default=1, help="nodes of the job (spend counts GPUs x nodes)")
    p.add_argument(
        "--node-rank",
        type=int,
        default=_env_int("SLURM_NODEID", 0),
        help="this node's rank (default: $SLURM_NODEID, else 0); nodes other than 0 only sample their GPUs",
    )
    p.add_argument(
        "--node-name", help="the node's name in the GPU samples (default: $SLURMD_NODENAME, else the host name)"
    )
    p.add_argument("--simulate-gpu", action="store_true", help="the simulated GPU source even if NVML works")
    p.add_argument(
        "--preemption-provider",
        choices=("none", "aws", "gcp", "azure", "auto"),
        default=os.environ.get("GPUPLANNER_PREEMPTION_PROVIDER", "none"),
        help="watch this cloud's metadata service for a preemption notice ($GPUPLANNER_PREEMPTION_PROVIDER)",
    )
    p.add_argument(
        "--preemption-url",
        default=os.environ.get("GPUPLANNER_PREEMPTION_URL") or None,
        help="the metadata URL to watch (default: the provider's; $GPUPLANNER_PREEMPTION_URL)",
    )
    p.add_argument("--preemption-interval-s", type=float, default=5.0, help="seconds between metadata polls")
    p.add_argument(
        "--no-auto-hooks",
        action="store_true",
        help="no start-up hook on the job's PYTHONPATH (it adds GPU Planner's callback to HF and Lightning"
        " Trainers; also off with $GPUPLANNER_AUTO_HOOKS=0)",
    )
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")


# -- which GPUs --------------------------------------------------------------------------------------------
def visible_devices(spec: str | None, nvml: Any, gpus: int) -> list[int]:
    """NVML indices of the devices a job sees: ``CUDA_VISIBLE_DEVICES`` (indices, ``GPU-`` UUIDs or
    unique UUID prefixes, as CUDA reads it: up to the first invalid entry), else the first ``gpus``."""
    count = nvml.nvmlDeviceGetCount()
    if spec is None:
        return list(range(min(max(1, gpus), count)))
    uuids: dict[int, str] | None = None
    out: list[int] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            break
        if item.lstrip("-").isdigit():
            index = int(item)
            if not 0 <= index < count:
                break
        else:
            if uuids is None:
                uuids = {}
                for i in range(count):
                    raw = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))
                    uuids[i] = raw.decode() if isinstance(raw, bytes) else str(raw)
            wanted = item if item.startswith(("GPU-", "MIG-")) else "GPU-" + item
            matches = [i for i, u in uuids.items() if u.startswith(wanted)]
            if len(matches) != 1:
                break
            index = matches[0]
        if index in out:
            break
        out.append(index)
    return out


def open_gpu_source(
    gpus: int, activity: Activity, force_simulated: bool, node: str | None = None
) -> NvmlSource | SimulatedSource:
    if not force_simulated:
        try:
            import pynvml  # noqa: F401 (optional)

            nv = sys.modules["pynvml"]
            try:
                nv.nvmlInit()
            except Exception as exc:  # no driver or library (a CPU host): the simulated source, quietly
                raise NvmlUnavailable(str(exc)) from exc
            try:
                indices = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), nv, gpus)
            finally:
                nv.nvmlShutdown()
            if indices:
                return NvmlSource(indices, nvml=nv, node=node)
        except (ImportError, NvmlUnavailable):
            pass
        except Exception as exc:  # NVML present but failing: say so once, go on simulated
            warn(f"NVML failed ({exc}); GPU samples are simulated")
    return SimulatedSource(activity, node=node)


# -- the job's process group ----------------------------------------------------------------------------------
def group_usage(pgid: int) -> tuple[float, int]:
    """CPU seconds and resident bytes of a process group but this process and its parent (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    cpu, rss = 0.0, 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0, 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) != pgid or int(entry) in (os.getpid(), os.getppid()):  # field 5 of stat: the process group
            continue
        cpu += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        rss += int(fields[21]) * page
    return cpu, rss


def group_members(pgid: int) -> list[int] | None:
    """Pids of a process group (Linux ``/proc``); None where there is no ``/proc``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[2]) == pgid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def signal_job(sig: int, child_pid: int) -> None:
    """Signal the job: the whole process group (which the monitor and the launcher's wrapper share with
    it) for SIGTERM, whose handler here ignores it; every other member of the group for SIGKILL."""
    pgid = os.getpgid(0)
    try:
        if sig != signal.SIGKILL:
            os.killpg(pgid, sig)
            return
        members = group_members(pgid)
        keep = {os.getpid(), os.getppid()}
        for pid in members if members is not None else [child_pid]:
            if pid not in keep:
                os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def previous_end(path: Path) -> dict[str, Any] | None:
    """The ``run_end`` of the last attempt that ended in this run dir, or None."""
    if not path.exists():
        return None
    parser = protocol.StreamParser()
    last = None
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            for rec in parser.feed(chunk):
                if rec["kind"] == "run_end" and isinstance(rec.get("totals"), dict):
                    last = rec
    return last


def _numbers(doc: Any) -> dict[str, float]:
    doc = doc if isinstance(doc, dict) else {}
    return {k: float(v) for k, v in doc.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class Monitor:
    def __init__(self, args: argparse.Namespace, command: list[str]) -> None:
        self.args = args
        self.command = command
        self.run_dir = Path(args.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        marked = clock.started()
        self.started_wall, self.started_mono = marked if marked else (time.time(), time.monotonic())
        self.main = args.node_rank == 0  # node 0 reports the run; the others their GPU samples
        if not self.main:
            # Its own lane of seq numbers, in a file of its own (the nodes may share the run directory).
            os.environ["TRAINER_SEQ_START"] = str(args.node_rank * NODE_SEQ_STRIDE)
        self.events = self.run_dir / node_events_file(args.node_rank)
        ended = previous_end(self.events) if self.main else None
        self.before = _numbers(ended["totals"]) if ended else {}
        gpus = max(1, args.gpus) * max(1, args.nodes)  # spend counts GPUs x nodes
        self.spend_clock = SpendClock(args.price_per_gpu_hour, gpus, self.started_mono)
        if self.before:
            b = self.before
            self.spend_clock.carry_over(b.get("elapsed_s", 0.0), b.get("gpu_hours", 0.0), b.get("spend_usd"))
        self.tele = Telemetry(self.events)
        self.user = UserRecords(self.run_dir / USER_FILE)
        # An earlier attempt's records were merged up to where its run_end says (or, if it never
        # wrote one, up to the end of the file as it is now): never twice.
        merged = ended.get("user_offset") if ended else None
        if isinstance(merged, int) and merged >= 0:
            self.user.offset = merged
        elif self.user.path.exists():
            self.user.offset = self.user.path.stat().st_size
        self.lock = threading.Lock()
        self.stop_reason: str | None = None  # "budget_stop" | "preempted"
        self.stop_detail = ""
        self.term_sent_at: float | None = None
        self.killed = False
        self.stop_record: dict[str, Any] = {}  # the totals at SIGTERM and at SIGKILL (``run_end``'s ``stop``)
        self.wake = threading.Event()  # the caps' thread looks again (a stop was requested, the job ended)
        self.job_ended = False
        self.caps_thread = threading.Thread(target=self._watch_caps, name="caps", daemon=True)
        self.activity = Activity()
        self.totals = {"steps": 0, "tokens_total": 0, "samples_total": 0}
        self.child: subprocess.Popen[bytes] | None = None
        self.shared_group = False
        self.user_steps = 0  # step records the job's own code wrote (then TensorBoard's are not read)
        self.tb: TensorBoardScalars | None = None

    # -- spend -----------------------------------------------------------------------------------
    def clock_totals(self, at: float | None = None) -> SpendTotals:
        """Elapsed time, GPU-hours and spend (now, or at monotonic ``at``): the spend clock (:mod:`trainer.spend`)."""
        return self.spend_clock.totals(at)

    # -- stopping the job: SIGKILL at the cap, SIGTERM a grace period before it (node 0 enforces the caps) --------
    @property
    def cap_at(self) -> float:
        a = self.args
        return self.spend_clock.cap_moment(a.budget_usd, a.max_gpu_hours) if self.main else math.inf

    @property
    def cap_grace_s(self) -> float:
        return min(self.args.grace_s, GRACE_SHARE * max(0.0, self.cap_at - self.spend_clock.started_mono))

    def request_stop(self, reason: str, detail: str, send: bool = True) -> None:
        """SIGTERM to the job's group (once); SIGKILL follows after the grace period or at the cap."""
        with self.lock:
            first = self.term_sent_at is None
            if self.stop_reason is None or (reason == "budget_stop" and self.stop_reason != "budget_stop"):
                self.stop_reason, self.stop_detail = reason, detail
            if first:
                self.term_sent_at = time.monotonic()
                self.stop_record["term"] = _rounded(self.clock_totals(self.term_sent_at))
                self.wake.set()  # the SIGKILL's moment changed
        if first:
            if reason == "preempted":
                self.tele.emit("preempted", reason=detail, step=self.totals["steps"] or None)
            warn(f"stopping the command: {detail}")
            if send and self.child is not None:
                signal_job(signal.SIGTERM, self.child.pid)

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.term_sent_at is not None:  # our own SIGTERM to the group, or a stop while stopping
            return
        # A stop to the wrapper's group reached the job too (only the grace period starts); one to us is passed on
        threading.Thread(
            target=self.request_stop, args=("preempted", f"signal {name}", not self.shared_group), daemon=True
        ).start()

    def next_moment(self) -> float:
        """When :meth:`_check_limits` has something to do next: the cap's SIGTERM, else the SIGKILL."""
        if self.term_sent_at is None:
            return self.cap_at - self.cap_grace_s
        if self.killed:
            return math.inf
        return min(self.term_sent_at + self.args.grace_s, self.cap_at)

    def _watch_caps(self) -> None:
        """The stops' moments on a thread of their own, slept until exactly: merging a large batch of records,
        sampling the GPUs or a slow import on the main loop never delays a SIGTERM or a SIGKILL."""
        while not self.job_ended:
            self.wake.wait(max(0.0, min(3600.0, self.next_moment() - time.monotonic())))
            self.wake.clear()
            if not self.job_ended:
                self._check_limits()

    def _check_limits(self) -> None:
        now = time.monotonic()
        if self.term_sent_at is not None:
            if not self.killed and now >= self.next_moment():
                self.killed = True
                self.stop_record["kill"] = _rounded(self.clock_totals(now))
                by = "by its cap" if now >= self.cap_at else f"{self.args.grace_s:g} s after SIGTERM"
                warn(f"the command did not end {by}: SIGKILL")
                if self.child is not None:
                    signal_job(signal.SIGKILL, self.child.pid)
            return
        if now < self.cap_at - self.cap_grace_s:  # node 0 only: the others' cap_at is infinite
            return
        # What the cap leaves would not pay for the grace period: SIGTERM now, SIGKILL at the cap.
        a, left = self.args, max(0.0, self.cap_at - now)
        ahead = str(cap_reached(self.clock_totals(self.cap_at), a.budget_usd, a.max_gpu_hours))
        ahead = ahead.replace("reached", "reaches")
        ahead += f" in {left:.3g} s, within the {self.cap_grace_s:.3g} s grace period: SIGKILL then"
        self.request_stop("budget_stop", cap_reached(self.clock_totals(now), a.budget_usd, a.max_gpu_hours) or ahead)

    # -- records ---------------------------------------------------------------------------------------
    def _merge_user(self) -> None:
        if not self.main:  # rank 0 of the job writes the step records, on node 0
            return
        for rec in self.user.poll():
            kind = rec.pop("kind")
            for key in ("v", "seq", "t_mono"):
                rec.pop(key, None)
            at = rec.pop("t", None)
            at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None
            if kind == "step":
                self.user_steps += 1
                rec.update(_rounded(self.clock_totals()))
                for key in ("tokens_total", "samples_total"):
                    if isinstance(rec.get(key), int):
                        self.totals[key] = rec[key]
                if isinstance(rec.get("step"), int):
                    self.totals["steps"] = rec["step"]
            try:
                record = protocol.make_record(kind, 0, at or time.time(), **rec)
                protocol.check_values(record)
            except protocol.RecordError as exc:
                self.user.bad += 1
                warn(f"a {kind} record from the command was skipped: {exc}")
                continue
            self.tele.emit(kind, at=at, **rec)

    def _merge_tensorboard(self, final: bool = False) -> None:
        """Step records from the TensorBoard scalars the job writes (loss, learning rate), as long as its
        code reports no steps of its own (:mod:`trainer.tb_scalars`)."""
        for at, rec in self.tb.step_records(final) if self.tb is not None and not self.user_steps else []:
            self.totals["steps"] = rec["step"]
            self.tele.emit("step", at=at, **rec, **_rounded(self.clock_totals()))

    def _sample(self, source: NvmlSource | SimulatedSource, last_cpu: list[float]) -> None:
        if self.child is not None and isinstance(source, SimulatedSource):
            cpu, rss = group_usage(os.getpgid(0))
            self.activity.add_busy(max(0.0, cpu - last_cpu[0]), rss)
            last_cpu[0] = max(last_cpu[0], cpu)
        try:
            for rec in source.sample():
                self.tele.emit("gpu", **rec)
        except Exception as exc:  # telemetry never takes the job down
            warn(f"GPU sampling failed: {exc}")

    # -- the run ---------------------------------------------------------------------------------------
    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(WRAPPER_PGID_ENV, None)
        path = env.get("PYTHONPATH", "")
        off = env.get(AUTO_HOOKS_ENV, "1").strip().lower() in ("0", "no", "false", "off")
        hooks = not (off or getattr(self.args, "no_auto_hooks", False))
        env[AUTO_HOOKS_ENV] = "1" if hooks else "0"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(STARTUP_PATH) if hooks else "", str(USER_PATH), path) if p)
        env.update(
            {
                "GPUPLANNER_RUN_DIR": str(self.run_dir),
                "GPUPLANNER_TELEMETRY_FILE": str(self.run_dir / USER_FILE),
                "GPUPLANNER_CHECKPOINT_DIR": str(self.run_dir / "checkpoints"),
                "GPUPLANNER_RESUMED": "1" if self.before else "0",
                "GPUPLANNER_EXIT_RESUME": str(EXIT_RESUME),
            }
        )
        if self.args.price_per_gpu_hour is not None:
            env["GPUPLANNER_PRICE_PER_GPU_HOUR"] = repr(float(self.args.price_per_gpu_hour))
        if not self.main:  # node 0 merges the step records: another node's copy of the command logs none
            env.pop("GPUPLANNER_TELEMETRY_FILE")
        return env

    def run(self) -> int:
        a = self.args
        # Started by the launcher's wrapper, the job shares the wrapper's process group, which the
        # launcher signals as a whole. Otherwise (srun on another node, a shell) a group of our own, so
        # that stopping the job never reaches whoever started us; stop signals are passed on then.
        self.shared_group = os.environ.get(WRAPPER_PGID_ENV) == str(os.getpgid(0))
        if not self.shared_group and os.getpgid(0) != os.getpid():
            try:
                os.setpgid(0, 0)
            except OSError as exc:  # a session leader cannot: it leads its group already
                warn(f"cannot lead a process group of its own ({exc})")
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        self.caps_thread.start()  # the caps hold from here, through the monitor's own start-up
        source = open_gpu_source(a.gpus, self.activity, a.simulate_gpu, a.node_name)
        devices = [{"index": i} for i in getattr(source, "indices", [0])]
        cwd = a.cwd or str(self.run_dir)
        if self.main:
            self._start_records(source.simulated, devices, cwd)
            self.tb = TensorBoardScalars(Path(cwd), self.started_wall)
        return self._run_job(source, cwd)

    def _start_records(self, simulated: bool, devices: list[dict[str, int]], cwd: str) -> None:
        a = self.args
        self.tele.emit(
            "run_start",
            at=self.started_wall,
            config={
                "kind": "command",
                "command": self.command,
                "cwd": cwd,
                "price_per_gpu_hour": a.price_per_gpu_hour,
                "budget_usd": a.budget_usd,
                "max_gpu_hours": a.max_gpu_hours,
                "gpus": a.gpus,
            },
            host={"name": socket.gethostname()},
            gpus=devices,
            gpu_source="simulated" if simulated else "nvml",
            world_size=a.gpus * a.nodes,
            nodes=a.nodes,
            pid=os.getpid(),
        )
        if self.before:
            self.tele.emit("resumed", spend_usd=self.before.get("spend_usd"), resumed_totals=self.before)

    def _run_job(self, source: NvmlSource | SimulatedSource, cwd: str) -> int:
        a = self.args
        early = early_signals.pending()
        if early is not None:  # stopped before the command started: nothing to save
            return self._end(
                EXIT_RESUME, "preempted", f"signal {signal.Signals(early).name} before the command started"
            )
        self._check_limits()  # a cap that came in the monitor's own start-up: nothing to run
        if self.stop_reason == "budget_stop":
            return self._end(0, "budget_stop", f"{self.stop_detail} before the command started", exit_code=EXIT_OK)
        try:
            self.child = subprocess.Popen(self.command, cwd=cwd, env=self.child_env(), stdin=subprocess.DEVNULL)
            if self.stop_reason == "budget_stop":  # decided while it started, with no job to signal yet
                signal_job(signal.SIGTERM, self.child.pid)
        except OSError as exc:
            warn(f"cannot start {self.command[0]!r}: {exc}")
            return self._end(127 if isinstance(exc, FileNotFoundError) else 126, "failed", str(exc))
        watcher = None
        if a.preemption_provider != "none":
            watcher = MetadataWatcher(
                a.preemption_url or DEFAULT_URLS.get(a.preemption_provider),
                a.preemption_provider,
                a.preemption_interval_s,
                lambda notice: self.request_stop("preempted", f"preemption notice: {notice}"),
            ).start()
        last_cpu = [0.0]
        next_sample = time.monotonic()
        try:
            while True:
                code = self.child.poll()
                self._merge_user()
                if code is not None:
                    break
                self._merge_tensorboard()
                if a.gpu_interval_s > 0 and time.monotonic() >= next_sample:
                    self._sample(source, last_cpu)
                    next_sample = time.monotonic() + a.gpu_interval_s
                try:  # the job's end (a stop's SIGKILL included) is seen within milliseconds, not a poll
                    self.child.wait(POLL_S)
                except subprocess.TimeoutExpired:
                    pass
            if a.gpu_interval_s > 0:
                self._sample(source, last_cpu)
            self._merge_tensorboard(final=True)
        finally:
            self.job_ended = True
            self.wake.set()
            self.caps_thread.join()
            if watcher is not None:
                watcher.stop()
            source.close()
        if code < 0:
            code = 128 - code
        # What the job left behind in the group (its background children) ends with it.
        signal_job(signal.SIGKILL, self.child.pid)
        return self._finish(code)

    def _finish(self, code: int) -> int:
        if self.stop_reason == "budget_stop":
            return self._end(code, "budget_stop", self.stop_detail, exit_code=EXIT_OK)
        if code == 0:
            return self._end(0, "finished", self.stop_detail)
        if code == EXIT_RESUME or (self.stop_reason == "preempted" and code in SIGNAL_EXITS):
            return self._end(code, "preempted", self.stop_detail or "the command exited 75 (checkpointed)")
        return self._end(code, "failed", self.stop_detail or f"the command exited {code}")

    def _end(self, code: int, status: str, reason: str, exit_code: int | None = None) -> int:
        if not self.main:  # node 0 reports how the run ended
            self.tele.close()
            return code
        totals = {**self.totals, **_rounded(self.clock_totals())}
        detail: dict[str, Any] = {"reason": reason} if reason else {}
        if self.stop_record:  # when the job was signalled, and the grace period it had
            grace = self.cap_grace_s if self.stop_reason == "budget_stop" else self.args.grace_s
            detail["stop"] = {"grace_s": round(grace, 6), **self.stop_record}
        if self.user.bad:
            detail["skipped_user_records"] = self.user.bad
        self.tele.emit("run_end", status=status, totals=totals, exit_code=code, user_offset=self.user.offset, **detail)
        self.tele.close()
        return code if exit_code is None else exit_code


def _rounded(totals: SpendTotals) -> dict[str, float | None]:
    """The clock's totals for a record: to 6 decimals, spend None (unknown) without a price."""
    return {k: None if v is None else round(v, 6) for k, v in totals.as_dict().items()}


def main(args: argparse.Namespace) -> int:
    command = list(args.job)
    if command[:1] == ["--"]:
        command = command[1:]
    problems = []
    if not command:
        problems.append("give the command to run after --")
    if args.gpus < 1:
        problems.append("--gpus must be at least 1")
    if args.nodes < 1 or args.node_rank < 0:
        problems.append("--nodes must be at least 1 and --node-rank 0 or more")
    for name in ("price_per_gpu_hour", "budget_usd", "max_gpu_hours", "grace_s"):
        value = getattr(args, name)
        if value is not None and not (value >= 0 and value < float("inf")):
            problems.append(f"--{name.replace('_', '-')} must be a finite number, 0 or more")
    if args.budget_usd is not None and not args.price_per_gpu_hour:
        problems.append("--budget-usd needs a price per GPU-hour above 0 (the spend would stay $0)")
    if args.preemption_provider == "auto" and not args.preemption_url:
        problems.append("--preemption-provider auto needs --preemption-url")
    if problems:
        for problem in problems:
            print(f"trainer: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    return Monitor(args, command).run()
