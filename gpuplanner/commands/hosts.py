"""`gpuplanner hosts`: the machines runs go to (list, add, set-price, set-after-run, remove, probe, bench)."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from gpuplanner.commands.errors import UsageError
from gpuplanner.export.human import human_money
from gpuplanner.history.db import HistoryError
from gpuplanner.launch.hosts import (
    LOCAL_HOST_NAME,
    Host,
    HostError,
    IdleRule,
    add_host,
    check_price,
    get_host,
    list_hosts,
    remove_host,
    set_after_run,
    set_price,
    ssh_config_host,
)
from gpuplanner.launch.known_hosts import ChangedHostKey, UnknownHostKey
from gpuplanner.launch.slurm_settings import SlurmSettingsDoc
from gpuplanner.launch.ssh_connection import SSHError
from gpuplanner.plan.catalog import catalog_gpu

T = TypeVar("T")


def terminal_passphrase(prompt: str) -> str | None:
    """Ask for an encrypted key's passphrase on the terminal (not echoed); None without a terminal, so
    the connection says the key needs ``ssh-add`` instead of waiting for input that cannot come."""
    if not sys.stdin.isatty():
        return None
    try:
        return getpass.getpass(prompt.rstrip() + " ")
    except EOFError:  # Ctrl-D: no passphrase (Ctrl-C aborts the command as everywhere else)
        print(file=sys.stderr)
        return None


def terminal_prompter() -> Callable[[str], str | None] | None:
    """The passphrase callback for a command: the terminal prompt, or None without a terminal (then the
    error says that nothing here can ask, rather than that no passphrase was given)."""
    return terminal_passphrase if sys.stdin.isatty() else None


def with_host_key_trust(args: argparse.Namespace, action: Callable[[], T]) -> T:
    """Run ``action``; on an unknown host key ask y/N on a TTY, accept the exact ``--trust-host-key``
    fingerprint, or refuse (exit 2 with the fingerprint). A changed key is always refused."""
    for _ in range(5):  # a jump host and the target may each be new
        try:
            return action()
        except UnknownHostKey as exc:
            where = f"[{exc.hostname}]:{exc.port}" if exc.port != 22 else exc.hostname
            if getattr(args, "trust_host_key", None) == exc.fingerprint_sha256:
                exc.trust()
                continue
            if getattr(args, "trust_host_key", None):
                raise UsageError(
                    f"--trust-host-key: {where} offers {exc.key_type} {exc.fingerprint_sha256}, "
                    f"not {args.trust_host_key}"
                ) from None
            if sys.stdin.isatty() and sys.stderr.isatty():
                print(
                    f"The authenticity of host {where} can't be established.\n"
                    f"{exc.key_type} key fingerprint is {exc.fingerprint_sha256}.",
                    file=sys.stderr,
                )
                answer = input("Trust this host and remember its key? [y/N] ").strip().lower()
                if answer in ("y", "yes"):
                    exc.trust()
                    continue
            raise UsageError(
                f"unknown host key for {where}: {exc.key_type} {exc.fingerprint_sha256}; check it and "
                f"pass --trust-host-key {exc.fingerprint_sha256} to accept it"
            ) from None
        except ChangedHostKey as exc:
            print(f"gpuplanner: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
    raise UsageError("too many unknown host keys")


def add_trust_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-host-key",
        metavar="SHA256:...",
        help="accept an unknown host key if (and only if) it has this fingerprint",
    )


def _host_doc(host: Host) -> dict[str, Any]:
    doc = dataclasses.asdict(host)
    doc["display_name"] = host.display_name
    return doc


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hosts", help="hosts runs go to: list, add, remove, probe, bench", description=__doc__.splitlines()[0]
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    parser.set_defaults(handler=lambda args: parser.print_help() or 0)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", help="history database file (default: $GPUPLANNER_DB or the data directory's)")
        p.add_argument("--json", action="store_true", help="print one JSON document")

    p = actions.add_parser("list", help="this machine, the SSH hosts and the Slurm login nodes")
    common(p)
    p.set_defaults(handler=_list)

    p = actions.add_parser(
        "add",
        help="add an SSH host or a Slurm cluster's login node (--slurm), or price this machine (add local --price)",
    )
    common(p)
    p.add_argument(
        "name", help="a name for the host; an alias of ~/.ssh/config fills in the rest; 'local' is this machine"
    )
    p.add_argument("--hostname", help="address or DNS name")
    p.add_argument("--port", type=int, help="SSH port (default 22)")
    p.add_argument("--user", help="login name")
    p.add_argument("--identity-file", help="private key file (passwords are never stored)")
    p.add_argument("--proxy-jump", help="[user@]jumphost[:port]")
    p.add_argument("--python", help="Python on the host with torch and transformers (default python3)")
    p.add_argument(
        "--remote-root", help="folder on the host for the payload and run directories (default ~/.gpuplanner)"
    )
    p.add_argument("--price", type=float, help="price in US dollars per GPU-hour")
    p.add_argument("--spot", action="store_true", help="the price is a spot price")
    slurm = p.add_argument_group(
        "Slurm (with --slurm: the host is a login node; runs are batch jobs, their run directories must be on "
        "the cluster's shared filesystem, see --remote-root)"
    )
    slurm.add_argument("--slurm", action="store_true", help="the host is a Slurm cluster's login node")
    slurm.add_argument("--partition", help="sbatch --partition")
    slurm.add_argument("--account", help="sbatch --account")
    slurm.add_argument("--qos", help="sbatch --qos")
    slurm.add_argument("--gpus-per-node", type=int, help="GPUs per node, one trainer process each (default 0: CPU)")
    slurm.add_argument("--nodes", type=int, help="nodes per job (default 1; several: torchrun over srun)")
    slurm.add_argument("--time-limit", help="sbatch --time (minutes, H:MM:SS or D-HH:MM:SS; default: the partition's)")
    slurm.add_argument(
        "--signal-lead", type=int, help="seconds before the time limit the trainer is told to checkpoint (default 120)"
    )
    slurm.add_argument("--requeue", action="store_true", help="a preemptible partition: let Slurm requeue the job")
    slurm.add_argument("--container-image", help="run the trainer in this image (srun --container-image, pyxis)")
    slurm.add_argument("--gres", action="store_true", help="ask for GPUs as --gres=gpu:N, not --gpus-per-node=N")
    slurm.add_argument(
        "--setup", help="shell lines the job runs first (e.g. 'module load cuda; source venv/bin/activate')"
    )
    p.set_defaults(handler=_add)

    p = actions.add_parser("set-price", help="set the price per GPU-hour of a host, this machine ('local') included")
    common(p)
    p.add_argument("name")
    p.add_argument("usd", metavar="USD", help="US dollars per GPU-hour, 0 or more; 'none' removes the price")
    pricing = p.add_mutually_exclusive_group()
    pricing.add_argument("--spot", action="store_true", help="the price is a spot price")
    pricing.add_argument("--on-demand", action="store_true", help="the price is an on-demand price")
    p.set_defaults(handler=_set_price)

    p = actions.add_parser(
        "set-after-run",
        help="a shell command run on this machine after each run on the host ends (e.g. stop the instance)",
        description="The command runs on this machine (your cloud CLI and its credentials) once a run on the host "
        "has ended, with GPUPLANNER_HOST, GPUPLANNER_HOSTNAME, GPUPLANNER_RUN_ID and GPUPLANNER_RUN_DIR set; the "
        "history bills the host from launch until it finished.",
    )
    common(p)
    p.add_argument("name")
    p.add_argument("after_run", metavar="COMMAND", help="the shell command line; 'none' removes it")
    p.add_argument(
        "--when-idle-below",
        type=float,
        metavar="PCT",
        help="stop-when-idle: run COMMAND only once every GPU of the host stayed under PCT%% utilisation "
        "for --idle-minutes after the run ended (SSH hosts and this machine)",
    )
    p.add_argument("--idle-minutes", type=float, metavar="N", help="minutes under --when-idle-below (default 10)")
    p.set_defaults(handler=_set_after_run)

    p = actions.add_parser("remove", help="forget a host")
    common(p)
    p.add_argument("name")
    p.set_defaults(handler=_remove)

    p = actions.add_parser("probe", help="upload the payload if needed and describe the host's GPUs and software")
    common(p)
    p.add_argument("name")
    add_trust_flag(p)
    p.set_defaults(handler=_probe)

    p = actions.add_parser(
        "bench",
        help="measure a training configuration on the host (trainer bench) and record it for the planner",
        usage="gpuplanner hosts bench NAME [options] -- TRAINER FLAGS...",
    )
    common(p)
    p.add_argument("name")
    p.add_argument("--warmup-steps", type=int, default=5, help="steps not measured (default 5)")
    p.add_argument("--steps", type=int, default=30, help="steps measured after warm-up (default 30)")
    p.add_argument(
        "--gpu-type",
        help="the catalog GPU this measurement stands for (default: the GPU it ran on; "
        "needed to record a CPU measurement)",
    )
    p.add_argument("--no-record", action="store_true", help="print the result only; do not store it")
    add_trust_flag(p)
    p.set_defaults(handler=_bench)  # the trainer's flags come after "--" (args.passthrough, see cli.main)


def _on_host(args: argparse.Namespace, action: Callable[[Any], dict[str, Any]]) -> dict[str, Any] | None:
    """``action(manager)`` for host ``args.name`` (which must exist), with host-key trust and the terminal
    passphrase prompt; None once a connection, history or run failure has been reported."""
    from gpuplanner.launch.manager import RunError, RunManager

    try:
        get_host(args.db, args.name)
    except HostError as exc:
        raise UsageError(f"NAME: {exc}") from None
    manager = RunManager(args.db, passphrase_callback=terminal_prompter())
    try:
        return with_host_key_trust(args, lambda: action(manager))
    except (SSHError, HistoryError, RunError) as exc:
        print(f"gpuplanner hosts: {exc}", file=sys.stderr)
        return None
    finally:
        manager.close()


def _bench(args: argparse.Namespace) -> int:
    from gpuplanner.launch.command_lines import check_trainer_args

    flags = list(getattr(args, "passthrough", []))
    if not flags:
        raise UsageError(
            "TRAINER FLAGS: give the configuration after --, e.g. -- --model gpt2 --data d "
            "--seq-len 1024 --micro-batch 8 --precision bf16-mixed"
        )
    if args.steps < 1 or args.warmup_steps < 0:
        raise UsageError("--steps: at least 1 measured step (and --warmup-steps not negative)")
    try:
        check_trainer_args(flags)
    except ValueError as exc:
        raise UsageError(f"TRAINER FLAGS: {exc}") from None
    if args.gpu_type is not None and not args.no_record and catalog_gpu(args.gpu_type) is None:
        raise UsageError(f"--gpu-type: the catalog knows no GPU named {args.gpu_type!r} (see gpuplanner catalog gpus)")
    result = _on_host(
        args,
        lambda manager: manager.bench(
            args.name,
            flags,
            warmup_steps=args.warmup_steps,
            steps=args.steps,
            gpu_type=args.gpu_type,
            record=not args.no_record,
        ),
    )
    if result is None:
        return 1
    if "recorded_gpu_type" in result and catalog_gpu(result["recorded_gpu_type"]) is None:
        result["warning"] = (
            f"the catalog knows no GPU named {result['recorded_gpu_type']!r}, so the planner cannot "
            "use this measurement: run again with --gpu-type and a catalog name "
            "(gpuplanner catalog gpus)"
        )
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    mfu = f", MFU {result['mfu']:.1%}" if isinstance(result.get("mfu"), (int, float)) else ""
    peak = result.get("peak_mem_reserved_bytes") or result.get("peak_mem_allocated_bytes")
    memory = f", peak memory {peak / 1024**3:.2f} GiB" if isinstance(peak, (int, float)) else ""
    print(
        f"{args.name} ({result.get('device')}, {result.get('precision')}): {result.get('tokens_per_s', 0):,.0f} "
        f"tokens/s, {result.get('step_time_s', 0) * 1000:.0f} ms per step{mfu}{memory}"
    )
    if "warning" in result:
        print(f"recorded as bench result #{result['recorded_id']}, but {result['warning']}")
    elif "recorded_id" in result:
        print(
            f"recorded as bench result #{result['recorded_id']} for {result['recorded_gpu_type']}: "
            "`gpuplanner plan` uses it for this model, method, precision and sequence length"
        )
    else:
        hint = " (--gpu-type GPU records it as that GPU's speed)" if result.get("device") == "cpu" else ""
        print(f"not recorded: {result.get('not_recorded')}{hint}")
    return 0


def _list(args: argparse.Namespace) -> int:
    hosts = list_hosts(args.db)
    if args.json:
        print(json.dumps([_host_doc(h) for h in hosts], indent=1))
        return 0
    for h in hosts:
        where = "this machine" if h.kind == "local" else f"{h.user + '@' if h.user else ''}{h.hostname}:{h.port}"
        if h.kind == "slurm":
            where = f"slurm {where}"
            if h.gpu_type is None:  # not probed: what its jobs ask for
                settings = h.slurm_settings
                h = dataclasses.replace(h, gpu_count=settings.gpus_per_node * settings.nodes)
        price = (
            f"{human_money(h.price_usd_per_gpu_hour, None)}/GPU-h {h.pricing}"
            if h.price_usd_per_gpu_hour is not None
            else "no price"
        )
        gpus = (
            f"{h.gpu_count} x {h.gpu_type}"
            if h.gpu_type
            else (f"{h.gpu_count} GPUs" if h.gpu_count is not None else "not probed")
        )
        print(f"{h.name:<16} {where:<32} {gpus:<24} {price}")
    return 0


SLURM_FLAGS = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "gpus_per_node": "gpus_per_node",
    "nodes": "nodes",
    "time_limit": "time_limit",
    "signal_lead": "signal_lead_s",
    "container_image": "container_image",
    "setup": "setup",
}


def _price_arg(value: float | None, flag: str) -> float | None:
    try:
        check_price(value)
    except HostError as exc:
        raise UsageError(f"{flag}: {exc}; give dollars per GPU-hour, 0 or more") from None
    return value


def _slurm_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The Slurm settings the flags give (None without --slurm; a Slurm flag without it is refused)."""
    given = {key: getattr(args, flag) for flag, key in SLURM_FLAGS.items() if getattr(args, flag) is not None}
    flags = ["--" + flag.replace("_", "-") for flag in SLURM_FLAGS if getattr(args, flag) is not None]
    if args.requeue:
        given["requeue"] = True
        flags.append("--requeue")
    if args.gres:
        given["gpu_flag"] = "gres"
        flags.append("--gres")
    if args.slurm:
        return given
    if flags:
        raise UsageError(f"{flags[0]}: a Slurm setting; add --slurm to make {args.name!r} a Slurm login node")
    return None


