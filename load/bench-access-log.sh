#!/usr/bin/env bash
# What the access log costs: 1 KiB hit throughput with `[log.access]` writing to a file against the
# same proxy without it, in the same run, with wrk.
#
# Starts `bloomgate origin` and two proxies in front of it, identical but for `log.access.path`
# (a file in the work directory, on the disk /tmp is on), warms one 1 KiB object in each, then
# drives them in turn with wrk for ROUNDS rounds (the order alternates, so neither always runs
# first). Prints each round, the median requests/s of each proxy and the ratio on/off, the p99s,
# the proxy's CPU time per request (user + system, from /proc: on a machine shared with other work
# it varies less than requests/s), and what the log wrote (lines, bytes,
# `bloomgate_access_log_dropped_total`).
#
# Usage: load/bench-access-log.sh        (from anywhere; builds the release binary if missing)
# Environment:
#   ROUNDS=5 DURATION=10 CONNECTIONS=64 THREADS=2
#   FORMAT=combined                      the access log's format (combined or json)
#   BLOOMGATE=path/to/bloomgate          the binary (default: the release build)
#   KEEP=1                               keep the work directory (configs, logs, the access log)
set -euo pipefail

cd "$(dirname "$0")/.."
source load/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
FORMAT=${FORMAT:-combined}
command -v wrk >/dev/null || die "wrk is not installed"
find_bloomgate

start_origin origin
ACCESS_LOG="$WORK/access.log"
declare -A URL ADMIN PID
for variant in off on; do
  extra=""
  if [[ $variant == on ]]; then
    extra=$'[log.access]\npath = "'"$ACCESS_LOG"$'"\nformat = "'"$FORMAT"'"'
  fi
  write_config "$WORK/$variant.toml" "$ORIGIN_URL" "$extra"
  start_proxy "$variant" "$WORK/$variant.toml"
  URL[$variant]=$PROXY_URL
  ADMIN[$variant]=$ADMIN_URL
  PID[$variant]=$PROXY_PID
  # Twice: stored in probation on the first request; every request after is a hit.
  for _ in 1 2 3; do curl -sf -o /dev/null "$PROXY_URL/obj/small?size=1024"; done
done

# wrk latency in ms from a value like 812.00us, 1.23ms, 1.02s.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) n = n / 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n = n * 1000
    printf "%.3f", n
  }'
}

# cpu_ticks PID: user + system time of a process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# drive URL PID: prints "requests/s p99_ms errors cpu_us_per_request", errors being non-2xx/3xx
# responses and socket errors, the CPU time being the proxy's (PID) over the run.
drive() {
  local out rps p99 errors requests before after
  before=$(cpu_ticks "$2")
  out=$(wrk -t "$THREADS" -c "$CONNECTIONS" -d "${DURATION}s" --latency "$1" 2>&1)
  after=$(cpu_ticks "$2")
  echo "$out" >>"$WORK/wrk.log"
  rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  errors=$(awk '/Non-2xx or 3xx responses:/ {n += $NF} /Socket errors:/ {for (i = 4; i <= NF; i += 2) n += $i} END {print n + 0}' <<<"$out")
  requests=$(awk '/ requests in / {print $1}' <<<"$out")
  cpu_us=$(awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="${requests:-0}" \
    'BEGIN { printf "%.2f", (n > 0 ? ticks / hz * 1e6 / n : 0) }')
  echo "${rps:-0} $p99 $errors $cpu_us"
}

RESULTS="$WORK/results"
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
  order="off on"
  ((round % 2 == 0)) && order="on off"
  for variant in $order; do
    read -r rps p99 errors cpu_us < <(drive "${URL[$variant]}/obj/small?size=1024" "${PID[$variant]}")
    echo "$variant $rps $p99 $errors $cpu_us" >>"$RESULTS"
    log "round $round, log $variant: $rps requests/s, p99 $p99 ms, $errors errors, $cpu_us us CPU per request"
  done
done

scrape "${ADMIN[on]}" "$WORK/on.metrics"
lines_metric=$(metric "$WORK/on.metrics" bloomgate_access_log_lines_total)
dropped=$(metric "$WORK/on.metrics" bloomgate_access_log_dropped_total)
lines_file=$(wc -l <"$ACCESS_LOG")
bytes_file=$(stat -c %s "$ACCESS_LOG")

awk -v rounds="$ROUNDS" -v duration="$DURATION" -v c="$CONNECTIONS" -v t="$THREADS" -v format="$FORMAT" \
  -v lines="$lines_file" -v lines_metric="$lines_metric" -v bytes="$bytes_file" -v dropped="$dropped" '
  { n[$1]++; rps[$1, n[$1]] = $2; p99[$1, n[$1]] = $3; errors[$1] += $4; cpu[$1, n[$1]] = $5 }
  function median(variant, values,   i, j, k, t, sorted) {
    k = n[variant]
    for (i = 1; i <= k; i++) sorted[i] = values[variant, i]
    for (i = 2; i <= k; i++) for (j = i; j > 1 && sorted[j] < sorted[j - 1]; j--) { t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t }
    return k % 2 ? sorted[(k + 1) / 2] : (sorted[k / 2] + sorted[k / 2 + 1]) / 2
  }
  END {
    printf "1 KiB hits, wrk -t%d -c%d -d%ds, %d rounds (alternating order), median per variant\n\n", t, c, duration, rounds
    printf "%-14s %10s %10s %8s %14s\n", "access log", "req/s", "p99 ms", "errors", "CPU us/request"
    printf "%-14s %10d %10.3f %8d %14.2f\n", "off", median("off", rps), median("off", p99), errors["off"], median("off", cpu)
    printf "%-14s %10d %10.3f %8d %14.2f\n", "on (" format ")", median("on", rps), median("on", p99), errors["on"], median("on", cpu)
    printf "\non/off requests/s: %.3f (the goal: at least 0.95)\n", median("on", rps) / median("off", rps)
    printf "on/off proxy CPU per request: %.3f\n", median("on", cpu) / median("off", cpu)
    printf "log written: %d lines (%d counted), %.1f MiB, %d dropped\n", lines, lines_metric, bytes / 1048576, dropped
  }' "$RESULTS"
