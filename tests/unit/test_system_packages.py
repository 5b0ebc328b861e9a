"""tools/ensure_system_packages.sh: the one list of system packages, checked with dpkg, installed when it can be.

A missing package is simulated with fake ``dpkg-query``, ``apt-get``, ``apt-cache``, ``id`` and ``sudo``
commands put first on PATH (nothing is uninstalled or installed for real): the fake dpkg database is
a file of package names, and the fake apt-get records its calls and "installs" into that file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "ensure_system_packages.sh"
LIST = REPO_ROOT / "tools" / "system-packages.txt"

FAKES = {
    "dpkg-query": """#!/bin/sh
# dpkg-query -W -f='${Status}' NAME
for name; do :; done
if grep -qx -- "$name" "$FAKE_DPKG_DB"; then printf 'install ok installed'; exit 0; fi
echo "dpkg-query: no packages found matching $name" >&2; exit 1
""",
    "apt-get": """#!/bin/sh
echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND apt-get $*" >>"$FAKE_APT_LOG"
if [ "$1" = install ]; then
  for arg; do case "$arg" in -*|install) ;; *) echo "$arg" >>"$FAKE_DPKG_DB" ;; esac; done
fi
""",
    "apt-cache": """#!/bin/sh
# apt-cache show --no-all-versions NAME: known when listed in $FAKE_APT_KNOWN
for name; do :; done
grep -qx -- "$name" "$FAKE_APT_KNOWN"
""",
    "id": """#!/bin/sh
echo "$FAKE_UID"
""",
    "sudo": """#!/bin/sh
# sudo -n CMD...: runs CMD when $FAKE_SUDO is "nopasswd", otherwise needs a password
[ "$1" = -n ] && shift
if [ "$FAKE_SUDO" != nopasswd ]; then echo "sudo: a password is required" >&2; exit 1; fi
echo "sudo $*" >>"$FAKE_APT_LOG"
exec "$@"
""",
}


def listed_packages(purpose: str) -> list[str]:
    """The package column of the real list's rows for one purpose."""
    names = []
    for line in LIST.read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#") and purpose in fields[1].split(","):
            names.append(fields[0])
    return names


