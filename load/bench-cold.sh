#!/usr/bin/env bash
# Do cold disk reads stall the memory hits beside them?
#
# One bloomgate (64 MiB of RAM, a disk tier of DISK_MIB on DISK_DIR, which must be a real disk:
# a tmpfs keeps its pages whatever the advice) serves two loads at once, each at a fixed rate with
# coordinated-omission correction (oha -q ... --latency-correction):
#   memory hits: one 1 KiB object held in RAM, HOT_RATE requests/s on HOT_CONNECTIONS connections;
#   disk hits:   OBJECTS objects of 64 KiB at random from the disk tier, DISK_RATE requests/s.
# Twice: "warm", every segment page in the page cache; "cold", a loop dropping the segment files'
# pages (posix_fadvise DONTNEED) every 20 ms, so that nearly every disk hit misses the page cache
# as with a working set several times the page cache's share. Reports p50, p99 and p99.9 of each
# load in each run, the cold reads bloomgate counted (bloomgate_disk_cold_reads_total: reads that
# went to the blocking pool), and the memory hits' p99 and p99.9 cold over warm.
#
# Usage: load/bench-cold.sh          (from anywhere; builds the release binary if missing)
# Environment: DURATION=20 HOT_RATE=4000 DISK_RATE=1000 HOT_CONNECTIONS=16 DISK_CONNECTIONS=32
#   OBJECTS=8000 DISK_MIB=2048 DISK_DIR=/var/tmp BLOOMGATE=path KEEP=1
# Needs oha (cargo install oha).
set -euo pipefail

cd "$(dirname "$0")/.."
source load/lib.sh
DURATION=${DURATION:-20}
HOT_RATE=${HOT_RATE:-4000}
DISK_RATE=${DISK_RATE:-1000}
HOT_CONNECTIONS=${HOT_CONNECTIONS:-16}
DISK_CONNECTIONS=${DISK_CONNECTIONS:-32}
OBJECTS=${OBJECTS:-8000}
DISK_MIB=${DISK_MIB:-2048}
DISK_DIR=${DISK_DIR:-/var/tmp}
command -v oha >/dev/null || die "oha is not installed (cargo install oha)"
find_bloomgate
start_origin origin 3600

DIR=$(mktemp -d "$DISK_DIR/bloomgate-cold.XXXXXX")
trap 'rm -rf "$DIR"; stop_all' EXIT
write_config "$WORK/cold.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"64MiB\"
max_object_bytes = \"1MiB\"
[admission]
mode = \"probation\"
[disk]
path = \"$DIR\"
max_bytes = \"${DISK_MIB}MiB\"
block_bytes = \"16MiB\""
start_proxy cold "$WORK/cold.toml"
log "warming $OBJECTS objects of 64 KiB onto the disk tier"
warm_objects "$PROXY_URL" "$OBJECTS" disk-
for _ in 1 2 3; do curl -s -o /dev/null "$PROXY_URL/obj/hot?size=1024"; done
sleep 2

# oha's --rand-regex-url takes the URL as a regular expression. For OBJECTS = d x 10^k (d from 2
# to 9, as the default 8000), disk-N for N from 10^k to d x 10^k - 1: all warmed, none a miss.
digits=${#OBJECTS}
lead=$((OBJECTS / 10 ** (digits - 1)))
((OBJECTS == lead * 10 ** (digits - 1) && lead >= 2)) || die "OBJECTS must be 2 to 9 times a power of ten"
disk_url="${PROXY_URL}/obj/disk-[1-$((lead - 1))][0-9]{$((digits - 1))}\\?size=65536"

# oha_run NAME RATE CONNECTIONS URL [EXTRA]: prints "p50 p99 p99.9" in ms.
oha_run() {
  local name=$1 rate=$2 connections=$3 url=$4
  shift 4
  oha --no-tui --output-format json -z "${DURATION}s" -q "$rate" -c "$connections" --latency-correction "$@" "$url" \
    >"$WORK/$name.json" 2>"$WORK/$name.err"
  python3 - "$WORK/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(" ".join(f"{1000 * (p[k] or 0):.3f}" for k in ("p50", "p99", "p99.9")))
PY
}

segment_files() { find "$DIR" -name 'segment-*'; }

# Drops the segment files' pages from the page cache every 20 ms until killed.
dropper() {
  python3 - "$DIR" <<'PY'
import os, sys, time
files = [os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1]) if f.startswith("segment-")]
fds = [os.open(f, os.O_RDONLY) for f in files]
while True:
    for fd in fds:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    time.sleep(0.02)
PY
}

printf '%-6s %-12s %10s %10s %10s %12s\n' run load "p50 ms" "p99 ms" "p99.9 ms" "cold reads"
declare -A P99 P999
for run in warm cold; do
  if [[ $run == warm ]]; then
    # Every segment page read once, so the warm run's disk hits are page-cache hits.
    segment_files | xargs cat >/dev/null
  else
    dropper &
    DROPPER=$!
    PIDS+=("$DROPPER")
    sleep 0.5
  fi
  scrape "$ADMIN_URL" "$WORK/$run-before.prom"
  oha_run "$run-disk" "$DISK_RATE" "$DISK_CONNECTIONS" "$disk_url" --rand-regex-url >"$WORK/$run-disk.txt" &
  disk_load=$!
  read -r p50 p99 p999 < <(oha_run "$run-hot" "$HOT_RATE" "$HOT_CONNECTIONS" "$PROXY_URL/obj/hot?size=1024")
  wait "$disk_load"
  scrape "$ADMIN_URL" "$WORK/$run-after.prom"
  if [[ $run == cold ]]; then kill "$DROPPER" 2>/dev/null || true; fi
  cold=$(($(metric "$WORK/$run-after.prom" bloomgate_disk_cold_reads_total) - $(metric "$WORK/$run-before.prom" bloomgate_disk_cold_reads_total)))
  hits=$(($(metric "$WORK/$run-after.prom" bloomgate_disk_hits_total) - $(metric "$WORK/$run-before.prom" bloomgate_disk_hits_total)))
  P99[$run]=$p99
  P999[$run]=$p999
  printf '%-6s %-12s %10s %10s %10s %12s\n' "$run" "memory hits" "$p50" "$p99" "$p999" ""
  read -r d50 d99 d999 <"$WORK/$run-disk.txt"
  printf '%-6s %-12s %10s %10s %10s %12s\n' "$run" "disk hits" "$d50" "$d99" "$d999" "$cold of $hits"
done
printf '\nmemory hits, cold over warm: p99 %sx, p99.9 %sx\n' \
  "$(python3 -c "print(f'{${P99[cold]} / max(${P99[warm]}, 1e-9):.2f}')")" \
  "$(python3 -c "print(f'{${P999[cold]} / max(${P999[warm]}, 1e-9):.2f}')")"
