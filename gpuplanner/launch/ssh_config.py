"""The user's OpenSSH client configuration: which aliases it names, and what one alias resolves to.

An alias is resolved with ``ssh -G ALIAS`` when OpenSSH's client is installed: it applies everything
the user's own ``ssh`` would (``Include``, ``Match`` blocks, ``Host *`` defaults, canonicalisation), so
GPU Planner connects where ``ssh ALIAS`` connects. (``Match exec`` commands run, as they do for
``ssh``.) Without the client, paramiko's parser reads the file, with its ``Include`` files inlined;
what it cannot read (``Match`` criteria it does not know, which it would take as matching; a
``Match exec`` without the ``invoke`` package) is reported as an :class:`SSHConfigError` naming the file,
never a traceback. ``IdentityFile`` values get ``~`` and the ``%h %p %r %u %n %d %l %%`` tokens
expanded; the client's default key list (``~/.ssh/id_*``) is left to the connection, which tries those
keys anyway.

The aliases offered (``Host`` lines without wildcards or negations) are read from the file and every
file it includes, relative paths being under ``~/.ssh`` as ``ssh_config(5)`` says. A name that only a
pattern names (``Host gpu-*`` and ``gpu-1``) is :func:`known` too, and resolves as ``ssh gpu-1`` would.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import paramiko

MAX_INCLUDE_DEPTH = 16
SSH_G_TIMEOUT_S = 15.0
DEFAULT_KEYS = {
    f"~/.ssh/{name}"
    for name in ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa")
}


class SSHConfigError(ValueError):
    """The SSH config could not be read; the message names the file and says what to do."""


@dataclass(frozen=True)
class Resolved:
    """What one alias resolves to (``source``: ``ssh -G`` or ``paramiko``)."""

    alias: str
    hostname: str
    port: int
    user: str | None
    identity_file: str | None
    proxy_jump: str | None
    source: str


def default_path() -> Path:
    """``$GPUPLANNER_SSH_CONFIG`` (tests) or ``~/.ssh/config``."""
    return Path(os.environ.get("GPUPLANNER_SSH_CONFIG") or Path.home() / ".ssh" / "config")


def _words(line: str) -> tuple[str, list[str]]:
    """A config line's keyword (lower case) and its arguments (``Key=value`` and quotes allowed)."""
    m = re.match(r"\s*([A-Za-z]\w*)\s*(?:=\s*|\s+|\Z)(.*)", line)
    if not m:
        return "", []
    try:
        args = shlex.split(m.group(2), comments=True)
    except ValueError:
        args = m.group(2).split()
    return m.group(1).lower(), args


def _included(pattern: str) -> list[Path]:
    expanded = os.path.expanduser(pattern)
    if not os.path.isabs(expanded):
        expanded = str(Path.home() / ".ssh" / expanded)
    return [Path(p) for p in sorted(glob.glob(expanded)) if Path(p).is_file()]


def _flatten(file: Path, depth: int = 0) -> list[tuple[Path, str]]:
    """The file's lines with every ``Include`` replaced by the included files' lines (in order)."""
    if depth > MAX_INCLUDE_DEPTH:
        raise SSHConfigError(f"{file}: Include nested more than {MAX_INCLUDE_DEPTH} deep (a loop?)")
    try:
        text = file.read_text(errors="replace")
    except OSError as exc:
        raise SSHConfigError(f"{file}: cannot read it: {exc.strerror or exc}") from None
    out: list[tuple[Path, str]] = []
    for line in text.splitlines():
        key, args = _words(line)
        if key == "include":
            for pattern in args:
                for inc in _included(pattern):
                    out += _flatten(inc, depth + 1)
        else:
            out.append((file, line))
    return out


def aliases(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The concrete ``Host`` aliases of the config and the files it includes, sorted."""
    file = Path(path) if path else default_path()
    if not file.is_file():
        return []
    found: set[str] = set()
    for _, line in _flatten(file):
        key, args = _words(line)
        if key == "host":
            found.update(a for a in args if not any(c in a for c in "*?!"))
    return sorted(found)


def _pattern_matches(name: str, pattern: str) -> bool:
    """``ssh_config(5)`` patterns: ``*`` any run of characters, ``?`` one; nothing else is special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name) is not None


def known(name: str, path: str | os.PathLike[str] | None = None) -> bool:
    """Whether a ``Host`` line of the config (or a file it includes) applies to ``name``: a concrete alias,
    or a pattern such as ``gpu-*`` (with ``!`` negations, as ``ssh`` reads them). ``Host *`` alone (the
    defaults every name gets) does not make a name known: a mistyped name must not pass as configured."""
    file = Path(path) if path else default_path()
    if not file.is_file():
        return False
    for _, line in _flatten(file):
        key, args = _words(line)
        if key != "host":
            continue
        negated = [a[1:] for a in args if a.startswith("!")]
        positive = [a for a in args if not a.startswith("!") and a != "*"]
        if any(_pattern_matches(name, p) for p in negated):
            continue
        if any(_pattern_matches(name, p) for p in positive):
            return True
    return False


