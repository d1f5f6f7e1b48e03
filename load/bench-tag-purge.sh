#!/usr/bin/env bash
# Does a purge by tag of 100,000 entries stall the hits beside it?
#
# One bloomgate (admission off, so each object is stored on its first request) holds OBJECTS
# objects of 1 KiB tagged `bulk` (the synthetic origin's ?tag=bulk sends `Surrogate-Key: bulk`) and
# one hot object tagged `hot`. Two runs of DURATION seconds, each with two loads at fixed rates
# with coordinated-omission correction (oha -q ... --latency-correction):
#   hot hits:    the hot object, HOT_RATE requests/s (the figure reported);
#   tagged:      the tagged objects at random, TAG_RATE requests/s.
# Run "before": no purge. Run "during": `POST /purge/tag/bulk` half way through; from then on each
# tagged object is purged when next looked up (a miss, fetched again). Reports p50, p99, p99.9 of
# each load in each run, how long the purge call took, and the entries counted as purged.
#
# Usage: load/bench-tag-purge.sh          (from anywhere; builds the release binary if missing)
# Environment: DURATION=10 HOT_RATE=2000 TAG_RATE=500 OBJECTS=100000 BLOOMGATE=path KEEP=1
# Needs oha (cargo install oha).
set -euo pipefail

cd "$(dirname "$0")/.."
source load/lib.sh
DURATION=${DURATION:-10}
HOT_RATE=${HOT_RATE:-2000}
TAG_RATE=${TAG_RATE:-500}
OBJECTS=${OBJECTS:-100000}
command -v oha >/dev/null || die "oha is not installed (cargo install oha)"
find_bloomgate
start_origin origin 3600
trap stop_all EXIT
write_config "$WORK/tags.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"1GiB\"
[admission]
mode = \"off\""
start_proxy tags "$WORK/tags.toml"

log "storing $OBJECTS objects of 1 KiB tagged bulk"
seq "$OBJECTS" | sed "s|.*|$PROXY_URL/obj/t&?size=1024\&tag=bulk|" |
  xargs -P 4 -n 1000 curl -s >/dev/null
hot_url="$PROXY_URL/obj/hot?size=1024&tag=hot"
curl -s -o /dev/null "$hot_url"
scrape "$ADMIN_URL" "$WORK/filled.prom"
log "stored: $(metric "$WORK/filled.prom" bloomgate_cache_entries) entries"

# oha's --rand-regex-url takes the URL as a regular expression: t10000 to t99999, all stored.
digits=${#OBJECTS}
tagged_url="$PROXY_URL/obj/t[1-9][0-9]{$((digits - 2))}\\?size=1024&tag=bulk"

# oha_run NAME RATE URL [EXTRA]: prints "p50 p99 p99.9" in ms.
oha_run() {
  local name=$1 rate=$2 url=$3
  shift 3
  oha --no-tui --output-format json -z "${DURATION}s" -q "$rate" -c 16 --latency-correction "$@" "$url" \
    >"$WORK/$name.json" 2>"$WORK/$name.err"
  python3 - "$WORK/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(" ".join(f"{1000 * (p[k] or 0):.3f}" for k in ("p50", "p99", "p99.9")))
PY
}

printf '%-7s %-12s %10s %10s %10s\n' run load "p50 ms" "p99 ms" "p99.9 ms"
for run in before during; do
  oha_run "$run-tagged" "$TAG_RATE" "$tagged_url" --rand-regex-url >"$WORK/$run-tagged.txt" &
  tagged_load=$!
  if [[ $run == during ]]; then
    (
      sleep "$((DURATION / 2))"
      curl -s -o "$WORK/purge.txt" -w '%{time_total}\n' -X POST "$ADMIN_URL/purge/tag/bulk" >"$WORK/purge-time.txt"
    ) &
    purger=$!
  fi
  read -r p50 p99 p999 < <(oha_run "$run-hot" "$HOT_RATE" "$hot_url")
  wait "$tagged_load"
  printf '%-7s %-12s %10s %10s %10s\n' "$run" "hot hits" "$p50" "$p99" "$p999"
  read -r t50 t99 t999 <"$WORK/$run-tagged.txt"
  printf '%-7s %-12s %10s %10s %10s\n' "$run" "tagged" "$t50" "$t99" "$t999"
done
wait "$purger"
scrape "$ADMIN_URL" "$WORK/after.prom"
printf '\npurge call: %s s, answered: %s\n' "$(cat "$WORK/purge-time.txt")" "$(cat "$WORK/purge.txt")"
printf 'entries purged (counted when looked up): %s\n' \
  "$(metric "$WORK/after.prom" bloomgate_purged_entries_total 'tag_hard')"
