#!/usr/bin/env bash
# Soak: replays a synthetic trace through one proxy at a steady rate for a bounded time, sampling the
# proxy's resident memory (VmRSS) and open file descriptors every few seconds. Checks that
#   - RSS stays within 1.25 x cache.max_bytes + the doorkeeper's filters + 16 MiB at every sample
#     and at its peak (VmHWM): the store weighs entries by what they hold in memory, so what is
#     left is the allocator's slack, connections' buffers and the process's own, and
#   - the open descriptors return to their level before the run once the client has gone (the
#     proxy's idle connections to the origin close after origin.pool_idle_timeout, set to 2s here).
# Prints the series, the growth of RSS over the second half of the run, and the verdicts; exits
# non-zero if a check fails.
#
# Usage: load/soak.sh             (from anywhere)
# Environment:
#   DURATION=180 RATE=800 INTERVAL=5   seconds of replay, requests/s, seconds between samples
#   CACHE=64MiB CAPACITY=5000          cache.max_bytes and admission.capacity
#   OBJECTS=60000 ONE_HIT=0.5          synthetic trace: distinct objects (median 8 KiB, log-normal:
#                                      ~800 MiB in all, so the cache fills and evicts), one-hit share
#   SIZE_MEDIAN= SIZE_SIGMA=1          objects of another median size (e.g. 1MiB), log-normal
#   DISK=                              a disk tier of this size below the cache (e.g. 256MiB), in
#                                      the work directory
#   CONCURRENCY=32
#   BLOOMGATE=path/to/bloomgate        the binary (default: release build, built if missing)
#   KEEP=1                             keep the work directory
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=load/lib.sh
source load/lib.sh

DURATION=${DURATION:-180}
RATE=${RATE:-800}
INTERVAL=${INTERVAL:-5}
CACHE=${CACHE:-64MiB}
CAPACITY=${CAPACITY:-5000}
OBJECTS=${OBJECTS:-60000}
ONE_HIT=${ONE_HIT:-0.5}
CONCURRENCY=${CONCURRENCY:-32}
SIZE_MEDIAN=${SIZE_MEDIAN:-}
SIZE_SIGMA=${SIZE_SIGMA:-1}
DISK=${DISK:-}
find_bloomgate

start_origin origin
DISK_TABLE=""
if [[ -n "$DISK" ]]; then
  DISK_TABLE="[disk]
path = \"$WORK/disk\"
max_bytes = \"$DISK\""
fi
write_config "$WORK/soak.toml" "$ORIGIN_URL" "$(
  cat <<EOF
[cache]
max_bytes = "$CACHE"
[admission]
mode = "probation"
capacity = $CAPACITY
$DISK_TABLE
EOF
)" 'pool_idle_timeout = "2s"'
start_proxy proxy "$WORK/soak.toml"
PROXY=$PROXY_PID
sleep 1
scrape "$ADMIN_URL" "$WORK/start.metrics"
MAX_BYTES=$(metric "$WORK/start.metrics" bloomgate_cache_max_bytes)
FILTER_BYTES=$(metric "$WORK/start.metrics" bloomgate_filter_bytes)
LIMIT_KIB=$(((MAX_BYTES * 5 / 4 + FILTER_BYTES) / 1024 + 16 * 1024))
BASE_FDS=$(open_fds "$PROXY")
BASE_RSS=$(vm_kib "$PROXY" VmRSS)

REQUESTS=$((DURATION * RATE))
log "replaying $REQUESTS requests at $RATE/s (${DURATION}s), sampling every ${INTERVAL}s"
TRAFFIC=(--requests "$REQUESTS" --objects "$OBJECTS" --one-hit-share "$ONE_HIT")
if [[ -n "$SIZE_MEDIAN" ]]; then
  "$BLOOMGATE" trace generate --out "$WORK/trace.csv" "${TRAFFIC[@]}" \
    --size-median "$SIZE_MEDIAN" --size-sigma "$SIZE_SIGMA" >/dev/null
  TRAFFIC=(--trace "$WORK/trace.csv")
fi
"$BLOOMGATE" replay --target "$PROXY_URL" "${TRAFFIC[@]}" --rate "$RATE" \
  --concurrency "$CONCURRENCY" --json >"$WORK/replay.json" 2>"$WORK/replay.err" &