def expand_tokens(value: str, *, alias: str, hostname: str, port: int, user: str | None) -> str:
    """``~`` and the ``%`` tokens ssh expands in ``IdentityFile``."""
    home = str(Path.home())
    table = {
        "%": "%",
        "h": hostname,
        "p": str(port),
        "r": user or "",
        "u": os.environ.get("USER") or os.environ.get("LOGNAME") or "",
        "n": alias,
        "d": home,
        "l": socket.gethostname().split(".")[0],
        "L": socket.gethostname().split(".")[0],
    }
    out, i = [], 0
    while i < len(value):
        if value[i] == "%" and i + 1 < len(value) and value[i + 1] in table:
            out.append(table[value[i + 1]])
            i += 2
        else:
            out.append(value[i])
            i += 1
    text = "".join(out)
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    return text


def _identity(files: list[str], **where: object) -> str | None:
    chosen = next((f for f in files if f not in DEFAULT_KEYS), None)
    return expand_tokens(chosen, **where) if chosen else None  # type: ignore[arg-type]


def _proxy_jump(value: str | None) -> str | None:
    return None if value is None or value.strip().lower() == "none" else value.strip()


def _with_ssh_g(ssh: str, alias: str, file: Path) -> Resolved:
    argv = [ssh, "-G", "-F", str(file), alias] if file.is_file() else [ssh, "-G", alias]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SSH_G_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SSHConfigError(f"{file}: `ssh -G {alias}` did not answer: {exc}") from None
    if done.returncode != 0:
        why = " ".join(done.stderr.strip().splitlines()[-2:]) or f"exit {done.returncode}"
        raise SSHConfigError(f"{file}: `ssh -G {alias}` could not resolve it: {why}")
    values: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key.lower(), []).append(value.strip())
    hostname = values.get("hostname", [alias])[0]
    port = int(values.get("port", ["22"])[0])
    user = values.get("user", [None])[0]
    return Resolved(
        alias,
        hostname,
        port,
        user,
        _identity(values.get("identityfile", []), alias=alias, hostname=hostname, port=port, user=user),
        _proxy_jump(values.get("proxyjump", [None])[0]),
        "ssh -G",
    )


PARAMIKO_MATCH = ("all", "canonical", "final", "exec", "host", "originalhost", "user", "localuser")
_HINT = "install OpenSSH's client (ssh), which resolves every ssh_config feature, or simplify the file"


def _check_matches(lines: list[tuple[Path, str]]) -> None:
    """Refuse ``Match`` criteria paramiko would silently treat as matching (``localnetwork``, ``tagged``, ...)."""
    for where, line in lines:
        key, args = _words(line)
        if key != "match":
            continue
        words = iter(args)
        for word in words:
            criterion = word.lstrip("!").lower()
            if criterion not in PARAMIKO_MATCH:
                raise SSHConfigError(
                    f"{where}: paramiko's parser cannot read it (it cannot evaluate 'Match {criterion}'); {_HINT}"
                )
            if criterion not in ("all", "canonical", "final"):
                next(words, None)


def _with_paramiko(alias: str, file: Path) -> Resolved:
    hint = _HINT
    lines = _flatten(file)
    _check_matches(lines)
    try:
        config = paramiko.SSHConfig.from_text("\n".join(line for _, line in lines))
        entry = config.lookup(alias)
    except SSHConfigError:
        raise
    except Exception as exc:  # paramiko raises a range of types for what it cannot parse (Match criteria)
        raise SSHConfigError(
            f"{file}: paramiko's parser cannot read it ({type(exc).__name__}: {exc}); {hint}"
        ) from None
    hostname = entry.get("hostname", alias)
    try:
        port = int(entry.get("port", 22))
    except ValueError:
        raise SSHConfigError(f"{file}: Port of {alias!r} is not a number: {entry.get('port')!r}") from None
    user = entry.get("user")
    return Resolved(
        alias,
        hostname,
        port,
        user,
        _identity(list(entry.get("identityfile") or []), alias=alias, hostname=hostname, port=port, user=user),
        _proxy_jump(entry.get("proxyjump")),
        "paramiko",
    )


def resolve(alias: str, path: str | os.PathLike[str] | None = None, *, use_ssh: bool | None = None) -> Resolved:
    """What ``alias`` resolves to: ``ssh -G`` when OpenSSH's client is installed (``use_ssh`` forces a
    choice), else paramiko's parser. :class:`SSHConfigError` with the reason when neither can."""
    file = Path(path) if path else default_path()
    ssh = shutil.which("ssh") if use_ssh is not False else None
    if use_ssh and ssh is None:
        raise SSHConfigError("OpenSSH's client (ssh) is not installed")
    if ssh is not None:
        return _with_ssh_g(ssh, alias, file)
    if not file.is_file():
        return Resolved(alias, alias, 22, None, None, None, "paramiko")
    return _with_paramiko(alias, file)
