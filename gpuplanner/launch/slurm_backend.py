"""A Slurm cluster reached through its SSH login node: runs are batch jobs submitted with ``sbatch``.

Everything an SSH host has is reused (:class:`SSHBackend`: paramiko, host-key checks, ProxyJump, the
payload uploaded by content hash, SFTP reads of ``events.jsonl`` from the stored offset). The run
directory, under the host's ``remote_root`` (default ``~/.gpuplanner``), must be on the cluster's shared
filesystem: the login node writes the batch script there and reads the telemetry the compute nodes
write. The "process group id" the run manager keeps for a node is the Slurm job id.

- start: write ``RUN_DIR/TAG.sbatch`` (:func:`gpuplanner.launch.slurm_jobs.batch_script`) and submit it
  with the host's settings (partition, account, QoS, nodes, GPUs per node, ``--time``,
  ``--signal=B:TERM@LEAD`` so the trainer checkpoints before the limit, ``--requeue`` on a preemptible
  partition). Output goes to ``TAG.out``/``TAG.err``, appended across requeues.
- state: ``scontrol show job`` (``sacct`` once the controller has forgotten the job). Pending, running,
  requeued, suspended or completing count as alive; a requeued job runs its script again in the same run
  directory and the trainer resumes from its newest checkpoint, so nothing needs restarting. Once the
  job ended, the exit status is what the batch script recorded for the job's last attempt.
- stop: ``scancel --signal=TERM --batch`` (the batch shell forwards it to the trainer, which checkpoints
  and exits 75); a job that has not started is cancelled and ends as 75 too (resumable as it was).
  kill: ``scancel``.
- Each change of the job's state (pending with its reason, running, requeued, ended) is offered to the
  run manager as ``SlurmState.event``, which it records in the history as a ``slurm_job`` event. The
  final one carries the billed time and spend: ``sacct``'s elapsed time of every attempt times the
  GPUs and the host's price, or, where accounting storage is disabled, the last attempt's run time from
  ``scontrol show job`` plus the earlier attempts the batch script logged (``spend_source`` says which).
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
import time
from dataclasses import dataclass
from typing import Any

import paramiko

from gpuplanner.launch.backend import ProcessState
from gpuplanner.launch.host_reports import HostProbe
from gpuplanner.launch.hosts import Host, HostError
from gpuplanner.launch.probe_check import CHECK_CODE, missing_report
from gpuplanner.launch.slurm_jobs import (
    JobInfo,
    batch_script,
    billed_seconds,
    final_exit_code,
    job_from_sacct,
    job_from_scontrol,
    parse_attempts,
    parse_sacct,
    parse_scontrol,
)
from gpuplanner.launch.ssh_backend import SSHBackend, bench_result, env_assignments  # bench: as over SSH
from gpuplanner.launch.ssh_connection import PassphraseCallback, SSHError
from gpuplanner.launch.supervisor import EXIT_RESUME
from trainer.reports import BenchReport
from trainer.spend import spend_usd

log = logging.getLogger(__name__)
q = shlex.quote
SACCT_FIELDS = "JobID,State,ExitCode,ElapsedRaw,Submit,Start,End,Reason"
SLURM_COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "srun")
_MARK = "@@gpuplanner@@"
NOT_STARTED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})


class SlurmError(HostError):
    """The cluster refused a request (sbatch rejected the job, a Slurm command is missing)."""


@dataclass(frozen=True)
class SlurmState(ProcessState):
    """A job's state as a process state, plus what Slurm says and, on a change, the event to record."""

    job: JobInfo | None = None
    event: dict[str, Any] | None = None


