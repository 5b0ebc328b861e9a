"""Pure parts of the Slurm engine: the batch script, and reading ``scontrol``/``sacct`` answers.

The batch script (:func:`batch_script`) runs the trainer through the payload's process wrapper, so a
Slurm run leaves the same ``TAG.pid``/``TAG.exit`` files in its run directory as an SSH run, and
appends one JSON line per attempt to ``TAG.attempts`` (job id, restart count, start and end in epoch
seconds, exit code): exit codes are matched to their job, and spend can be computed from the attempts
where the cluster keeps no accounting. A ``SIGTERM`` (or ``SIGUSR1``) to the batch shell, from
``--signal=B:TERM@LEAD`` before the time limit or ``scancel --signal=TERM --batch``, is forwarded to
the trainer's process group, which checkpoints and exits 75.

One node: the wrapper runs the trainer (``torchrun --standalone`` for several GPUs) in the batch
shell's allocation. Several nodes, or a container image: ``srun`` starts one task per node; each runs
``torchrun`` with a c10d rendezvous on the first node of ``SLURM_JOB_NODELIST`` (at its ``NodeAddr``), the node rank from
``SLURM_NODEID`` and the node count from ``SLURM_JOB_NUM_NODES``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gpuplanner.launch.slurm_settings import SlurmSettings

q = shlex.quote
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def comment(text: str) -> str:
    """``text`` fit for a ``#`` comment line of a generated script: control characters (a newline would end
    the comment and run the rest; a later ``#SBATCH`` line would be read as an option) become ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# Job states (squeue/scontrol/sacct names) in which the job will still run or is running.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
        "STOPPED",
    }
)
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)
RDZV_PORT_BASE = 29400


def trainer_args_of(command: list[str]) -> list[str]:
    """The ``-m trainer train ...`` part of a node command (which may start with torchrun's flags)."""
    for i in range(len(command) - 2):
        if command[i : i + 3] in (["-m", "trainer", "train"], ["-m", "trainer", "exec"]):
            return command[i:]
    return list(command)


def _node_command(python: str, train: list[str], settings: SlurmSettings) -> str:
    """The shell command one node runs (variables of the job expanded on the node)."""
    if train[:3] == ["-m", "trainer", "exec"]:
        # The user's own command under the monitor (one per node): the command lays out its processes.
        return shlex.join([python, *train])
    procs = settings.processes_per_node
    if settings.nodes > 1:
        head = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(procs), "--rdzv-backend", "c10d"]
        return (
            f'{shlex.join(head)} --nnodes "$SLURM_JOB_NUM_NODES" --node-rank "$SLURM_NODEID"'
            f' --rdzv-endpoint "$GPUPLANNER_RDZV_HOST:$GPUPLANNER_RDZV_PORT" --rdzv-id "slurm-$SLURM_JOB_ID"'
            f" --max-restarts 0 {shlex.join(train)}"
        )
    if procs > 1:
        return shlex.join(
            [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs), *train]
        )
    return shlex.join([python, *train])


