#!/usr/bin/env bash
# Where a fixed-rate tail comes from: hits on one object of SIZE bytes (1 KiB unless given), or with
# MIX=1 bench-peers.sh's mix (80% of requests among 2,000 popular 4 KiB objects, 20% objects asked
# once: misses, and probation's first copies), offered at RATE req/s (oha -q, coordinated-omission corrected, every request recorded) to bloomgate and
# to nginx in the same run, then, for each:
#   - p50, p99, p99.9 of the corrected latency;
#   - the requests slower than that run's p99.9 grouped into episodes (slow requests less than 2 ms
#     apart): a few large episodes are stalls (a serving thread busy with something else, or not
#     scheduled), many one-request episodes are noise spread over time;
#   - where in each second the slow requests fall (ten 100 ms phases; a timer that runs once a second
#     piles them into one phase, spread evenly each holds 10%);
#   - each serving thread's (bloomgate) or worker's (nginx) share of the CPU the run used: with
#     SO_REUSEPORT the kernel hashes connections to bloomgate's threads, and an uneven split queues
#     more on one of them.
# Reports go to stdout. Needs oha, nginx, python3.
#
#   RATE=12000 DURATION=20 ROUNDS=3 load/tail-study.sh        (about 25% of nginx's 1 KiB peak here)
#   SIZE=65536 RATE=6000 ...                                    (64 KiB)
#   MIX=1 RATE=10000 ...                                        (the mix, about 25%)
#   VARIANT_ENV="_RJEM_MALLOC_CONF=background_thread:true" ...  (env for bloomgate only)
set -euo pipefail
cd "$(dirname "$0")/.."
source load/lib.sh

RATE=${RATE:-12000}
SIZE=${SIZE:-1024}
DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
command -v oha >/dev/null || die "needs oha (cargo install oha)"
command -v nginx >/dev/null || die "needs nginx (Debian's nginx)"
find_bloomgate

start_origin origin
write_config "$WORK/bloomgate.toml" "$ORIGIN_URL" $'[cache]\nmax_bytes = "256MiB"\n[admission]\nmode = "probation"'
if [[ -n "${VARIANT_ENV:-}" ]]; then
  # Exported for every process started from here; meant for variables only bloomgate reads.
  # shellcheck disable=SC2163,SC2086
  export ${VARIANT_ENV}
fi
start_proxy bloomgate "$WORK/bloomgate.toml"
BLOOMGATE_PID=$PROXY_PID
BLOOMGATE_URL=$PROXY_URL

NGINX_PORT=$(free_port)
mkdir -p "$WORK/nginx/logs" "$WORK/nginx/temp" "$WORK/nginx/cache"
cat >"$WORK/nginx/nginx.conf" <<EOF
user root;
worker_processes 2;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/temp/body;
  proxy_temp_path $WORK/nginx/temp/proxy;
  proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=tail:32m inactive=1h use_temp_path=off;
  upstream origin { server ${ORIGIN_URL#http://}; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache tail;
      proxy_cache_valid 200 1h;
      proxy_cache_min_uses 2;
    }
  }
}
EOF
nginx -c "$WORK/nginx/nginx.conf" -g 'daemon off;' >"$WORK/nginx/out.log" 2>&1 &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$NGINX_PORT/obj/small?size=$SIZE" && break; sleep 0.1; done

for base in "$BLOOMGATE_URL" "http://127.0.0.1:$NGINX_PORT"; do
  for _ in 1 2 3; do curl -sf -o /dev/null "$base/obj/small?size=$SIZE"; done
  if [[ "${MIX:-0}" == 1 ]]; then warm_objects "$base" 2000 hot- 4096; fi
done

# targets BASE: oha's target arguments for one run (a fresh URL list for the mix, so its one-time
# objects are new to every run).
targets() {
  if [[ "${MIX:-0}" != 1 ]]; then
    echo "$1/obj/small?size=$SIZE"
    return
  fi
  mix_urls "$1" "$WORK/mix.urls" $((RATE * DURATION * 2))
  printf '%s\n' --urls-from-file "$WORK/mix.urls"
}