REPLAY=$!
PIDS+=("$REPLAY")

SERIES="$WORK/series"
echo "t_s rss_mib fds cache_mib entries hit_pct" >"$SERIES"
sample() {
  local t=$1 m="$WORK/sample.metrics"
  scrape "$ADMIN_URL" "$m" || return 0
  local requests hits
  requests=$(metric "$m" bloomgate_requests_total)
  hits=$(metric "$m" bloomgate_requests_total 'cache_status="hit"')
  awk -v t="$t" -v rss="$(vm_kib "$PROXY" VmRSS)" -v fds="$(open_fds "$PROXY")" \
    -v cache="$(metric "$m" bloomgate_cache_bytes)" -v entries="$(metric "$m" bloomgate_cache_entries)" \
    -v r="$requests" -v h="$hits" \
    'BEGIN { printf "%d %.1f %d %.1f %d %.1f\n", t, rss / 1024, fds, cache / 1048576, entries, r ? 100 * h / r : 0 }' >>"$SERIES"
}
START=$SECONDS
sample 0
while kill -0 "$REPLAY" 2>/dev/null; do
  sleep "$INTERVAL"
  sample $((SECONDS - START))
done
wait "$REPLAY" || die "replay failed: $(tail -n 5 "$WORK/replay.err")"
RUN_SECONDS=$((SECONDS - START))

# After the run: the client's connections are closed, the pool's idle ones time out.
END_FDS=$(open_fds "$PROXY")
for _ in $(seq 60); do
  END_FDS=$(open_fds "$PROXY")
  ((END_FDS <= BASE_FDS)) && break
  sleep 0.5
done
END_RSS=$(vm_kib "$PROXY" VmRSS)
HWM=$(vm_kib "$PROXY" VmHWM)

echo "== soak: $REQUESTS requests at $RATE/s through one proxy (cache $CACHE, doorkeeper capacity $CAPACITY), ${RUN_SECONDS}s"
python3 - "$WORK/replay.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency_ms"]
print(f"   replay: {r['requests']} requests, {r['requests_per_sec']:.0f}/s, hit ratio {100 * r['hit_ratio']:.2f}%,"
      f" byte hit ratio {100 * r['byte_hit_ratio']:.2f}%, latency p50 {l['p50']:.2f} ms p99 {l['p99']:.2f} ms"
      f" max {l['max']:.2f} ms, errors {r['errors']['total']}")
EOF
column -t "$SERIES" | sed 's/^/   /'
echo "   before the run: RSS $((BASE_RSS / 1024)) MiB, $BASE_FDS fds; after it: RSS $((END_RSS / 1024)) MiB, $END_FDS fds; peak RSS (VmHWM) $((HWM / 1024)) MiB"
python3 - "$SERIES" "$LIMIT_KIB" "$MAX_BYTES" "$FILTER_BYTES" <<'EOF'
import sys
rows = [line.split() for line in open(sys.argv[1]).read().splitlines()[1:]]
rss = [float(r[1]) for r in rows]
limit = int(sys.argv[2]) / 1024
half = rss[len(rss) // 2:]
print(f"   RSS over the second half: {min(half):.1f} to {max(half):.1f} MiB (first {half[0]:.1f}, last {half[-1]:.1f}: {half[-1] - half[0]:+.1f} MiB)")
verdict = "ok" if max(rss) <= limit else "NOT MET"
print(f"   RSS bound: max sample {max(rss):.1f} MiB <= {limit:.1f} MiB"
      f" (1.25 x cache.max_bytes {int(sys.argv[3]) / 1048576:.1f} MiB + filters {int(sys.argv[4]) / 1024:.1f} KiB + 16 MiB): {verdict}")
EOF
if ((HWM > LIMIT_KIB)); then
  echo "   NOT MET: peak RSS $((HWM / 1024)) MiB is over the bound"
  FAILED=1
fi
if ((END_FDS <= BASE_FDS)); then
  echo "   fds: back to $END_FDS (baseline $BASE_FDS): ok"
else
  echo "   NOT MET: $END_FDS fds open 30 s after the run, baseline $BASE_FDS"
  FAILED=1
fi
exit "${FAILED:-0}"
