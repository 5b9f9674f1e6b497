#!/usr/bin/env bash
# The whole suite from a fresh clone of this repository (nothing cached), with two CPU hogs (busy loops, one per
# core of a 2-core machine) running for its whole duration: the realtime tests must hold under load.
#   scripts/stress_test.sh [number of hogs, default 2]
# Prints the suite's result and wall time; exit code = the suite's. The hogs and the clone are removed at the end.
set -o pipefail
HOGS="${1:-2}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d -t flexarm-stress-XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
echo "[stress] fresh clone of $SRC in $WORK"
git clone -q "$SRC" "$WORK/flexarm" || exit 1
cd "$WORK/flexarm" || exit 1
for _ in $(seq "$HOGS"); do
    ( while :; do :; done ) &
    pids+=("$!")
done
echo "[stress] $HOGS CPU hogs running (pids ${pids[*]}); make test"
t0=$(date +%s)
CI="${CI:-true}" make test
rc=$?
echo "[stress] make test exit $rc, $(( $(date +%s) - t0 )) s wall with $HOGS hogs"
exit $rc