# thread_cpu PID: "name ticks" for each thread of PID and of its children (utime + stime).
thread_cpu() {
  local pid task
  for pid in "$1" $(pgrep -P "$1" || true); do
    for task in /proc/"$pid"/task/*; do
      awk -v t="$(basename "$task")" '{
        line = $0; sub(/^[^(]*\(/, "", line); name = substr(line, 1, index(line, ")") - 1)
        sub(/^.*\) /, "", line); split(line, f, " ")
        gsub(/ /, "_", name); print name "/" t, f[12] + f[13]
      }' "$task/stat" 2>/dev/null || true
    done
  done
}

for round in $(seq "$ROUNDS"); do
  order=(bloomgate nginx)
  ((round % 2 == 0)) && order=(nginx bloomgate)
  for peer in "${order[@]}"; do
    case $peer in
      bloomgate) pid=$BLOOMGATE_PID base=$BLOOMGATE_URL ;;
      nginx) pid=$NGINX_PID base="http://127.0.0.1:$NGINX_PORT" ;;
    esac
    mapfile -t target < <(targets "$base")
    thread_cpu "$pid" >"$WORK/cpu-before"
    rm -f "$WORK/run.db"
    oha --no-tui -z "${DURATION}s" -q "$RATE" -c "$CONNECTIONS" --latency-correction \
      --db-url "$WORK/run.db" "${target[@]}" >/dev/null 2>"$WORK/oha.err" ||
      die "oha failed for $peer: $(head -c 300 "$WORK/oha.err")"
    thread_cpu "$pid" >"$WORK/cpu-after"
    python3 - "$peer" "$round" "$WORK/run.db" "$WORK/cpu-before" "$WORK/cpu-after" <<'PY'
import sys
sys.path.insert(0, "load")
from oha_stalls import doublings, own, percentile, requests, without_own_stalls
peer, rnd, db, before, after = sys.argv[1:]
rows = requests(db)
lat = sorted(d for _, d in rows)
pct = lambda q: percentile(lat, q) * 1000
p999 = pct(0.999)
slow = [s for s, d in rows if d * 1000 > p999]
episodes, starts, last = [], [], None
for s in slow:
    if last is None or s - last > 0.002:
        episodes.append(0)
        starts.append(s)
    episodes[-1] += 1
    last = s
phases = [0] * 10
for s in slow:
    phases[int((s % 1.0) * 10)] += 1
top_phase = max(phases) / max(1, len(slow))
big = sorted(episodes, reverse=True)[:3]
in_big = sum(e for e in episodes if e >= 5) / max(1, len(slow))
read = lambda f: dict((l.split()[0], int(l.split()[1])) for l in open(f) if l.strip())
b, a = read(before), read(after)
used = {k: a[k] - b.get(k, 0) for k in a}
total = sum(used.values()) or 1
workers = sorted(((k, v) for k, v in used.items() if v > 0), key=lambda kv: -kv[1])[:4]
split = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in workers)
print(f"{peer} round {rnd}: {len(lat)} requests; p50 {pct(0.5):.3f} p99 {pct(0.99):.3f} "
      f"p99.9 {p999:.3f} ms; {len(slow)} slower than p99.9 in {len(episodes)} episodes "
      f"(largest {big}, {100 * in_big:.0f}% of them in episodes of 5 or more); busiest 100 ms "
      f"phase of the second holds {100 * top_phase:.0f}%; CPU by thread: {split}")
print("  episodes of 5 or more (start s, requests): " + ", ".join(
    f"{t:.3f} {n}" for t, n in zip(starts, episodes) if n >= 5))
marks = doublings(rows)
kept = without_own_stalls(rows)
theirs = sum(n for t, n in zip(starts, episodes) if own(t, marks))
print(f"  {100 * theirs / max(1, len(slow)):.0f}% of the slow requests fall in the load generator's "
      f"own stalls (2^k requests sent: {', '.join(f'{m:.3f}' for m in marks)} s) or the first 50 ms; "
      f"without those {len(rows) - len(kept)} requests: p99 {percentile(kept, 0.99) * 1000:.3f} "
      f"p99.9 {percentile(kept, 0.999) * 1000:.3f} ms")
PY
  done
done