def batch_script(
    *,
    run_dir: str,
    tag: str,
    python: str,
    wrapper: str,
    command: list[str],
    env: dict[str, str],
    settings: SlurmSettings,
    mounts: list[str] = (),  # type: ignore[assignment]
) -> str:
    """The ``sbatch`` script of a run; ``command`` is the manager's node command (its trainer part is kept,
    the process layout comes from ``settings``); ``env`` names are already checked."""
    train = trainer_args_of(command)
    node = _node_command(python, train, settings)
    use_srun = settings.nodes > 1 or settings.container_image is not None
    if use_srun:
        srun = ["srun", "--nodes", str(settings.nodes), "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]
        if settings.container_image:
            srun.append(f"--container-image={settings.container_image}")
            if mounts:
                srun.append("--container-mounts=" + ",".join(f"{m}:{m}" for m in mounts))
        inner = f"{shlex.join(srun)} bash -c {q(node)}"
    else:
        inner = node
    attempts = q(f"{run_dir}/{tag}.attempts")
    exit_file = q(f"{run_dir}/{tag}.exit")
    lines = [
        "#!/bin/bash",
        comment(f"# GPU Planner: {tag} of {run_dir} (submitted with: sbatch {shlex.join(settings.sbatch_options())})"),
        "set -u",
        f"cd {q(run_dir)} || exit 1",
        *(f"export {k}={q(v)}" for k, v in env.items()),
        'export GPUPLANNER_SLURM_JOB_ID="$SLURM_JOB_ID"',
    ]
    if settings.nodes > 1:
        lines += [
            'GPUPLANNER_RDZV_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            # the node's address as Slurm knows it (a node name need not resolve)
            'GPUPLANNER_RDZV_HOST=$(scontrol show node -o "$GPUPLANNER_RDZV_NODE" | tr " " "\\n"'
            " | sed -n 's/^NodeAddr=//p')",
            "GPUPLANNER_RDZV_HOST=${GPUPLANNER_RDZV_HOST:-$GPUPLANNER_RDZV_NODE}",
            f"GPUPLANNER_RDZV_PORT=$(( {RDZV_PORT_BASE} + SLURM_JOB_ID % 1000 ))",
            "export GPUPLANNER_RDZV_HOST GPUPLANNER_RDZV_PORT",
        ]
    if settings.setup:
        lines += ["# the host's setup lines", settings.setup.rstrip("\n")]
    lines += [
        "started=$(date +%s)",
        f"rm -f {exit_file}",
        "child=",
        'forward() { [ -n "$child" ] && kill -TERM -- "-$child" 2>/dev/null; }',
        "trap forward TERM USR1",
        # setsid: the wrapper leads its own process group, which a stop signals as a whole
        f"setsid {shlex.join([python, wrapper, run_dir, tag, '--'])} {inner} </dev/null &",
        "child=$!",
        'while kill -0 "$child" 2>/dev/null; do wait "$child"; done',
        f"code=$(sed -n 's/.*\"exit_code\": *\\(-\\{{0,1\\}}[0-9]\\{{1,\\}}\\).*/\\1/p' {exit_file} 2>/dev/null)",
        "code=${code:-1}",
        'printf \'{"job_id": %s, "restart": %s, "start": %s, "end": %s, "exit_code": %s}\\n\''
        f' "$SLURM_JOB_ID" "${{SLURM_RESTART_COUNT:-0}}" "$started" "$(date +%s)" "$code" >> {attempts}',
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)


# -- reading the cluster's answers --------------------------------------------------------------------
def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o`` (one line of ``Key=Value``; values may contain spaces) as a dict."""
    out: dict[str, str] = {}
    key = None
    for token in text.strip().split(" "):
        m = re.match(r"([A-Z][A-Za-z0-9_/:]*)=(.*)\Z", token)
        if m:
            key = m.group(1)
            out[key] = m.group(2)
        elif key is not None and token:
            out[key] += " " + token
    return out


def parse_sacct(text: str) -> list[dict[str, str]]:
    """``sacct -n -P -o JobID,State,ExitCode,ElapsedRaw,Submit,Start,End,Reason`` lines as dicts."""
    names = ("JobID", "State", "ExitCode", "ElapsedRaw", "Submit", "Start", "End", "Reason")
    rows = []
    for line in text.strip().splitlines():
        parts = line.split("|")
        if len(parts) == len(names):
            rows.append(dict(zip(names, parts)))
    return rows


def base_state(state: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``PENDING`` stays."""
    return state.split()[0].rstrip("+").upper() if state.strip() else ""


def exit_code_of(code: str) -> int | None:
    """Slurm's ``EXIT:SIGNAL`` as one exit status (a signal as 128 + its number)."""
    m = re.match(r"(\d+):(\d+)\Z", code.strip())
    if not m:
        return None
    status, sig = int(m.group(1)), int(m.group(2))
    return 128 + sig if sig else status


def duration_s(text: str) -> float | None:
    """Slurm's ``[D-]HH:MM:SS`` (or ``MM:SS``) as seconds."""
    m = re.match(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)\Z", text.strip())
    if not m:
        return None
    d, h, mi, s = (int(g) if g else 0 for g in m.groups())
    return float(d * 86400 + h * 3600 + mi * 60 + s)


def to_epoch(text: str, utc_offset: str) -> float | None:
    """A cluster-local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds, given the cluster's ``date +%z``."""
    try:
        local = datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    m = re.match(r"([+-])(\d{2})(\d{2})\Z", utc_offset.strip())
    offset = timedelta(0)
    if m:
        offset = timedelta(hours=int(m.group(2)), minutes=int(m.group(3))) * (1 if m.group(1) == "+" else -1)
    return local.replace(tzinfo=timezone(offset)).timestamp()


def parse_attempts(text: str, job_id: int) -> list[dict[str, Any]]:
    """The attempt lines of job ``job_id`` (others, from earlier jobs of the run, are skipped)."""
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("job_id") == job_id:
            out.append(doc)
    return out


@dataclass(frozen=True)
class JobInfo:
    """What the cluster says about one job."""

    job_id: int
    state: str  # PENDING, RUNNING, COMPLETED, ... ("" when the cluster no longer knows the job)
    reason: str | None = None
    restarts: int = 0
    exit_code: int | None = None  # Slurm's ExitCode as one status
    submit_t: float | None = None
    start_t: float | None = None
    end_t: float | None = None
    run_s: float | None = None  # the current (last) attempt's run time
    source: str = "scontrol"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def job_from_scontrol(job_id: int, fields: dict[str, str], utc_offset: str) -> JobInfo:
    reason = fields.get("Reason")
    return JobInfo(
        job_id,
        base_state(fields.get("JobState", "")),
        None if reason in (None, "None", "(null)") else reason,
        int(fields.get("Restarts", "0") or 0),
        exit_code_of(fields.get("ExitCode", "")),
        to_epoch(fields.get("SubmitTime", ""), utc_offset),
        to_epoch(fields.get("StartTime", ""), utc_offset),
        to_epoch(fields.get("EndTime", ""), utc_offset),
        duration_s(fields.get("RunTime", "")),
        "scontrol",
    )


def job_from_sacct(job_id: int, rows: list[dict[str, str]], utc_offset: str) -> JobInfo | None:
    """The job's last attempt in ``sacct -D`` rows (the allocation line, ``JobID`` without a step)."""
    mine = [r for r in rows if r["JobID"] == str(job_id)]
    if not mine:
        return None
    last = mine[-1]
    reason = last.get("Reason")
    return JobInfo(
        job_id,
        base_state(last["State"]),
        None if reason in (None, "", "None") else reason,
        len(mine) - 1,
        exit_code_of(last["ExitCode"]),
        to_epoch(mine[0]["Submit"], utc_offset),
        to_epoch(last["Start"], utc_offset),
        to_epoch(last["End"], utc_offset),
        float(last["ElapsedRaw"]) if last["ElapsedRaw"].isdigit() else None,
        "sacct",
    )


def final_exit_code(job: JobInfo, attempts: list[dict[str, Any]]) -> int | None:
    """The run's exit status once the job ended: what the batch script recorded for the job's last
    attempt; else Slurm's own status for a job that completed or failed; else None (killed with no
    trace: a time limit hit without a signal lead, a node failure, a cancel before it started)."""
    if attempts:
        code = attempts[-1].get("exit_code")
        if isinstance(code, int) and attempts[-1].get("restart", 0) >= job.restarts:
            return code
    if job.state in ("COMPLETED", "FAILED") and job.exit_code is not None:
        return job.exit_code
    return None


def billed_seconds(job: JobInfo, attempts: list[dict[str, Any]], sacct_rows: list[dict[str, str]] | None) -> float:
    """Wall seconds the allocation ran, every attempt (requeues) included."""
    if sacct_rows:
        return float(
            sum(int(r["ElapsedRaw"]) for r in sacct_rows if r["JobID"] == str(job.job_id) and r["ElapsedRaw"].isdigit())
        )
    earlier = sum(
        max(0.0, float(a["end"]) - float(a["start"]))
        for a in attempts
        if isinstance(a.get("restart"), int) and a["restart"] < job.restarts
    )
    return earlier + (job.run_s or 0.0)
