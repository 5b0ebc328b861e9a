#!/usr/bin/env bash
# Check what `make dist` built (CI runs it right after `make dist`):
#   1. the .desktop entry and the AppStream metainfo validate (desktop-file-validate, appstreamcli);
#   2. the wheel, installed in a fresh virtual environment, passes `gpuplanner --self-test` offscreen;
#   3. the frozen bundle passes `--self-test` offscreen, with no ModuleNotFoundError and no missing
#      Qt plugin in its output, stays under 400 MB, and its start time is printed.
# The fresh venv borrows the dependencies (PySide6, torch, ...) from the project's venv through a .pth
# file appended after its own site-packages, so `gpuplanner` itself can only come from the wheel and
# nothing is downloaded. The frozen app's tiny training run uses the project's venv as the Python
# with torch ($GPUPLANNER_TRAINER_PYTHON), the way a user points the bundle at one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV_PY="$ROOT/${VENV:-.venv}/bin/python"
MAX_BUNDLE_MB=400
export QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_dist: FAIL: $*" >&2; exit 1; }
step() { echo "check_dist: $*"; }
started=$SECONDS

# ---------------------------------------------------------------- 1. desktop metadata
step "desktop-file-validate"
desktop-file-validate packaging/linux/*.desktop || fail "the .desktop file does not validate"
step "appstreamcli validate"
appstreamcli validate --no-net packaging/linux/*.metainfo.xml || fail "the AppStream metainfo does not validate"

# ---------------------------------------------------------------- 2. the wheel in a fresh venv
shopt -s nullglob
wheels=(dist/gpuplanner-*.whl)
sdists=(dist/gpuplanner-*.tar.gz)
[ ${#wheels[@]} -eq 1 ] || fail "expected one wheel in dist/, found ${#wheels[@]}"
[ ${#sdists[@]} -eq 1 ] || fail "expected one sdist in dist/, found ${#sdists[@]}"
step "wheel ${wheels[0]} into a fresh venv"
"$VENV_PY" -m venv --without-pip "$work/venv"
"$VENV_PY" -m pip --python "$work/venv/bin/python" install --no-deps --quiet "${wheels[0]}"
fresh_site=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$VENV_PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$fresh_site/project_dependencies.pth"
mkdir -p "$work/elsewhere"
wheel_rc=0
(cd "$work/elsewhere" && "$work/venv/bin/gpuplanner" --self-test) > "$work/wheel.log" 2>&1 || wheel_rc=$?
sed 's/^/  wheel | /' "$work/wheel.log"
[ "$wheel_rc" -eq 0 ] || fail "the installed wheel's --self-test exited $wheel_rc"
grep -q "^PASS resources: installed" "$work/wheel.log" || fail "the wheel's self-test did not run from the installed wheel"

# ---------------------------------------------------------------- 3. the frozen bundle
bundle="dist/gpuplanner/gpuplanner"
[ -x "$bundle" ] || fail "no frozen bundle at $bundle"
size_mb=$(du -sm dist/gpuplanner | cut -f1)
step "frozen bundle: ${size_mb} MB"
[ "$size_mb" -lt "$MAX_BUNDLE_MB" ] || fail "the bundle is ${size_mb} MB, over ${MAX_BUNDLE_MB} MB"
t0=$(date +%s.%N)
version=$(cd "$work/elsewhere" && "$ROOT/$bundle" --version)
t1=$(date +%s.%N)
step "frozen start: '$version' in $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s"
frozen_rc=0
(cd "$work/elsewhere" && GPUPLANNER_TRAINER_PYTHON="$VENV_PY" "$ROOT/$bundle" --self-test) > "$work/frozen.log" 2>&1 \
  || frozen_rc=$?
sed 's/^/  frozen | /' "$work/frozen.log"
if grep -Eiq "ModuleNotFoundError|No module named|Could not load the Qt platform plugin|could not find the Qt platform plugin|Cannot load library.*plugin|Failed to load platform plugin" "$work/frozen.log"; then
  fail "the frozen bundle misses a module or a Qt plugin (see above)"
fi
[ "$frozen_rc" -eq 0 ] || fail "the frozen bundle's --self-test exited $frozen_rc"
grep -q "^PASS resources: frozen bundle" "$work/frozen.log" || fail "the frozen self-test did not see the frozen layout"
grep -q "^PASS training" "$work/frozen.log" || fail "the frozen self-test did not run the tiny training run"

step "all passed in $((SECONDS - started)) s"
