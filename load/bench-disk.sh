#!/usr/bin/env bash
# The disk tier against nginx proxy_cache on disk, in one run, on loopback, same origin.
#
# Part 1, a trace: the same trace replayed through bloomgate (probation admission; and admission
# off, where every object RAM evicts goes to disk: a hybrid cache's write-all) and through nginx
# with proxy_cache_min_uses 1 and 2, each with RAM_PERCENT of the trace's footprint as memory
# cache (bloomgate only: nginx has no memory cache of its own, it leans on the page cache) and
# DISK_PERCENT as disk cache (nginx max_size). Reports the hit ratio (1 - origin requests /
# requests) and the bytes each wrote to disk, from /proc/PID/io write_bytes (summed over nginx's
# processes) and, for bloomgate, also its engine's own count.
#
# Part 2, disk hits: OBJECTS objects of 64 KiB on disk (page cache warm), bloomgate with a RAM far
# smaller than them so that nearly every hit is read from disk, nginx serving the same objects from
# its disk cache; wrk picks objects at random. Median requests/s over ROUNDS, and the ratio.
#
# Usage: load/bench-disk.sh [TRACE]       (from anywhere; builds the release binary)
#   TRACE: a time,key,size CSV (plain or gzip); default the bundled load/traces/web07.csv.gz
# Environment:
#   RAM_PERCENT=1 DISK_PERCENT=10 CONCURRENCY=16   part 1
#   OBJECTS=2000 DURATION=10 CONNECTIONS=32 THREADS=2 ROUNDS=3   part 2
#   RESTART_DISK=1GiB RESTART_RAM=64MiB AFTER_REQUESTS=30000 AFTER_RATE=500   part 3
#   DROP_CACHES=1         part 3 restarts with a cold page cache (root)
#   PARTS="trace hits restart"    which parts to run
#   BLOOMGATE=path        use this binary;  KEEP=1 keeps the work directory
# The caches live under the work directory in /tmp, on the machine's disk (not tmpfs: writes to a
# tmpfs never reach the storage layer, and /proc/PID/io would show none).
set -euo pipefail

# A trace named on the command line is taken from where the script was started.
TRACE=$(realpath -m "${1:-$(dirname "$0")/traces/web07.csv.gz}")
cd "$(dirname "$0")/.."
source load/lib.sh
RAM_PERCENT=${RAM_PERCENT:-1}
DISK_PERCENT=${DISK_PERCENT:-10}
CONCURRENCY=${CONCURRENCY:-16}
OBJECTS=${OBJECTS:-2000}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-"trace hits restart"}

command -v nginx >/dev/null || die "nginx is not installed (apt-get install nginx)"
command -v wrk >/dev/null || die "wrk is not installed (apt-get install wrk)"
find_bloomgate
start_origin origin 3600
ORIGIN_HOSTPORT=${ORIGIN_URL#http://}
ORIGIN_HOSTPORT=${ORIGIN_HOSTPORT%/}

origin_requests() { curl -s "$ORIGIN_URL/_origin/stats" | sed -E 's/.*"requests": ?([0-9]+).*/\1/'; }


# start_nginx NAME MIN_USES MAX_SIZE_KIB: nginx with a disk cache in $WORK/NAME; sets NGINX_PID, NGINX_URL.
start_nginx() {
  local name=$1 min_uses=$2 max_kib=$3 dir="$WORK/$1" port
  port=$(free_port)
  mkdir -p "$dir/logs" "$dir/temp" "$dir/cache"
  cat >"$dir/nginx.conf" <<EOF
user root;
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  proxy_cache_path $dir/cache levels=1:2 keys_zone=disk:16m max_size=${max_kib}k inactive=1d use_temp_path=off;
  upstream origin { server $ORIGIN_HOSTPORT; keepalive 64; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache disk;
      proxy_cache_min_uses $min_uses;
      proxy_cache_lock on;
      add_header X-Cache-Status \$upstream_cache_status;
    }
  }
}
EOF
  nginx -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' >"$WORK/$name.log" 2>&1 &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  NGINX_URL="http://127.0.0.1:$port"
  for _ in $(seq 100); do
    curl -s -o /dev/null "$NGINX_URL/_origin/stats" && return 0
    sleep 0.1
  done
  die "$name did not start (see $WORK/$name.log)"
}

