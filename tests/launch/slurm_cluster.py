"""A real Slurm for tests: ``munged``, ``slurmctld`` and ``slurmd`` as root, no systemd.

Debian's ``slurmctld``, ``slurmd``, ``slurm-client`` and ``munge`` packages provide the programs.
Everything lives in one folder: the munge key and socket, a generated ``slurm.conf`` (this host's CPU
count and memory as ``slurmd -C`` reports them, its own free ports, state and spool folders,
``proctrack/linuxproc``, ``task/none``, no accounting storage, so ``sacct`` says it is disabled), a
``gres.conf`` declaring one GPU per node whose device file is ``/dev/null`` (so ``--gpus-per-node`` is
scheduled for real and ``CUDA_VISIBLE_DEVICES`` set, while the jobs train on the CPU), and the daemons'
logs. With one node it is this host (``hostname -s``). With several, each node is one more ``slurmd``
on this host (``slurmd -N gpN``, Debian's Slurm supports several per host) with its own port and
spool folder, all at 127.0.0.1: a multi-node job runs for real, its nodes sharing this filesystem as
cluster nodes share theirs. Clients find the cluster through ``SLURM_CONF`` (:attr:`SlurmCluster.env`).
The daemons run in the foreground as children of the test process, so :meth:`stop` ends exactly what
:meth:`start` started::

    cluster = SlurmCluster(tmp / "slurm", nodes=2).start()   # srun hostname works once this returns
    cluster.run("sbatch", "--wrap", "true")
    cluster.stop()
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
PARTITION = "debug"
GPUS = 1  # declared in gres.conf with /dev/null as its device: schedulable, not usable


def available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(p) or Path("/usr/sbin", p).exists() for p in PROGRAMS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def node_facts() -> dict[str, str]:
    """``NodeName``, ``CPUs``, ``Boards``, ... as ``slurmd -C`` prints them for this machine."""
    out = subprocess.run([_program("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    first = out.splitlines()[0]
    return dict(item.split("=", 1) for item in first.split() if "=" in item)


class SlurmCluster:
    def __init__(self, folder: Path, nodes: int = 1) -> None:
        self.dir = Path(folder)
        self.nodes = nodes
        self.node_names: list[str] = []
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.node = ""

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    # -- configuration -----------------------------------------------------------------------------
    def write_config(self) -> None:
        facts = node_facts()
        self.node = socket.gethostname().split(".")[0]
        d = self.dir
        for sub in ("munge", "state", "spool", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "munge").chmod(0o711)  # munged wants its socket's folder searchable by all
        hardware = " ".join(
            f"{k}={facts[k]}"
            for k in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
            if k in facts
        )
        lines = [
            "ClusterName=gpuplannertest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool' / '%n'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log' / 'slurmd-%n.log'}",
            "MailProg=/bin/true",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "ReturnToService=2",
            "MinJobAge=900",  # finished jobs stay visible to scontrol for the whole session
            "KillWait=10",  # SIGTERM, then SIGKILL 10 s later: time enough to checkpoint a tiny model
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
        ]
        if self.nodes == 1:
            self.node_names = [self.node]
            lines.append(f"NodeName={self.node} NodeAddr=127.0.0.1 {hardware} Gres=gpu:{GPUS} State=UNKNOWN")
        else:
            self.node_names = [f"gp{i + 1}" for i in range(self.nodes)]
            for name in self.node_names:
                lines.append(
                    f"NodeName={name} NodeHostname={self.node} NodeAddr=127.0.0.1 Port={_free_port()} {hardware}"
                    f" Gres=gpu:{GPUS} State=UNKNOWN"
                )
        nodes = ",".join(self.node_names)
        lines += [f"PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP", ""]
        self.conf.write_text("\n".join(lines))
        (d / "gres.conf").write_text(
            "AutoDetect=off\n"
            + "".join(f"NodeName={n} Name=gpu File=/dev/null Count={GPUS}\n" for n in self.node_names)
        )

    # -- daemons -----------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")
        try:
            self.procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env={**os.environ, **self.env}
            )
        finally:
            log.close()

    def start(self, timeout_s: float = 30.0) -> SlurmCluster:
        self.write_config()
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        m = self.dir / "munge"
        self._spawn(
            "munged",
            [
                _program("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        try:
            self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged did not create its socket")
        except BaseException:
            self.stop()
            raise
        self._spawn("slurmctld", [_program("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for name in self.node_names:
            self._spawn(f"slurmd-{name}", [_program("slurmd"), "-D", "-f", str(self.conf), "-N", name])
        try:
            self._wait(self._node_idle, timeout_s, "the Slurm node did not become idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _node_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%t", check=False)
        states = out.stdout.split()
        return out.returncode == 0 and len(states) == len(self.node_names) and set(states) == {"idle"}

    def _wait(self, ready, timeout_s: float, message: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{message}: {', '.join(dead)} exited\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{message} within {timeout_s:.0f} s\n{self.logs()}")

    def logs(self, lines: int = 15) -> str:
        parts = []
        for path in sorted((self.dir / "log").glob("*")) + [self.dir / "munge" / "munged.log"]:
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"== {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def run(self, *argv: str, check: bool = True, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (``scontrol``, ``sbatch``, ...)."""
        return subprocess.run(
            [_program(argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout_s,
            env={**os.environ, **self.env},
        )

    def jobs(self) -> list[str]:
        out = self.run("squeue", "-h", "-o", "%i", check=False)
        return out.stdout.split() if out.returncode == 0 else []

    def stop(self, timeout_s: float = 40.0) -> None:
        """Cancel every job, wait for them to end, then end the daemons started here."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--signal=KILL", "--partition", PARTITION, check=False)
            deadline = time.monotonic() + timeout_s
            while self.jobs() and time.monotonic() < deadline:
                time.sleep(0.5)
        for name in [n for n in self.procs if n.startswith("slurmd")] + ["slurmctld", "munged"]:
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