def _add(args: argparse.Namespace) -> int:
    _price_arg(args.price, "--price")
    if args.name == LOCAL_HOST_NAME:
        return _add_local(args)
    slurm = _slurm_settings(args)
    try:
        base = ssh_config_host(args.name)
        # `--hostname gpu-1` connects as `ssh gpu-1` would: the config's port, user, key and jump for it
        via = ssh_config_host(args.hostname) if base is None and args.hostname else None
    except HostError as exc:
        raise UsageError(f"NAME: {exc}") from None
    if base is None and not args.hostname:
        raise UsageError(f"--hostname: needed, {args.name!r} is not a Host alias or pattern of the SSH config")
    if via is not None:
        base = dataclasses.replace(via, name=args.name)
    base = base or Host(name=args.name, kind="ssh", hostname=args.hostname)
    changes = {
        "hostname": None if via is not None else args.hostname,
        "port": args.port,
        "user": args.user,
        "identity_file": args.identity_file,
        "proxy_jump": args.proxy_jump,
        "python": args.python,
        "remote_root": args.remote_root,
        "price_usd_per_gpu_hour": args.price,
    }
    host = dataclasses.replace(
        base,
        **{k: v for k, v in changes.items() if v is not None},
        pricing="spot" if args.spot else "on-demand",
        kind="slurm" if slurm is not None else "ssh",
        slurm=cast(SlurmSettingsDoc | None, slurm),  # as the user gave them: checked just below
    )
    if host.kind == "slurm":
        try:
            host = dataclasses.replace(host, slurm=host.slurm_settings.to_dict())
        except HostError as exc:
            raise UsageError(_slurm_flag_message(str(exc))) from None
    try:
        add_host(args.db, host)
    except HostError as exc:
        raise UsageError(f"NAME: {exc}") from None
    what = "Slurm login node" if host.kind == "slurm" else "host"
    print(json.dumps(_host_doc(host)) if args.json else f"added {what} {host.name} ({host.hostname}:{host.port})")
    return 0


