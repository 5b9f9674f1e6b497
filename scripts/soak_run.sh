#!/usr/bin/env bash
# Memory of a long `flexarm run` (issue 18: it grew ~0.5 MB/s keeping every state sample).
#   scripts/soak_run.sh [minutes, default 10] [controller, default modal]
# Samples the runner's resident memory every 10 s and prints the growth; run after `make setup`.
set -o pipefail
MIN="${1:-10}"
CTRL="${2:-modal}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" && . ./env.sh || exit 1
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-57}"
flexarm run --controller "$CTRL" --duration "$(( MIN * 60 ))" --quiet --json > /tmp/flexarm_soak.json &
pid=$!
first=""
t0=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    if [ -n "$rss" ]; then
        # the baseline: the first sample once the runner is up (30 s in: imports, nodes, kernels loaded)
        [ -z "$first" ] && [ $(( $(date +%s) - t0 )) -ge 30 ] && first=$rss
        echo "$(date +%T) runner RSS $(( rss / 1024 )) MB"
        last=$rss
    fi
    sleep 10
done
wait "$pid"; rc=$?
echo "[soak] exit $rc; runner RSS 30 s in $(( ${first:-0} / 1024 )) MB, last $(( ${last:-0} / 1024 )) MB, growth $(( (${last:-0} - ${first:-0}) / 1024 )) MB over $MIN min"
python - <<PY
import json; s = json.load(open('/tmp/flexarm_soak.json'))
print('[soak] summary:', {k: s[k] for k in ('joint_rms_error_rad', 'peak_tip_deflection_m', 'overruns', 'controller_states_skipped', 'controller_safe_mode_entries', 'sample_stride')})
PY
