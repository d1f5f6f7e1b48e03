#!/usr/bin/env bash
# Large objects in slices, live: bloomgate against nginx's slice module, in one run, on loopback,
# same origin, same video-session trace.
#
# Part 1, savings: a video-session trace (`bloomgate trace generate --video`: every session plays
# the start of its video in 1 MiB ranges, then seeks into places mostly asked for once) replayed,
# Range headers and all, through
#   bloomgate-per-slice   slices of 1 MiB above 8 MiB, each admitted on its own (mode "probation":
#                         a first-seen slice in the probation FIFO in RAM; proven on its second
#                         request, it stays in RAM until a first copy needs its room, and is
#                         written to the disk tier then)
#   bloomgate-every-slice the same with admission "off": every slice proven at once (in RAM's
#                         write-back queue, written to disk when a newer slice needs the room)
#   nginx-slice-1         nginx `slice 1m`, `proxy_cache_min_uses 1`
#   nginx-slice-2         nginx `slice 1m`, `proxy_cache_min_uses 2`
# each started afresh with an empty cache. Prints, per peer: origin bytes (the body bytes the
# origin's connections took, `taken_bytes` of /_origin/stats, counted chunk by chunk at the origin
# the same way for every peer: a 200 that bloomgate drops on learning that an object is large, to
# fetch it in slices, counts only what was taken of it), origin requests, and bytes written: for bloomgate into RAM
# (bloomgate_cache_written_bytes_total) and to its disk tier (bloomgate_disk_written_bytes_total,
# the records it wrote, and /proc/PID/io write_bytes, what reached the block layer); for nginx,
# which keeps every cached slice in a file, /proc/PID/io write_bytes summed over its processes and
# the size of its cache directory at the end.
#
# Part 2, speed: one 64 MiB object, cached, fetched whole by wrk (CONNECTIONS connections, SECONDS
# seconds, ROUNDS rounds, the median shown) from bloomgate sliced, bloomgate unsliced (the object
# below max_object_bytes, stored whole) and nginx slice 1m: MiB/s from wrk's Transfer/sec.
#
# Usage: load/bench-slices.sh              (from anywhere; builds the release binary)
# Environment:
#   SESSIONS=200 VIDEOS=40 VIDEO_MIN=16MiB VIDEO_MAX=128MiB SEED=1   the trace
#   RAM_MIB=256 DISK_MIB=1024   bloomgate's RAM and disk tier; nginx's max_size is their sum
#   PROBATION_SHARE, WRITE_BUFFER   bloomgate's admission.probation_share and disk.write_buffer,
#                               when set (else their defaults)
#   SAVINGS_PEERS="bloomgate-per-slice bloomgate-every-slice nginx-slice-1 nginx-slice-2"
#   CONCURRENCY=8               replay clients at once
#   SECONDS_PER_ROUND=5 ROUNDS=3 CONNECTIONS=4   part 2
#   PARTS="savings speed"       which parts to run
#   BLOOMGATE=path  use this binary;  KEEP=1 keeps the work directory
# The caches live under the work directory in /tmp, on the machine's disk (writes to a tmpfs never
# reach the block layer, and /proc/PID/io would show none).
set -euo pipefail

cd "$(dirname "$0")/.."
source load/lib.sh
SESSIONS=${SESSIONS:-200}
VIDEOS=${VIDEOS:-40}
VIDEO_MIN=${VIDEO_MIN:-16MiB}
VIDEO_MAX=${VIDEO_MAX:-128MiB}
SEED=${SEED:-1}
RAM_MIB=${RAM_MIB:-256}
DISK_MIB=${DISK_MIB:-1024}
CONCURRENCY=${CONCURRENCY:-8}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-4}
PARTS=${PARTS:-"savings speed"}
SPEED_OBJECT="/obj/speed64?size=67108864"