# start_disk_proxy NAME MODE RAM DISK BLOCK MAX_OBJECT: bloomgate with a disk tier in $WORK/NAME.
start_disk_proxy() {
  local name=$1 mode=$2 ram=$3 disk=$4 block=$5 max_object=$6
  rm -rf "$WORK/$name-disk"
  write_config "$WORK/$name.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"$ram\"
max_object_bytes = \"$max_object\"
[admission]
mode = \"$mode\"
capacity = ${DOORKEEPER_CAPACITY:-1000000}
[disk]
path = \"$WORK/$name-disk\"
max_bytes = \"$disk\"
block_bytes = \"$block\"
write_buffer = \"$((4 * ${block%KiB}))KiB\""
  start_proxy "$name" "$WORK/$name.toml"
}

# replay_through NAME URL PID CACHE_DIR: replays the trace; prints "requests origin_requests
# write_bytes peak_cache_bytes", the last sampled (du) every half second while the trace runs.
replay_through() {
  local name=$1 url=$2 pid=$3 dir=$4 before after io_before io_after requests sampler
  before=$(origin_requests)
  io_before=$(io_written "$pid")
  (while :; do du -sk "$dir" 2>/dev/null | awk '{print $1 * 1024}'; sleep 0.5; done) >"$WORK/$name.du" &
  sampler=$!
  "$BLOOMGATE" replay --trace "$TRACE" --target "$url" --concurrency "$CONCURRENCY" --json \
    >"$WORK/$name.replay.json" 2>"$WORK/$name.replay.log"
  sleep 2 # let the writer threads and nginx's cache manager finish what they queued
  kill "$sampler" 2>/dev/null || true
  after=$(origin_requests)
  io_after=$(io_written "$pid")
  requests=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["requests"])' "$WORK/$name.replay.json")
  echo "$requests $((after - before)) $((io_after - io_before)) $(sort -n "$WORK/$name.du" | tail -n 1)"
}

mib() { python3 -c "print(f'{$1 / 1048576:.1f}')"; }

part_trace() {
  [[ -f "$TRACE" ]] || die "trace $TRACE not found (load/traces/README.md says where traces come from)"
  local footprint ram disk block max_object
  local sim capacity
  sim=$("$BLOOMGATE" simulate --trace "$TRACE" --ram-percent "$RAM_PERCENT" --disk-percent "$DISK_PERCENT" 2>/dev/null)
  footprint=$(sed -nE 's/.*footprint ([0-9.]+) MiB.*/\1/p' <<<"$sim")
  # The doorkeeper's window as the simulator sizes it: what both tiers hold in objects of the
  # trace's mean size (the proxy's default, a million keys, would remember the whole trace).
  capacity=$(sed -nE 's/.*doorkeeper capacity ([0-9]+).*/\1/p' <<<"$sim")
  [[ -n "$footprint" && -n "$capacity" ]] || die "could not read the trace's footprint"
  DOORKEEPER_CAPACITY=$capacity
  ram=$(python3 -c "print(int($footprint * 1024 * $RAM_PERCENT / 100))")KiB
  disk=$(python3 -c "print(int($footprint * 1024 * $DISK_PERCENT / 100))")KiB
  # The largest object a RAM of this size takes whole; a block must be larger.
  max_object=$(python3 -c "print(max(64, int($footprint * 1024 * $RAM_PERCENT / 100) // 2))")KiB
  block=$(python3 -c "m=$(sed 's/KiB//' <<<"$max_object"); print(((m + 64 + 3) // 4) * 4)")KiB
  log "trace $TRACE: footprint $footprint MiB; RAM $ram, disk $disk, block $block, doorkeeper capacity $capacity"
  printf '\n%-30s %9s %8s %14s %12s %12s %15s\n' "trace: $(basename "$TRACE")" requests "hit %" \
    "disk MiB (io)" "records MiB" "engine MiB" "peak cache MiB"
  local peer result requests origin io peak engine records nginx_peak=0 disk_for
  for peer in ${TRACE_PEERS:-nginx-min-uses-1 nginx-min-uses-2 bloomgate-probation bloomgate-off bloomgate-probation-at-nginx-peak}; do
    case $peer in
      bloomgate-*)
        # nginx's cache manager trims to max_size only now and then: the last run is bloomgate
        # given the disk nginx with proxy_cache_min_uses 2 (the second-hit rule, as bloomgate's)
        # actually used at its peak.
        disk_for=$disk
        if [[ $peer == *-at-nginx-peak ]]; then
          disk_for=$((nginx_peak / 1024))KiB
        fi
        start_disk_proxy "$peer" "$(cut -d- -f2 <<<"$peer")" "$ram" "$disk_for" "$block" "$max_object"
        result=$(replay_through "$peer" "$PROXY_URL" "$PROXY_PID" "$WORK/$peer-disk")
        scrape "$ADMIN_URL" "$WORK/$peer.prom"
        engine=$(mib "$(metric "$WORK/$peer.prom" bloomgate_disk_engine_written_bytes_total)")
        records=$(mib "$(metric "$WORK/$peer.prom" bloomgate_disk_written_bytes_total)")
        stop_pid "$PROXY_PID"
        ;;
      nginx-*)
        start_nginx "$peer" "${peer##*-}" "${disk%KiB}"
        result=$(replay_through "$peer" "$NGINX_URL" "$NGINX_PID" "$WORK/$peer/cache")
        engine="-"
        records="-"
        stop_pid "$NGINX_PID"
        ;;
    esac
    read -r requests origin io peak <<<"$result"
    if [[ $peer == nginx-min-uses-2 ]]; then nginx_peak=$peak; fi
    printf '%-30s %9d %8s %14s %12s %12s %15s\n' "$peer" "$requests" \
      "$(python3 -c "print(f'{100 * (1 - $origin / $requests):.2f}')")" "$(mib "$io")" "$records" \
      "$engine" "$(mib "${peak:-0}")"
  done
}