class FakeSystem:
    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        for name, text in FAKES.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.db = root / "dpkg-db"
        self.known = root / "apt-known"
        self.log = root / "apt-log"
        self.db.write_text("")
        self.known.write_text("")
        self.env = {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "FAKE_DPKG_DB": str(self.db),
            "FAKE_APT_KNOWN": str(self.known),
            "FAKE_APT_LOG": str(self.log),
            "FAKE_UID": "1000",
            "FAKE_SUDO": "password",
        }
        for name in ("GPUPLANNER_INSTALL", "GPUPLANNER_DPKG_QUERY", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"):
            self.env.pop(name, None)  # set when the suite itself runs under `make test`

    def installed(self, names: list[str]) -> None:
        self.db.write_text("".join(f"{n}\n" for n in names))

    def apt_knows(self, names: list[str]) -> None:
        self.known.write_text("".join(f"{n}\n" for n in names))

    def apt_calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def run(self, *args: str, cwd: Path = REPO_ROOT, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=cwd, env={**self.env, **env}, capture_output=True, text=True, timeout=120, check=False
        )


@pytest.fixture
def fake(tmp_path: Path) -> FakeSystem:
    return FakeSystem(tmp_path)


def everything_but(purpose: str, *missing: str) -> list[str]:
    """Installed names: every alternative of every listed package except those given."""
    names = []
    for spec in listed_packages(purpose):
        if spec not in missing:
            names.extend(spec.split("|"))
    return names


def test_the_list_is_well_formed_and_covers_what_the_tests_and_window_use() -> None:
    rows = [line.split() for line in LIST.read_text().splitlines() if line.split() and not line.startswith("#")]
    assert all(len(row) == 3 for row in rows), [row for row in rows if len(row) != 3]
    for _package, purposes, probe in rows:
        assert set(purposes.split(",")) <= {"test", "run"}
        assert probe.split(":", 1)[0] in {"file", "cmd", "lib", "py"}
    test = {p.split("|")[0] for p in listed_packages("test")}
    run = {p.split("|")[0] for p in listed_packages("run")}
    assert {"openssh-server", "openssh-client", "iproute2", "xvfb", "desktop-file-utils", "appstream"} <= test
    assert {"slurmctld", "slurmd", "slurm-client", "munge", "python3-venv", "libegl1", "libgl1"} <= test
    assert {"libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0", "libegl1"} <= run
    assert not {"openssh-server", "slurmctld"} & run  # the window does not need the test servers


def test_this_machine_has_what_the_tests_need() -> None:
    """`make test` ran the script before pytest, so the check passes here (and says nothing)."""
    result = subprocess.run(
        ["bash", str(SCRIPT), "--for", "test", "--check-only"], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_a_missing_package_prints_the_install_command_and_fails(fake: FakeSystem) -> None:
    fake.installed(everything_but("test", "openssh-server", "libglib2.0-0|libglib2.0-0t64"))
    fake.apt_knows(["openssh-server", "libglib2.0-0t64"])  # a release with the t64 name only
    result = fake.run("bash", str(SCRIPT), "--for", "test")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "GPU Planner: the tests (make test) need system packages that are not installed: "
        "libglib2.0-0t64 openssh-server",
        "Install them with:",
        "  sudo apt-get update && sudo apt-get install -y --no-install-recommends libglib2.0-0t64 openssh-server",
        "then run the command again.",
    ]
    assert fake.apt_calls() == []  # sudo wants a password: nothing was tried


def test_root_installs_what_is_missing_with_one_update(fake: FakeSystem) -> None:
    fake.installed(everything_but("test", "openssh-server", "iproute2", "libglib2.0-0|libglib2.0-0t64"))
    fake.apt_knows(["openssh-server", "iproute2", "libglib2.0-0"])
    result = fake.run("bash", str(SCRIPT), "--for", "test", FAKE_UID="0")
    assert result.returncode == 0, result.stderr
    assert fake.apt_calls() == [
        "DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "libglib2.0-0 openssh-server iproute2",
    ]
    assert "installing the system packages" in result.stderr
    # now everything is there: a second run does nothing
    assert fake.run("bash", str(SCRIPT), "--for", "test", FAKE_UID="0").returncode == 0
    assert len(fake.apt_calls()) == 2


def test_passwordless_sudo_installs_too(fake: FakeSystem) -> None:
    fake.installed(everything_but("run", "libxcb-cursor0"))
    fake.apt_knows(["libxcb-cursor0"])
    result = fake.run("bash", str(SCRIPT), "--for", "run", FAKE_SUDO="nopasswd")
    assert result.returncode == 0, result.stderr
    assert fake.apt_calls() == [
        "sudo true",  # the script asks whether sudo works without a password
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libxcb-cursor0",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libxcb-cursor0",
    ]


def test_check_only_never_installs_even_as_root(fake: FakeSystem) -> None:
    fake.installed(everything_but("test", "xvfb"))
    fake.apt_knows(["xvfb"])
    result = fake.run("bash", str(SCRIPT), "--for", "test", FAKE_UID="0", GPUPLANNER_INSTALL="never")
    assert result.returncode == 1
    assert "  apt-get update && apt-get install -y --no-install-recommends xvfb" in result.stderr.splitlines()
    assert fake.apt_calls() == []


@pytest.mark.parametrize(
    "apt_get",
    [
        '#!/bin/sh\necho "apt-get $*" >>"$FAKE_APT_LOG"\n',  # succeeds but installs nothing
        '#!/bin/sh\necho "E: Could not resolve deb.debian.org" >&2\nexit 100\n',  # no network
    ],
)
def test_an_install_that_fails_prints_the_command_to_run(fake: FakeSystem, apt_get: str) -> None:
    fake.installed(everything_but("test", "munge"))
    fake.apt_knows(["munge"])
    (fake.bin / "apt-get").write_text(apt_get)
    result = fake.run("bash", str(SCRIPT), "--for", "test", FAKE_UID="0")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-4:] == [
        "GPU Planner: apt-get could not install what the tests (make test) need: munge",
        "Install them with:",
        "  apt-get update && apt-get install -y --no-install-recommends munge",
        "then run the command again.",
    ]


