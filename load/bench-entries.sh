#!/usr/bin/env bash
# What a cached entry costs in memory, and whether hits slow down as the cache grows: fills two
# proxies (admission off, so one request stores an object) with SMALL and LARGE distinct objects of
# SIZE bytes, then reports for each the resident memory per entry beyond the body
# (VmRSS growth / bloomgate_cache_entries - SIZE) and the store's own weight per entry, and
# measures hits on a random stored object at the same time on both (wrk, ROUNDS rounds, median),
# with CPU per request.
#
# Usage: load/bench-entries.sh      (from anywhere; needs wrk)
# Environment:
#   SMALL=10000 LARGE=1000000 SIZE=1024   entries in each cache, body bytes of each
#   DURATION=8 ROUNDS=3 CONNECTIONS=64    the hit runs
#   BLOOMGATE=path/to/bloomgate           the binary (default: release build, built if missing)
#   KEEP=1                                keep the work directory
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=load/lib.sh
source load/lib.sh

SMALL=${SMALL:-10000}
LARGE=${LARGE:-1000000}
SIZE=${SIZE:-1024}
DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
command -v wrk >/dev/null || die "needs wrk (Debian's wrk)"
find_bloomgate
start_origin origin

# fill.lua: one wrk thread asks for /obj/eFROM+1 .. /obj/eN in order, once each, then idles on the
# last one (a hit); each run of wrk goes on where the cache's count says the last one stopped. A
# run's first requests can be lost to wrk's start (a few objects of a million), so the fill stops
# at 99.9% of N. hits.lua: a random one of the N.
cat >"$WORK/fill.lua" <<'EOF'
local counter, last = tonumber(os.getenv("FROM")), tonumber(os.getenv("ENTRIES"))
function request()
  if counter < last then counter = counter + 1 end
  return wrk.format("GET", "/obj/e" .. counter .. "?size=" .. os.getenv("SIZE"))
end
EOF
cat >"$WORK/hits.lua" <<'EOF'
local total = tonumber(os.getenv("ENTRIES"))
function init(args) math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16)) end
function request()
  return wrk.format("GET", "/obj/e" .. math.random(total) .. "?size=" .. os.getenv("SIZE"))
end
EOF

declare -A URL PID
for name in small large; do
  write_config "$WORK/$name.toml" "$ORIGIN_URL" '[cache]
max_bytes = "8GiB"
[admission]
mode = "off"'
  start_proxy "$name" "$WORK/$name.toml"
  URL[$name]=$PROXY_URL
  PID[$name]=$PROXY_PID
done

# fill NAME ENTRIES: sends each object once, over 32 connections, until the cache holds them all.
fill() {
  local name=$1 entries=$2 seconds=0 have=0 runs=0
  local before
  before=$(vm_kib "${PID[$name]}" VmRSS)
  while :; do
    FROM=${have%.*} ENTRIES=$entries SIZE=$SIZE wrk -t1 -c32 -d5s -s "$WORK/fill.lua" \
      "${URL[$name]}" >/dev/null
    seconds=$((seconds + 5)) runs=$((runs + 1))
    scrape "$ADMIN_URL_OF" "$WORK/$name.metrics" || true
    have=$(metric "$WORK/$name.metrics" bloomgate_cache_entries)
    ((${have%.*} >= entries - entries / 1000)) && break
    ((seconds < 600)) || die "$name: $have entries of $entries after ${seconds}s"
  done
  sleep 1
  local after weight
  after=$(vm_kib "${PID[$name]}" VmRSS)
  scrape "$ADMIN_URL_OF" "$WORK/$name.metrics"
  have=$(metric "$WORK/$name.metrics" bloomgate_cache_entries)
  weight=$(metric "$WORK/$name.metrics" bloomgate_cache_bytes)
  awk -v n="$name" -v e="$have" -v b="$before" -v a="$after" -v w="$weight" -v s="$SIZE" 'BEGIN {
    rss = (a - b) * 1024 / e
    printf "%-6s %9d entries of %d B: RSS %+.0f MiB, %.0f B an entry (%.0f B beyond the body); store weight %.0f B an entry (%.0f B beyond)\n",
      n, e, s, (a - b) / 1024, rss, rss - s, w / e, w / e - s }'
}

# The admin URL of each proxy: start_proxy sets ADMIN_URL for the last one started; the log line
# has it for both.
admin_of() { sed -nE 's/.*\(admin (http:[^ ]+)\/metrics\).*/\1/p' "$WORK/$1.log" | head -1; }
ADMIN_URL_OF=$(admin_of small) fill small "$SMALL"
ADMIN_URL_OF=$(admin_of large) fill large "$LARGE"

# Hits, one proxy at a time, alternating, ROUNDS rounds: req/s and CPU per request.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
  for name in small large; do
    entries=$SMALL
    [[ $name == large ]] && entries=$LARGE
    t0=$(cpu_ticks "${PID[$name]}")
    rps=$(ENTRIES=$entries SIZE=$SIZE wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -s "$WORK/hits.lua" \
      "${URL[$name]}" | awk '/^Requests\/sec/ {print $2}')
    t1=$(cpu_ticks "${PID[$name]}")
    awk -v n="$name" -v r="$round" -v rps="$rps" -v t="$((t1 - t0))" -v hz="$TICK" -v d="$DURATION" \
      'BEGIN { printf "round %d %-6s %10.0f req/s %7.2f us CPU a request\n", r, n, rps, t / hz * 1e6 / (rps * d) }'
  done
done | tee "$WORK/hits.txt"
# median NAME COLUMN: the median of a column over the rounds of one proxy (mawk has no asort).
median() { awk -v n="$1" -v c="$2" '$3 == n {print $c}' "$WORK/hits.txt" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
awk -v s="$(median small 4)" -v l="$(median large 4)" -v cs="$(median small 6)" -v cl="$(median large 6)" 'BEGIN {
  printf "median hits: small %.0f req/s, large %.0f req/s (%.2fx); CPU %.2f vs %.2f us a request (%.2fx)\n",
    s, l, l / s, cs, cl, cl / cs }'