def _slurm_flag_message(message: str) -> str:
    """A Slurm setting's error named by its flag (``time_limit: ...`` -> ``--time-limit: ...``)."""
    for flag, key in SLURM_FLAGS.items():
        marker = f"{key}: "
        if marker in message:
            return "--" + flag.replace("_", "-") + ": " + message.split(marker, 1)[1]
    return message


def _add_local(args: argparse.Namespace) -> int:
    """``hosts add local --price X [--spot]``: this machine is always there; only its price can be set."""
    others = [f for f in ("hostname", "port", "user", "identity_file", "proxy_jump", "remote_root") if getattr(args, f)]
    if others or args.slurm:
        flag = "--slurm" if args.slurm else "--" + others[0].replace("_", "-")
        raise UsageError(f"{flag}: {LOCAL_HOST_NAME!r} is this machine; only --price, --spot and --python apply")
    if args.price is None:
        raise UsageError(f"--price: {LOCAL_HOST_NAME!r} is this machine and always there; give its price to set it")
    host = set_price(args.db, LOCAL_HOST_NAME, args.price, "spot" if args.spot else "on-demand")
    if args.python:
        from gpuplanner.launch.hosts import update_host

        host = dataclasses.replace(host, python=args.python)
        update_host(args.db, host)
    print(
        json.dumps(_host_doc(host))
        if args.json
        else f"this machine: {human_money(args.price, None)}/GPU-h {host.pricing}"
    )
    return 0


