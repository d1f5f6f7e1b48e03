#!/usr/bin/env bash
# SIGKILL during disk writes, ROUNDS times in a row, and never a wrong body.
#
# One bloomgate (1 MiB of RAM, a small disk tier of small segments so that segments are sealed and
# reclaimed all the time, probation admission) on a fixed port and one directory. Every round:
# start it (recovering the tier), wait until /readyz says the tier is open, ask for CHECK objects at
# random and compare each body byte for byte with the origin's (the origin's objects are
# deterministic), then load
# it with writes (objects of 300 B to 200 KiB, each asked twice so it is admitted, 4 clients) and
# SIGKILL it after a random 0.2 to 1.5 s. A body that differs, or a request that fails, stops the
# loop with the round and the key. Reports the rounds, the bodies compared, and how many of them
# the disk tier served.
#
# Usage: load/crash-loop.sh           (from anywhere; builds the release binary if missing)
# Environment: ROUNDS=200 OBJECTS=600 CHECK=60 DISK_DIR=/var/tmp BLOOMGATE=path KEEP=1
set -euo pipefail

cd "$(dirname "$0")/.."
source load/lib.sh
ROUNDS=${ROUNDS:-200}
OBJECTS=${OBJECTS:-600}
CHECK=${CHECK:-60}
DISK_DIR=${DISK_DIR:-/var/tmp}
find_bloomgate
start_origin origin 3600

DIR=$(mktemp -d "$DISK_DIR/bloomgate-crash.XXXXXX")
trap 'rm -rf "$DIR"; stop_all' EXIT
PORT=$(free_port)
# Body sizes from 300 B to 200 KiB, fixed per key.
size_of() { echo $((300 + ($1 * 7919) % (200 * 1024))); }

# The origin's bodies, once: what every answer is compared with.
mkdir -p "$WORK/expected" "$WORK/got"
for i in $(seq "$OBJECTS"); do
  echo "-o $WORK/expected/$i $ORIGIN_URL/obj/crash-$i?size=$(size_of "$i")"
done | xargs -P 8 -L 30 curl -sf

write_config "$WORK/crash.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"1MiB\"
max_object_bytes = \"512KiB\"
[admission]
mode = \"probation\"
[disk]
path = \"$DIR\"
max_bytes = \"24MiB\"
block_bytes = \"1MiB\"
write_buffer = \"8MiB\""
sed -i "0,/listen = \"127.0.0.1:0\"/s//listen = \"127.0.0.1:$PORT\"/" "$WORK/crash.toml"

compared=0
from_disk=0
for round in $(seq "$ROUNDS"); do
  start_proxy crash "$WORK/crash.toml"
  # Until the disk tier has recovered its index (the proxy serves before, from RAM alone).
  until curl -sf "$ADMIN_URL/readyz" 2>/dev/null | grep -q "entries recovered"; do sleep 0.01; done
  # Every answer byte-compared with the origin's.
  keys=$(shuf -i 1-"$OBJECTS" -n "$CHECK")
  rm -f "$WORK"/got/*
  for i in $keys; do echo "-o $WORK/got/$i $PROXY_URL/obj/crash-$i?size=$(size_of "$i")"; done |
    xargs -P 4 -L 20 curl -sf || die "round $round: a request failed (see $WORK/crash.log)"
  for i in $keys; do
    cmp -s "$WORK/got/$i" "$WORK/expected/$i" || die "round $round: crash-$i differs from the origin's body"
  done
  compared=$((compared + CHECK))
  scrape "$ADMIN_URL" "$WORK/crash.prom"
  from_disk=$((from_disk + $(metric "$WORK/crash.prom" bloomgate_disk_hits_total)))
  # Writes, cut by SIGKILL at a random moment.
  (for pass in 1 2; do
    for i in $(shuf -i 1-"$OBJECTS"); do echo "$PROXY_URL/obj/crash-$i?size=$(size_of "$i")"; done
  done | xargs -P 4 -n 25 curl -s >/dev/null) &
  load=$!
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.2, 1.5), 2))')"
  kill -9 "$PROXY_PID"
  wait "$PROXY_PID" 2>/dev/null || true
  # The load's xargs and curls too, so that none reaches the next round's proxy.
  pkill -P "$load" 2>/dev/null || true
  kill "$load" 2>/dev/null || true
  pkill -f -- "$PROXY_URL/obj/crash-" || true
  wait "$load" 2>/dev/null || true
  if ((round % 20 == 0)); then log "round $round: $compared bodies compared, $from_disk served from disk"; fi
done
echo "$ROUNDS SIGKILLs during writes: $compared bodies compared with the origin's, all equal; $from_disk of them served from the disk tier"
