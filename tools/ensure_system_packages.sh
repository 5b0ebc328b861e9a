#!/usr/bin/env bash
# Make sure the system packages of tools/system-packages.txt are installed, before `make test`,
# `make run` or CI needs them.
#
#   tools/ensure_system_packages.sh [--for test|run|all] [--list FILE] [--check-only]
#
# On Debian and Ubuntu (dpkg): packages missing for the chosen purpose are installed when this can
# be done without asking (root runs apt-get, or `sudo -n` works): `apt-get update` once, then
# `apt-get install -y --no-install-recommends`, non-interactively. Otherwise one message lists the
# exact install command and the script exits 1, so nothing starts half-equipped.
# Without dpkg (another distribution, macOS): each package's probe (a file, a command, a shared
# library; libraries are Linux's, not checked on macOS) is checked instead; what is missing is named in
# words and the script exits 1.
#
# Exit status: 0 everything is there (or was installed), 1 something is missing, 2 bad usage.
# Environment: GPUPLANNER_INSTALL=never only checks and reports; GPUPLANNER_DPKG_QUERY names the
# dpkg-query command (tests point it at a fake one); PYTHON is the interpreter for py: probes.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
purpose="test"
list="$here/system-packages.txt"
check_only=0
[ "${GPUPLANNER_INSTALL:-}" = "never" ] && check_only=1

usage() { echo "usage: $0 [--for test|run|all] [--list FILE] [--check-only]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --for) [ $# -ge 2 ] || usage; purpose="$2"; shift 2 ;;
    --list) [ $# -ge 2 ] || usage; list="$2"; shift 2 ;;
    --check-only) check_only=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) usage ;;
  esac
done
case "$purpose" in
  test|run|all) ;;
  *) echo "$0: --for must be test, run or all, not '$purpose'" >&2; exit 2 ;;
esac
if [ ! -r "$list" ]; then
  echo "$0: cannot read the package list $list" >&2
  exit 2
fi
case "$purpose" in
  test) what="the tests (make test) need" ;;
  run) what="the window (make run) needs" ;;
  all) what="the tests and the window need" ;;
esac

# The list's rows for this purpose: "package|alternative probe" per line.
rows=()
while read -r package purposes probe rest; do
  case "$package" in ''|'#'*) continue ;; esac
  if [ -z "$purposes" ] || [ -z "$probe" ] || [ -n "$rest" ]; then
    echo "$0: $list: malformed line for '$package' (want: package purposes probe)" >&2
    exit 2
  fi
  if [ "$purpose" = all ] || [[ ",$purposes," == *",$purpose,"* ]]; then
    rows+=("$package $probe")
  fi
done <"$list"

dpkg_query="${GPUPLANNER_DPKG_QUERY:-dpkg-query}"

installed() {  # installed "a|b": true when dpkg knows one of the alternatives as installed
  local alt
  IFS='|' read -ra alts <<<"$1"
  for alt in "${alts[@]}"; do
    if [ "$("$dpkg_query" -W -f='${Status}' "$alt" 2>/dev/null || true)" = "install ok installed" ]; then
      return 0
    fi
  done
  return 1
}

find_library() {  # find_library SONAME: true when the dynamic loader can find it
  local soname="$1" ldconfig dir
  for ldconfig in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    if command -v "$ldconfig" >/dev/null 2>&1; then
      if "$ldconfig" -p 2>/dev/null | grep -qF "$soname "; then return 0; fi
      break
    fi
  done
  for dir in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /lib /lib64 /usr/lib /usr/lib64 /usr/local/lib /lib/*-linux-gnu /usr/lib/*-linux-gnu; do
    [ -e "$dir/$soname" ] && return 0
  done
  return 1
}

probe_ok() {  # probe_ok file:PATH | cmd:NAME | lib:SONAME | py:MODULE
  local kind="${1%%:*}" arg="${1#*:}"
  case "$kind" in
    file) [ -e "$arg" ] ;;
    cmd) command -v "$arg" >/dev/null 2>&1 ;;
    lib) [ "$(uname -s)" = Darwin ] || find_library "$arg" ;;  # on macOS Qt uses Cocoa, not these
    py) "${PYTHON:-python3}" -c "import $arg" >/dev/null 2>&1 ;;
    *) echo "$0: $list: unknown probe '$1'" >&2; exit 2 ;;
  esac
}

describe_probe() {
  local kind="${1%%:*}" arg="${1#*:}"
  case "$kind" in
    file) echo "the file $arg" ;;
    cmd) echo "the command $arg" ;;
    lib) echo "the shared library $arg" ;;
    py) echo "Python's $arg module (for ${PYTHON:-python3})" ;;
  esac
}

# ---------------------------------------------------------------- without dpkg: probes only
if ! command -v "$dpkg_query" >/dev/null 2>&1; then
  lacking=()
  for row in "${rows[@]}"; do
    read -r package probe <<<"$row"
    probe_ok "$probe" || lacking+=("$(describe_probe "$probe") (Debian package ${package%%|*})")
  done
  if [ ${#lacking[@]} -eq 0 ]; then
    exit 0
  fi
  {
    echo "GPU Planner: this system has no dpkg, and ${what} what it lacks:"
    printf '  - %s\n' "${lacking[@]}"
    echo "Install them with your system's package manager, then run the command again."
  } >&2
  exit 1
fi

# ---------------------------------------------------------------- with dpkg
missing() {
  local row package probe
  for row in "${rows[@]}"; do
    read -r package probe <<<"$row"
    installed "$package" || echo "$package"
  done
}

mapfile -t need < <(missing)
[ ${#need[@]} -eq 0 ] && exit 0

# An alternative ("libglib2.0-0|libglib2.0-0t64") becomes the first name this system's apt knows.
resolve() {
  local spec alt
  for spec in "$@"; do
    IFS='|' read -ra alts <<<"$spec"
    local chosen="${alts[0]}"
    for alt in "${alts[@]}"; do
      if apt-cache show --no-all-versions "$alt" >/dev/null 2>&1; then chosen="$alt"; break; fi
    done
    echo "$chosen"
  done
}

as_root=()
can_install=0
if [ "$check_only" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    can_install=1
  elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    can_install=1
    as_root=(sudo -n)
  fi
fi

print_install_command() {  # print_install_command HEADLINE: the one message, then exit 1
  local sudo_word=""
  [ "$(id -u)" -eq 0 ] || sudo_word="sudo "
  {
    echo "GPU Planner: $1: ${names[*]}"
    echo "Install them with:"
    echo "  ${sudo_word}apt-get update && ${sudo_word}apt-get install -y --no-install-recommends ${names[*]}"
    echo "then run the command again."
  } >&2
  exit 1
}

if [ "$can_install" -eq 1 ]; then
  echo "GPU Planner: installing the system packages that ${what}: ${need[*]}" >&2
  apt_env=(env DEBIAN_FRONTEND=noninteractive)
  if "${as_root[@]}" "${apt_env[@]}" apt-get update -qq; then
    mapfile -t names < <(resolve "${need[@]}")
    "${as_root[@]}" "${apt_env[@]}" apt-get install -y -qq --no-install-recommends "${names[@]}" >/dev/null || true
  else
    mapfile -t names < <(resolve "${need[@]}")
  fi
  mapfile -t need < <(missing)
  [ ${#need[@]} -eq 0 ] && exit 0
  mapfile -t names < <(resolve "${need[@]}")
  print_install_command "apt-get could not install what ${what}"
fi

mapfile -t names < <(resolve "${need[@]}")
print_install_command "${what} system packages that are not installed"