class SlurmBackend(SSHBackend):
    def __init__(
        self,
        host: Host,
        *,
        known_hosts_path: Any = None,
        passphrase_callback: PassphraseCallback | None = None,
        remote_root: str | None = None,
    ) -> None:
        super().__init__(
            host, known_hosts_path=known_hosts_path, passphrase_callback=passphrase_callback, remote_root=remote_root
        )
        self.settings = host.slurm_settings
        self._seen: dict[int, tuple[Any, ...]] = {}  # job id -> (state, reason, restarts) last reported
        self._seen_lock = threading.Lock()
        self._cancelled_pending: set[int] = set()  # stopped before they started (exit as 75: resume me)

    # -- submitting ------------------------------------------------------------------------------
    def script(self, run_dir: str, tag: str, args: list[str], env: dict[str, str]) -> str:
        payload = self.payload()
        full_env = {**env, "PYTHONPATH": payload.pythonpath}
        env_assignments(full_env)  # checks the names
        return batch_script(
            run_dir=run_dir,
            tag=tag,
            python=self.python,
            wrapper=payload.wrapper,
            command=args,
            env=full_env,
            settings=self.settings,
            mounts=[self.root],
        )

    def sbatch_command(self, run_dir: str, tag: str, script_path: str) -> str:
        run_id = run_dir.rstrip("/").rsplit("/", 1)[-1]
        options = [
            "--parsable",
            f"--job-name=gpuplanner-{run_id}",
            f"--chdir={run_dir}",
            f"--output={run_dir}/{tag}.out",
            f"--error={run_dir}/{tag}.err",
            "--open-mode=append",
            *self.settings.sbatch_options(),
        ]
        return f"sbatch {shlex.join(options)} {q(script_path)}"

    def start(self, run_dir: str, tag: str, args: list[str], env: dict[str, str]) -> int:
        script = self.script(run_dir, tag, args, env)
        conn = self._conn()
        status, _, err = conn.run(f"mkdir -p {q(run_dir)}", timeout_s=30)
        if status != 0:
            raise SSHError(f"{self.name}: cannot create {run_dir}: {err.strip()[-300:]}")
        path = f"{run_dir}/{tag}.sbatch"
        with self._lock:
            try:
                with conn.sftp().open(path, "w") as handle:
                    handle.write(script)
                conn.sftp().chmod(path, 0o700)
            except (OSError, paramiko.SSHException, EOFError) as exc:
                raise SSHError(f"{self.name}: writing {path} failed: {exc}") from exc
        status, out, err = conn.run(self.sbatch_command(run_dir, tag, path), timeout_s=60)
        lines = out.strip().splitlines()
        job = lines[-1].split(";")[0].strip() if lines else ""
        if status != 0 or not job.isdigit():
            why = err.strip()[-500:] or out.strip()[-500:] or f"exit {status}"
            raise SlurmError(f"{self.name}: sbatch refused the job: {why}")
        log.info("%s: submitted %s as Slurm job %s", self.name, path, job)
        return int(job)

    # -- controlling -------------------------------------------------------------------------------
    def signal(self, pgid: int, signame: str) -> None:
        """``KILL``: ``scancel``; any other signal goes to the batch shell (which forwards it), and a job
        that has not started yet is cancelled (its end then counts as exit 75: resumable as it was)."""
        if not signame.isalnum():
            raise ValueError(f"bad signal name {signame!r}")
        job = int(pgid)
        if signame == "KILL":
            self._run_once_more(f"scancel {job}; true", timeout_s=30)
            return
        # scancel --signal waits as long as the job has not started, so a job that has not is cancelled
        waiting = "|".join(sorted(NOT_STARTED))
        _, out, _ = self._run_once_more(
            f'case "$(squeue -h -j {job} -o %T 2>/dev/null)" in {waiting}) scancel {job} && echo cancelled;;'
            f" *) timeout 20 scancel --signal={signame} --batch {job} && echo signalled;; esac; true",
            timeout_s=40,
        )
        if out.strip().endswith("cancelled"):  # it had not started: nothing to checkpoint, resumable as it was
            with self._seen_lock:
                self._cancelled_pending.add(job)

    def _run_once_more(self, command: str, timeout_s: float) -> tuple[int, str, str]:
        """Run a control command; if the connection turns out dead (cut while idle, not noticed yet),
        reconnect and run it once more: a stop or kill must not fail on a connection that can be remade."""
        try:
            return self._run(command, timeout_s=timeout_s)
        except SSHError as exc:
            log.info("%s: %s; reconnecting to run %r again", self.name, exc, command.split()[0])
            self.close()
            self.connect()
            return self._run(command, timeout_s=timeout_s)

    def _query(self, run_dir: str, tag: str, job_id: int, with_sacct: bool) -> tuple[JobInfo | None, list, list]:
        """(the job as scontrol or sacct sees it, or None when neither knows it; the attempts the batch
        script logged; sacct rows, [] when accounting is disabled or not asked)."""
        attempts_file = q(f"{run_dir}/{tag}.attempts")
        sacct = f"sacct -D -X -n -P -j {job_id} -o {SACCT_FIELDS} 2>&1"
        command = (
            f'date +%z; echo {_MARK}; scontrol show job -o {job_id} 2>&1; echo "$?"; echo {_MARK};'
            f" {sacct if with_sacct else 'true'}; echo {_MARK}; cat {attempts_file} 2>/dev/null; true"
        )
        status, out, err = self._run(command, timeout_s=30)
        parts = out.split(_MARK + "\n")
        if status != 0 or len(parts) != 4:
            raise SSHError(f"{self.name}: unclear job state (exit {status}): {(out + err).strip()[-300:]!r}")
        utc, scontrol_out, sacct_out, attempts_out = parts
        scontrol_lines = scontrol_out.strip().splitlines()
        scontrol_code = scontrol_lines.pop() if scontrol_lines else "1"
        scontrol_text = "\n".join(scontrol_lines)
        attempts = parse_attempts(attempts_out, job_id)
        rows = parse_sacct(sacct_out) if with_sacct else []
        if scontrol_code == "0" and "JobId=" in scontrol_text:
            return job_from_scontrol(job_id, parse_scontrol(scontrol_text), utc), attempts, rows
        if "Invalid job id" not in scontrol_text:  # the controller did not answer: not "job gone"
            raise SSHError(f"{self.name}: Slurm did not answer: {scontrol_text.strip()[-300:]}")
        if not rows and not with_sacct:
            rows = parse_sacct(self._run(sacct, timeout_s=30)[1])
        return job_from_sacct(job_id, rows, utc), attempts, rows

    def state(self, run_dir: str, tag: str, pgid: int) -> SlurmState:
        job_id = int(pgid)
        job, attempts, _ = self._query(run_dir, tag, job_id, with_sacct=False)
        if job is None:  # forgotten by the controller, and no accounting: what the script recorded
            code = attempts[-1].get("exit_code") if attempts else None
            return SlurmState(False, code if isinstance(code, int) else None)
        if job.active:
            return SlurmState(True, None, job, self._event(job, run_dir, tag, attempts))
        code = final_exit_code(job, attempts)
        with self._seen_lock:
            if code is None and job.state == "CANCELLED" and job_id in self._cancelled_pending:
                code = EXIT_RESUME
        return SlurmState(False, code, job, self._event(job, run_dir, tag, attempts, code))

    def _event(
        self, job: JobInfo, run_dir: str, tag: str, attempts: list[dict[str, Any]], code: int | None = None
    ) -> dict[str, Any] | None:
        key = (job.state, job.reason, job.restarts)
        with self._seen_lock:
            if self._seen.get(job.job_id) == key:
                return None
            self._seen[job.job_id] = key
        doc: dict[str, Any] = {
            "job_id": job.job_id,
            "state": job.state,
            "reason": job.reason,
            "restarts": job.restarts,
            "host": self.name,
        }
        if job.submit_t is not None:
            doc["submit_t"] = job.submit_t
        if job.start_t is not None and job.submit_t is not None and job.state not in ("PENDING", "REQUEUED"):
            doc["queue_wait_s"] = max(0.0, job.start_t - job.submit_t)
        if job.final:
            doc["exit_code"] = code
            doc.update(self.spend(run_dir, tag, job.job_id))
        return doc

    def spend(self, run_dir: str, tag: str, job_id: int) -> dict[str, Any]:
        """Billed seconds, GPU-hours and spend of a job, and where the time came from (``sacct`` or
        ``scontrol`` where accounting storage is disabled)."""
        job, attempts, rows = self._query(run_dir, tag, job_id, with_sacct=True)
        if job is None:
            return {"spend_source": None}
        seconds = billed_seconds(job, attempts, rows)
        gpus = self.settings.gpus_in_job
        price = self.host.price_usd_per_gpu_hour
        return {
            "billed_s": seconds,
            "gpus": gpus,
            "gpu_hours": seconds * gpus / 3600.0,
            "spend_usd": spend_usd(price, gpus, seconds),
            "spend_source": "sacct" if rows else "scontrol",
        }

    # -- probe and bench on a compute node ------------------------------------------------------------
    def srun_prefix(self, limit_s: float) -> list[str]:
        """``srun`` on one node with the host's partition, account, QoS and GPUs, for ``limit_s`` seconds."""
        s = self.settings
        out = ["srun", "--nodes=1", "--ntasks=1", f"--time={max(1, int(limit_s // 60) + 1)}"]
        for flag, value in (("--partition", s.partition), ("--account", s.account), ("--qos", s.qos)):
            if value:
                out.append(f"{flag}={value}")
        if s.gpus_per_node > 0:
            out.append(
                f"--gpus-per-node={s.gpus_per_node}"
                if s.gpu_flag == "gpus-per-node"
                else f"--gres=gpu:{s.gpus_per_node}"
            )
        if s.container_image:
            out += [f"--container-image={s.container_image}", f"--container-mounts={self.root}:{self.root}"]
        return out

    def probe(self) -> HostProbe:
        conn = self._conn()
        checks = " ".join(f"command -v {c} >/dev/null || echo {c};" for c in SLURM_COMMANDS)
        _, missing, _ = conn.run(checks, timeout_s=30)
        if missing.split():
            return {
                "ok": False,
                "missing": missing.split(),
                "install_hint": f"{self.name} is not a Slurm login node (no {', '.join(missing.split())} on its PATH)",
            }
        payload = self.payload()
        srun = shlex.join(self.srun_prefix(300))
        status, out, err = conn.run(f"{srun} {q(self.python)} -c {q(CHECK_CODE)}", timeout_s=600)
        if status != 0:
            return {
                "ok": False,
                "missing": ["python"],
                "error": err.strip()[-1000:],
                "install_hint": f"install Python 3.11+ on {self.name}'s compute nodes or set the host's python path",
            }
        report = missing_report(out, self.python)
        if report["missing"]:
            return {"ok": False, **report}
        status, out, err = conn.run(
            f"{srun} env {q('PYTHONPATH=' + payload.pythonpath)} {q(self.python)} -m trainer probe"
            f" --run-root {q(self.root)}",
            timeout_s=600,
        )
        if status != 0:
            return {"ok": False, **report, "error": err.strip()[-2000:]}
        start = 0 if out.startswith("{") else out.rfind("\n{") + 1
        return {
            "ok": True,
            **json.loads(out[start:]),
            **report,
            "payload": payload.content_hash,
            "payload_uploaded": self.uploaded,
            "slurm": self.settings.to_dict(),
        }

    def bench(self, args: list[str], timeout_s: float) -> BenchReport:
        payload = self.payload()
        command = " ".join(
            [
                shlex.join(self.srun_prefix(timeout_s)),
                "env",
                q("PYTHONPATH=" + payload.pythonpath),
                q(self.python),
                "-m",
                "trainer",
                "bench",
                *(q(a) for a in args),
            ]
        )
        started = time.monotonic()
        status, out, err = self._run(command, timeout_s=timeout_s + 600)  # queue wait included
        log.info("%s: bench took %.0f s (queue wait included)", self.name, time.monotonic() - started)
        return bench_result(status, out, err)