def _set_after_run(args: argparse.Namespace) -> int:
    command = None if args.after_run.strip().lower() in ("none", "-") else args.after_run
    if command is not None and not command.strip():
        raise UsageError("COMMAND: an empty command; give 'none' to remove the after-run command")
    idle: IdleRule | None = None
    if args.when_idle_below is not None or args.idle_minutes is not None:
        if command is None:
            raise UsageError("--when-idle-below: needs an after-run COMMAND to run")
        if args.when_idle_below is None:
            raise UsageError("--idle-minutes: give --when-idle-below PCT too")
        idle = {"util_pct": args.when_idle_below, "minutes": 10.0 if args.idle_minutes is None else args.idle_minutes}
    try:
        host = set_after_run(args.db, args.name, command, idle)
    except HostError as exc:
        flag = "--when-idle-below/--idle-minutes" if idle and "idle" in str(exc) else "NAME"
        raise UsageError(f"{flag}: {exc}") from None
    if args.json:
        print(json.dumps(_host_doc(host)))
    elif command and idle:
        print(
            f"{host.name}: after each run, once its GPUs stayed under {idle['util_pct']:g}% for "
            f"{idle['minutes']:g} min: {command}"
        )
    else:
        print(f"{host.name}: after each run: {command}" if command else f"{host.name}: no after-run command")
    return 0


