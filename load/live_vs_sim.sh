#!/usr/bin/env bash
# The live proxy against the simulator: replays a trace through `bloomgate serve` (probation
# admission, the cache size and doorkeeper capacity `simulate` picks) one request at a time, runs
# `bloomgate simulate --policies probation --weigh proxy` on the same trace and cache size (each
# object weighed as the proxy stores it: body, head, key), and prints both object hit ratios and
# their difference, with the simulator's figure for bodies alone (`--weigh body`, the default)
# beside them. Exits 1 when the live and proxy-weighed ratios differ by more than 1 point.
#
# Usage: load/live_vs_sim.sh [TRACE] [CACHE_PERCENT]   (default: load/traces/web07.csv.gz at 5)
# Environment:
#   BLOOMGATE=path/to/bloomgate   the binary (default: $CARGO_TARGET_DIR or target, release; built if missing)
#   CONCURRENCY=1                 requests in flight during the replay (more reorders the trace and
#                                 coalesces concurrent misses, which the simulator does not model)
#   KEEP=1                        keep the work directory (config, logs, reports)
set -euo pipefail

TRACE=$(realpath "${1:-$(dirname "$0")/traces/web07.csv.gz}")
PERCENT=${2:-5}
cd "$(dirname "$0")/.."
# shellcheck source=load/lib.sh
source load/lib.sh
find_bloomgate

for weigh in proxy body; do
  "$BLOOMGATE" simulate --trace "$TRACE" --cache-percent "$PERCENT" --policies probation \
    --weigh "$weigh" --json >"$WORK/sim-$weigh.json" || die "simulate --weigh $weigh failed"
done
read -r CACHE_BYTES CAPACITY SIM_RATIO BODY_RATIO < <(python3 - "$WORK/sim-proxy.json" "$WORK/sim-body.json" <<'PY'
import json, sys
proxy, body = (json.load(open(path))["caches"][0] for path in sys.argv[1:3])
assert (proxy["cache_bytes"], proxy["doorkeeper"]) == (body["cache_bytes"], body["doorkeeper"])
print(proxy["cache_bytes"], proxy["doorkeeper"]["capacity"],
      proxy["policies"][0]["hit_ratio"], body["policies"][0]["hit_ratio"])
PY
)

start_origin origin
# The simulator's probation: its default share, no age limit on the doorkeeper within the
# replay's minutes, any object that fits in the cache storable.
write_config "$WORK/proxy.toml" "$ORIGIN_URL" "[cache]
max_bytes = $CACHE_BYTES
max_object_bytes = $CACHE_BYTES
[admission]
mode = \"probation\"
probation_share = 0.1
capacity = $CAPACITY"
start_proxy proxy "$WORK/proxy.toml"

"$BLOOMGATE" replay --trace "$TRACE" --concurrency "${CONCURRENCY:-1}" --target "$PROXY_URL" --json \
  >"$WORK/replay.json" || die "replay failed"
scrape "$ADMIN_URL" "$WORK/proxy.metrics" || die "no metrics from $ADMIN_URL"

python3 - "$WORK/replay.json" "$SIM_RATIO" "$TRACE" "$PERCENT" "$CACHE_BYTES" "$CAPACITY" "$BODY_RATIO" <<'PY'
import json, sys
replay = json.load(open(sys.argv[1]))
sim = float(sys.argv[2])
body = float(sys.argv[7])
live = replay["hit_ratio"]
print(f"trace {sys.argv[3]}, cache {sys.argv[4]}% of its footprint ({sys.argv[5]} bytes), "
      f"doorkeeper capacity {sys.argv[6]}")
print(f"  live (bloomgate serve, replayed):  {100 * live:6.2f} % object hits of {replay['requests']} requests")
print(f"  simulate, --weigh proxy:           {100 * sim:6.2f} %")
print(f"  difference (live - simulated):     {100 * (live - sim):+6.2f} points")
print(f"  simulate, --weigh body:            {100 * body:6.2f} % (live - body: {100 * (live - body):+.2f})")
sys.exit(0 if abs(live - sim) <= 0.01 else 1)
PY