command -v nginx >/dev/null || die "nginx is not installed (apt-get install nginx)"
command -v wrk >/dev/null || die "wrk is not installed (apt-get install wrk)"
nginx -V 2>&1 | grep -q -- --with-http_slice_module || die "this nginx has no slice module"
find_bloomgate
start_origin origin 3600
ORIGIN_HOSTPORT=${ORIGIN_URL#http://}
ORIGIN_HOSTPORT=${ORIGIN_HOSTPORT%/}

origin_requests() { curl -s "$ORIGIN_URL/_origin/stats" | sed -E 's/.*"requests": ?([0-9]+).*/\1/'; }
origin_taken() { curl -s "$ORIGIN_URL/_origin/stats" | sed -E 's/.*"taken_bytes": ?([0-9]+).*/\1/'; }
mib() { python3 -c "print(f'{$1 / 1048576:.1f}')"; }

# start_nginx NAME MIN_USES: nginx with slice 1m and a disk cache in $WORK/NAME; sets NGINX_PID,
# NGINX_URL.
start_nginx() {
  local name=$1 min_uses=$2 dir="$WORK/$1" port
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
  proxy_cache_path $dir/cache levels=1:2 keys_zone=slices:16m max_size=$((RAM_MIB + DISK_MIB))m inactive=1d use_temp_path=off;
  upstream origin { server $ORIGIN_HOSTPORT; keepalive 64; }
  server {
    listen 127.0.0.1:$port;
    location / {
      slice 1m;
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Range \$slice_range;
      proxy_cache slices;
      proxy_cache_key \$uri\$is_args\$args\$slice_range;
      proxy_cache_valid 200 206 1h;
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

# start_bloomgate NAME MODE: bloomgate slicing objects above 8 MiB into 1 MiB slices, RAM_MIB of
# RAM over a DISK_MIB disk tier in $WORK/NAME-disk, admission MODE.
start_bloomgate() {
  local name=$1 mode=$2
  rm -rf "$WORK/$name-disk"
  write_config "$WORK/$name.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"${RAM_MIB}MiB\"
slice_above = \"8MiB\"
slice_bytes = \"1MiB\"
[admission]
mode = \"$mode\"${PROBATION_SHARE:+
probation_share = $PROBATION_SHARE}
[disk]
path = \"$WORK/$name-disk\"
max_bytes = \"${DISK_MIB}MiB\"${WRITE_BUFFER:+
write_buffer = \"$WRITE_BUFFER\"}"
  start_proxy "$name" "$WORK/$name.toml"
}

# replay_through NAME URL PID: replays the trace; prints "requests errors origin_requests
# origin_bytes write_bytes".
replay_through() {
  local name=$1 url=$2 pid=$3 requests_before taken_before io_before errors requests
  requests_before=$(origin_requests)
  taken_before=$(origin_taken)
  io_before=$(io_written "$pid")
  "$BLOOMGATE" replay --trace "$WORK/video.csv" --target "$url" --concurrency "$CONCURRENCY" \
    --json >"$WORK/$name.replay.json" 2>"$WORK/$name.replay.log"
  sleep 2 # let the disk writers and nginx's cache manager finish what they queued
  read -r requests errors < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["requests"], r["errors"]["total"])' "$WORK/$name.replay.json")
  echo "$requests $errors $(($(origin_requests) - requests_before)) $(($(origin_taken) - taken_before)) $(($(io_written "$pid") - io_before))"
}

part_savings() {
  "$BLOOMGATE" trace generate --video --out "$WORK/video.csv" --sessions "$SESSIONS" \
    --videos "$VIDEOS" --video-min "$VIDEO_MIN" --video-max "$VIDEO_MAX" --chunk 1MiB --seed "$SEED"
  local asked
  asked=$(python3 -c '
import sys
total = 0
for line in open(sys.argv[1]).read().splitlines()[1:]:
    first, last = line.split(",")[3][len("bytes="):].split("-")
    total += int(last) - int(first) + 1
print(total)' "$WORK/video.csv")
  log "trace: $(($(wc -l <"$WORK/video.csv") - 1)) requests, $(mib "$asked") MiB asked for; RAM ${RAM_MIB} MiB, disk ${DISK_MIB} MiB (nginx max_size $((RAM_MIB + DISK_MIB)) MiB)"
  printf '\n%-22s %8s %6s %10s %11s %9s %9s %11s %9s %9s\n' "peer" requests errors "origin req" \
    "origin MiB" "origin %" "RAM MiB" "disk MiB" "io MiB" "dir MiB"
  local peer result requests errors origin_requests origin_bytes io ram disk dir
  for peer in ${SAVINGS_PEERS:-bloomgate-per-slice bloomgate-every-slice nginx-slice-1 nginx-slice-2}; do
    case $peer in
      bloomgate-*)
        local mode=probation
        [[ $peer == bloomgate-every-slice ]] && mode=off
        start_bloomgate "$peer" "$mode"
        result=$(replay_through "$peer" "$PROXY_URL" "$PROXY_PID")
        scrape "$ADMIN_URL" "$WORK/$peer.prom"
        ram=$(mib "$(metric "$WORK/$peer.prom" bloomgate_cache_written_bytes_total)")
        disk=$(mib "$(metric "$WORK/$peer.prom" bloomgate_disk_written_bytes_total)")
        # The disk tier's segment files are made at their full size: du says nothing here.
        dir="-"
        stop_pid "$PROXY_PID"
        ;;
      nginx-slice-*)
        start_nginx "$peer" "${peer##*-}"
        result=$(replay_through "$peer" "$NGINX_URL" "$NGINX_PID")
        ram="-"
        disk="-"
        dir=$(mib "$(du -sb "$WORK/$peer/cache" | cut -f1)")
        stop_pid "$NGINX_PID"
        ;;
    esac
    read -r requests errors origin_requests origin_bytes io <<<"$result"
    printf '%-22s %8d %6d %10d %11s %8s%% %9s %11s %9s %9s\n' "$peer" "$requests" "$errors" \
      "$origin_requests" "$(mib "$origin_bytes")" \
      "$(python3 -c "print(f'{100 * $origin_bytes / $asked:.1f}')")" "$ram" "$disk" "$(mib "$io")" "$dir"
  done
}

# wrk_mib_per_s URL: the median over ROUNDS of wrk's Transfer/sec, in MiB/s.
wrk_mib_per_s() {
  local url=$1 round
  for round in $(seq "$ROUNDS"); do
    wrk -t 2 -c "$CONNECTIONS" -d "${SECONDS_PER_ROUND}s" "$url" |
      awk '/^Transfer\/sec:/ {
        v = $2; u = substr(v, length(v) - 1); n = substr(v, 1, length(v) - 2) + 0
        if (u == "GB") n *= 1024; else if (u == "KB") n /= 1024; else if (u != "MB") n = 0
        printf "%.1f\n", n }'
  done | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

# warm URL: asks for the object three times, so that every policy has stored it.
warm() {
  local pass
  for pass in 1 2 3; do curl -s -o /dev/null "$1"; done
}

part_speed() {
  local sliced unsliced nginx
  start_bloomgate speed-sliced probation
  warm "$PROXY_URL$SPEED_OBJECT"
  sliced=$(wrk_mib_per_s "$PROXY_URL$SPEED_OBJECT")
  stop_pid "$PROXY_PID"
  write_config "$WORK/speed-unsliced.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"${RAM_MIB}MiB\"
max_object_bytes = \"64MiB\""
  start_proxy speed-unsliced "$WORK/speed-unsliced.toml"
  warm "$PROXY_URL$SPEED_OBJECT"
  unsliced=$(wrk_mib_per_s "$PROXY_URL$SPEED_OBJECT")
  stop_pid "$PROXY_PID"
  start_nginx speed-nginx 1
  warm "$NGINX_URL$SPEED_OBJECT"
  nginx=$(wrk_mib_per_s "$NGINX_URL$SPEED_OBJECT")
  stop_pid "$NGINX_PID"
  printf '\n64 MiB object, cached, fetched whole (wrk -c %d, %d s, median of %d), MiB/s:\n' \
    "$CONNECTIONS" "$SECONDS_PER_ROUND" "$ROUNDS"
  printf '  bloomgate sliced %s, unsliced %s (sliced/unsliced %s), nginx slice 1m %s (bloomgate sliced/nginx %s)\n' \
    "$sliced" "$unsliced" "$(python3 -c "print(f'{$sliced / $unsliced:.2f}')")" "$nginx" \
    "$(python3 -c "print(f'{$sliced / $nginx:.2f}')")"
}

for part in $PARTS; do
  "part_$part"
done