def test_make_test_stops_before_pytest_and_make_run_before_the_window(fake: FakeSystem, tmp_path: Path) -> None:
    fake.installed(everything_but("test", "openssh-server") + everything_but("run", "libxcb-icccm4"))
    fake.apt_knows(["openssh-server", "libxcb-icccm4"])
    venv = tmp_path / "venv"
    result = fake.run("make", "test", f"VENV={venv}")
    assert result.returncode != 0
    assert "apt-get install -y --no-install-recommends openssh-server" in result.stderr
    assert "pytest" not in result.stdout and not venv.exists()  # stopped before the venv and pytest

    result = fake.run("make", "run", f"VENV={venv}")
    assert result.returncode != 0
    assert "the window (make run) needs system packages that are not installed: libxcb-icccm4" in result.stderr
    assert "gpuplanner" not in result.stdout and not venv.exists()


def write_list(path: Path, rows: list[str]) -> Path:
    path.write_text("# package  for  probe\n" + "".join(f"{row}\n" for row in rows))
    return path


def test_without_dpkg_the_probes_decide(tmp_path: Path) -> None:
    present = tmp_path / "sshd"
    present.write_text("")
    env = {**os.environ, "GPUPLANNER_DPKG_QUERY": str(tmp_path / "no-dpkg-query")}
    env.pop("GPUPLANNER_INSTALL", None)
    everything = write_list(
        tmp_path / "ok.txt",
        [f"openssh-server test file:{present}", "bash-itself test cmd:bash", "pythons-json test py:json"],
    )
    result = subprocess.run(
        ["bash", str(SCRIPT), "--list", str(everything)], env=env, capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (0, "")

    lacking = write_list(
        tmp_path / "lacking.txt",
        [
            f"openssh-server test file:{present}",
            f"xvfb test cmd:{tmp_path.name}-no-such-command",
            "libxcb-nothing0 run,test lib:libxcb-nothing-here.so.0",
        ],
    )
    result = subprocess.run(
        ["bash", str(SCRIPT), "--list", str(lacking)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "GPU Planner: this system has no dpkg, and the tests (make test) need what it lacks:",
        f"  - the command {tmp_path.name}-no-such-command (Debian package xvfb)",
        "  - the shared library libxcb-nothing-here.so.0 (Debian package libxcb-nothing0)",
        "Install them with your system's package manager, then run the command again.",
    ]


def test_on_macos_the_linux_libraries_are_not_asked_for(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "uname").write_text("#!/bin/sh\necho Darwin\n")
    (fake_bin / "uname").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "GPUPLANNER_DPKG_QUERY": str(tmp_path / "no-dpkg-query"),
    }
    env.pop("GPUPLANNER_INSTALL", None)
    listed = write_list(tmp_path / "list.txt", ["libxcb-nothing0 run lib:libxcb-nothing-here.so.0"])
    result = subprocess.run(
        ["bash", str(SCRIPT), "--for", "run", "--list", str(listed)], env=env, capture_output=True, text=True
    )
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--for", "tests"], "--for must be test, run or all, not 'tests'"),
        (["--list", "/nonexistent/list.txt"], "cannot read the package list /nonexistent/list.txt"),
        (["--bogus"], "usage:"),
    ],
)
def test_bad_usage_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr


def test_help_is_the_header() -> None:
    result = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith("Make sure the system packages of tools/system-packages.txt")
    assert "GPUPLANNER_INSTALL=never" in result.stdout and "set -euo" not in result.stdout


def test_a_malformed_list_line_names_the_package(tmp_path: Path) -> None:
    bad = write_list(tmp_path / "bad.txt", ["openssh-server test"])
    result = subprocess.run(["bash", str(SCRIPT), "--list", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "malformed line for 'openssh-server'" in result.stderr