# The wrk script: OBJECTS objects of 64 KiB, picked at random.
write_wrk_script() {
  cat >"$WORK/random.lua" <<EOF
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/obj/disk" .. math.random($OBJECTS) .. "?size=65536")
end
EOF
}

# bloomgate stores each object on its second request and, its RAM being small, evicts it to disk
# (hit while in RAM); nginx stores each on the first.
warm() { warm_objects "$1" "$OBJECTS" disk; }

wrk_rps() {
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" -s "$WORK/random.lua" "$1" 2>&1 |
    awk '/^Requests\/sec:/ {print $2}'
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

part_hits() {
  DOORKEEPER_CAPACITY=1000000
  write_wrk_script
  start_disk_proxy hits-bloomgate probation 4MiB 1GiB 16384KiB 1MiB
  local bg_url=$PROXY_URL bg_admin=$ADMIN_URL
  start_nginx hits-nginx 1 $((1024 * 1024))
  warm "$bg_url"
  warm "$NGINX_URL"
  sleep 2
  scrape "$bg_admin" "$WORK/hits-before.prom"
  log "bloomgate: $(metric "$WORK/hits-before.prom" bloomgate_disk_entries) records on disk, RAM 4 MiB"
  local round bg=() ng=()
  for round in $(seq "$ROUNDS"); do
    bg+=("$(wrk_rps "$bg_url")")
    ng+=("$(wrk_rps "$NGINX_URL")")
    log "round $round: bloomgate ${bg[-1]} req/s, nginx ${ng[-1]} req/s"
  done
  scrape "$bg_admin" "$WORK/hits-after.prom"
  local hits ram_hits
  hits=$(($(metric "$WORK/hits-after.prom" bloomgate_disk_hits_total) - $(metric "$WORK/hits-before.prom" bloomgate_disk_hits_total)))
  ram_hits=$(($(metric "$WORK/hits-after.prom" bloomgate_requests_total 'cache_status="hit"') - $(metric "$WORK/hits-before.prom" bloomgate_requests_total 'cache_status="hit"')))
  local bg_median ng_median
  bg_median=$(printf '%s\n' "${bg[@]}" | median)
  ng_median=$(printf '%s\n' "${ng[@]}" | median)
  printf '\n64 KiB disk hits (%d objects, %d connections, median of %d rounds of %ds)\n' \
    "$OBJECTS" "$CONNECTIONS" "$ROUNDS" "$DURATION"
  printf '%-12s %12s\n' bloomgate "$bg_median" nginx "$ng_median"
  printf 'bloomgate / nginx: %sx; of bloomgate'"'"'s hits, %s%% were read from disk\n' \
    "$(python3 -c "print(f'{$bg_median / $ng_median:.2f}')")" \
    "$(python3 -c "print(f'{100 * $hits / max(1, $ram_hits):.1f}')")"
}

# Part 3, a restart: fills a disk tier of RESTART_DISK with 64 KiB objects (each asked twice, so
# each is proven, through a RAM of RESTART_RAM), stops the proxy with SIGTERM, starts it again on the
# same directory, and reports how long until /readyz says the tier is open (the proxy serves before)
# and what the recovery took; then the hit ratio of the first AFTER_REQUESTS requests (AFTER_RATE
# per second, Zipf over the same objects) against the same requests through a cold proxy (an empty
# directory).
part_restart() {
  DOORKEEPER_CAPACITY=1000000
  local disk=${RESTART_DISK:-1GiB} ram=${RESTART_RAM:-64MiB} limit=${AFTER_REQUESTS:-30000} rate=${AFTER_RATE:-500}
  local objects
  objects=$(python3 -c "
import re
units = {'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30}
m = re.fullmatch(r'(\d+)(KiB|MiB|GiB)', '$disk')
print(int(m.group(1)) * units[m.group(2)] // 65536)")
  python3 - "$objects" "$WORK/fill.csv" "$WORK/after.csv" "$limit" <<'PY'
import random, sys
objects, fill, after, limit = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
with open(fill, "w") as f:
    f.write("time,key,size\n")
    for i in range(objects):
        f.write(f"{2 * i},r{i},65536\n{2 * i + 1},r{i},65536\n")
rng = random.Random(7)
weights = [1 / (rank + 1) ** 0.8 for rank in range(objects)]
keys = rng.choices(range(objects), weights=weights, k=limit)
with open(after, "w") as f:
    f.write("time,key,size\n")
    for t, k in enumerate(keys):
        f.write(f"{t},r{k},65536\n")
PY
  start_disk_proxy restart-warm probation "$ram" "$disk" 16384KiB 1MiB
  log "filling $disk of disk with $objects objects of 64 KiB, each asked twice"
  "$BLOOMGATE" replay --trace "$WORK/fill.csv" --target "$PROXY_URL" --concurrency 2 --json >/dev/null 2>&1
  sleep 3
  scrape "$ADMIN_URL" "$WORK/restart-filled.prom"
  log "disk tier: $(metric "$WORK/restart-filled.prom" bloomgate_disk_entries) records, $(mib "$(metric "$WORK/restart-filled.prom" bloomgate_disk_bytes)") MiB"
  # The restarted proxy listens where this one did: the cache key includes the Host (and port).
  sed -i "0,/listen = \"127.0.0.1:0\"/s//listen = \"${PROXY_URL#http://}\"/" "$WORK/restart-warm.toml"
  local stopped exited started ready
  stopped=$(date +%s.%N)
  stop_pid "$PROXY_PID"
  exited=$(date +%s.%N)
  if [[ "${DROP_CACHES:-0}" == 1 ]]; then
    # A cold page cache, as after a reboot (root only).
    sync && echo 3 >/proc/sys/vm/drop_caches || log "cannot drop the page cache; it stays warm"
  fi
  started=$(date +%s.%N)
  start_proxy restart-warm "$WORK/restart-warm.toml"
  # /readyz answers at once; the tier is open once it says what it recovered.
  until curl -sf "$ADMIN_URL/readyz" >"$WORK/readyz" && ! grep -q "disk: recovering" "$WORK/readyz"; do
    sleep 0.01
  done
  ready=$(date +%s.%N)
  printf '\nrestart with a %s disk tier: SIGTERM to exit %.2fs (saving RAM to disk), start to disk open (/readyz) %.2fs; %s' \
    "$disk" "$(python3 -c "print($exited - $stopped)")" "$(python3 -c "print($ready - $started)")" \
    "$(grep disk "$WORK/readyz")"
  printf '\n%-10s %8s %10s\n' "first $limit requests after start" "hit %" "disk hits"
  local name before after_origin hits
  for name in warm cold; do
    if [[ $name == cold ]]; then
      stop_pid "$PROXY_PID"
      rm -rf "$WORK/restart-warm-disk"
      start_proxy restart-cold "$WORK/restart-warm.toml"
    fi
    before=$(origin_requests)
    "$BLOOMGATE" replay --trace "$WORK/after.csv" --target "$PROXY_URL" --concurrency 8 \
      --rate "$rate" --json >/dev/null 2>&1
    after_origin=$(origin_requests)
    scrape "$ADMIN_URL" "$WORK/restart-$name.prom"
    hits=$(metric "$WORK/restart-$name.prom" bloomgate_disk_hits_total)
    printf '%-10s %8s %10s\n' "$name" "$(python3 -c "print(f'{100 * (1 - ($after_origin - $before) / $limit):.2f}')")" "$hits"
  done
}

for part in $PARTS; do
  "part_$part"
done