def _set_price(args: argparse.Namespace) -> int:
    text = args.usd.strip().lower()
    if text in ("none", "-"):
        price = None
    else:
        try:
            price = float(text.removeprefix("$"))
        except ValueError:
            raise UsageError(f"USD: {args.usd!r} is not a number of dollars per GPU-hour") from None
        _price_arg(price, "USD")
    pricing = "spot" if args.spot else ("on-demand" if args.on_demand else None)
    try:
        host = set_price(args.db, args.name, price, pricing)
    except HostError as exc:
        raise UsageError(f"NAME: {exc}") from None
    if args.json:
        print(json.dumps(_host_doc(host)))
    elif price is None:
        print(f"{host.name}: no price")
    else:
        print(f"{host.name}: {human_money(price, None)}/GPU-h {host.pricing}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    try:
        remove_host(args.db, args.name)
    except HostError as exc:
        raise UsageError(f"NAME: {exc}") from None
    print(json.dumps({"removed": args.name}) if args.json else f"removed host {args.name}")
    return 0


def _probe_failure(result: Any) -> str:
    """Why a probe failed, in one line: the missing modules and how to install them, else the last line of
    the host's error, else that it said nothing."""
    missing = ", ".join(result.get("missing") or [])
    error_lines = [line.strip() for line in str(result.get("error") or "").splitlines() if line.strip()]
    error = error_lines[-1] if error_lines else ""
    if missing:
        return f"missing {missing}; {result.get('install_hint') or error or 'install them on the host'}"
    return error or "the probe failed without a message (run `python -m trainer probe` on the host to see why)"


def _probe(args: argparse.Namespace) -> int:
    result = _on_host(args, lambda manager: manager.probe(args.name))
    if result is None:
        return 1
    if args.json:
        print(json.dumps(result, indent=1))
    if not result.get("ok"):  # one line on stderr saying why, whatever the failure (issue 27 item 11)
        print(f"gpuplanner hosts probe: {args.name}: {_probe_failure(result)}", file=sys.stderr)
    elif not args.json:
        gpus = ", ".join(g["name"] for g in result.get("gpus", [])) or "no GPU"
        print(
            f"{args.name}: {gpus}; Python {result.get('python')}, torch {result.get('torch')}, "
            f"CUDA {result.get('cuda_runtime')}, driver {result.get('driver')}"
        )
    return 0 if result.get("ok") else 1
