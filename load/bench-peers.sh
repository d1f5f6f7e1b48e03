#!/usr/bin/env bash
# Benchmark bloomgate against nginx, Varnish and Apache Traffic Server, in one run, on loopback.
#
# Starts `bloomgate origin`, then each proxy in front of it with the same cache size, each admitting
# on the second request where it can (nginx proxy_cache_min_uses 2; ATS cache_promote --hits=2;
# Varnish has no such policy and caches on the first). nginx runs two ways, because its best
# configuration depends on the load (issue 37): "nginx" with `sendfile off` (nginx's own default),
# which serves small hits fastest, and "nginx-sendfile" with `sendfile on` (as Debian's nginx.conf
# has it), which serves 64 KiB and disk hits fastest; both with `tcp_nopush off`, because Debian's
# `tcp_nopush on` beside sendfile stalled every response about 40 ms on loopback here (1,547 req/s).
# Both keep a connection for any number of requests (`keepalive_requests`, 1,000 by default, after
# which nginx closes an HTTP/1.1 connection and sends HTTP/2 GOAWAY: h2load counted the streams cut
# by it as errors), as bloomgate does.
# The summary compares bloomgate with the better of the two per workload. Drives each in turn with wrk: a 1 KiB and a
# 64 KiB cached object, and a mix of popular objects and one-hit misses; then, for the peers that
# serve HTTPS here (bloomgate and nginx, one ECDSA P-256 certificate made for the run), the 1 KiB hit
# over TLS with keep-alive ("https") and with a new connection and full handshake per request
# ("tls-hs", `Connection: close`), and over HTTP/2 on TLS with h2load ("h2": 10 streams on each
# connection; p50/p99 from h2load's per-request log); and hits read from a disk cache: bloomgate runs a second instance
# with 4 MiB of RAM over a disk tier, nginx and ATS serve from their file caches, all three under
# DISK_DIR (one file system for all), page cache warm, objects at random: "disk" (DISK_OBJECTS of
# 64 KiB), "disk1k" (DISK_SMALL_OBJECTS of 1 KiB, more than the 4 MiB of RAM holds), "disk1m"
# (DISK_OBJECTS / 10 of 1 MiB) and "disk-tls" (the 64 KiB ones over HTTPS, bloomgate and nginx);
# "ram64" asks bloomgate's main instance (and Varnish's memory) for the same 64 KiB objects, the
# memory hits a disk hit is measured against. Prints requests/s, p50, p99,
# requests that reached the origin, CPU time per request (the proxy's utime + stime from
# /proc/PID/stat over the run, summed over its processes, divided by the requests wrk completed:
# steadier than requests/s on a shared machine), and each proxy's peak memory (VmHWM summed over
# its processes).
#
# Usage: load/bench-peers.sh            (from the repository root; builds the release binary)
# Environment:
#   PEERS="bloomgate nginx varnish ats"   which proxies to run, in this order; also "nginx-sendfile"
#                                         (nginx with sendfile on, its own cache); also "group":
#                                         bloomgate in front of an upstream group of three origin
#                                         servers (the origin and two more like it, round-robin,
#                                         passive and active health checks), whose cpu/bg against
#                                         "bloomgate" is what balancing and health cost per request;
#                                         also "policy": bloomgate with three routes and a cache
#                                         policy of five rules on the route the load takes (none
#                                         of which changes what is cached), whose req/s and cpu/bg
#                                         against "bloomgate" are what per-route rules cost;
#                                         also "hyper": bloomgate on hyper's HTTP/1.1 server
#                                         (server.http1 = "hyper"; the peer "bloomgate" runs the
#                                         default, its own), plain HTTP workloads only
#   DURATION=10 CONNECTIONS=64 THREADS=2 CACHE_MIB=256
#   ROUNDS=1                              rounds of every workload; the median round is shown
#   ALTERNATE=1                           even rounds take the peers in reverse order (default:
#                                         always the PEERS order)
#   BLOOMGATE=path/to/bloomgate           skip the build and use this binary
#   BASELINE=path/to/older/bloomgate      also run this binary as the peer "baseline" (add it to
#                                         PEERS), e.g. a build of main before a change, for a
#                                         before/after ratio in the same run (with a disk-tier
#                                         instance of its own for the disk workloads, configured
#                                         as bloomgate's); its config says
#                                         `admission.enabled = true`, which every version reads
#   BASELINE_ADMISSION='mode = "probation"'  the baseline's [admission] line instead (for a
#                                         version that reads `mode`: then both run the same mode)
#   WORKLOADS="1KiB 64KiB mix https tls-hs disk"   which workloads to run, in this order (also:
#                                         miss h2 disk1k disk1m disk-tls ram64)
#   RATES="25 50 75"                      after the closed-loop rounds, offer each of RATE_WORKLOADS
#                                         (default "1KiB 64KiB mix") at these percentages of nginx's
#                                         median peak for it, to every peer, with oha (-q,
#                                         --latency-correction): p50, p99, p99.9 at a fixed rate,
#                                         and p99, p99.9 without oha's own stalls (oha_stalls.py)
#   RATE_ROUNDS=1                         rounds of the fixed-rate phase; each figure is the median
#                                         of its rounds (even rounds take the peers in reverse)
#   DISK_OBJECTS=2000                     objects of 64 KiB in the disk workloads (a tenth as many
#                                         of 1 MiB in "disk1m")
#   DISK_SMALL_OBJECTS=20000              objects of 1 KiB in "disk1k"
#   DISK_MIB=1024                         the size of each peer's disk cache (bloomgate's disk tier,
#                                         nginx's proxy_cache_path max_size, ATS's storage)
#   DISK_DIR=/dev/shm                     the file system every peer's disk cache lives on (tmpfs
#                                         unless given; e.g. DISK_DIR=/var/tmp for the machine's disk)
#   BASE_PORT=18100                       ports BASE_PORT..BASE_PORT+27 on 127.0.0.1
#   KEEP=1                                keep the work directory (configs, logs)
#   DISK_VERIFY_READS=first               bloomgate's disk instance checks a record's checksum on its
#                                         first read only (`disk.verify_reads`; default "every")
#   DISK_SENDFILE=true                    bloomgate's disk instance sends plain-HTTP disk hits from the
#                                         segment file with sendfile (server.sendfile; default false)
#   DISK_MMAP=false                       bloomgate's disk instance reads tmpfs segments with pread
#                                         (disk.mmap; default true)
set -euo pipefail

cd "$(dirname "$0")/.."
PEERS=${PEERS:-"bloomgate nginx varnish ats"}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
CACHE_MIB=${CACHE_MIB:-256}
ROUNDS=${ROUNDS:-1}
BASE_PORT=${BASE_PORT:-18100}
ORIGIN_PORT=$BASE_PORT
WORKLOADS=${WORKLOADS:-"1KiB 64KiB mix https tls-hs disk"}
DISK_OBJECTS=${DISK_OBJECTS:-2000}
DISK_SMALL_OBJECTS=${DISK_SMALL_OBJECTS:-20000}
DISK_MIB=${DISK_MIB:-1024}
declare -A PORT=([bloomgate]=$((BASE_PORT + 1)) [nginx]=$((BASE_PORT + 2)) [varnish]=$((BASE_PORT + 3)) [ats]=$((BASE_PORT + 4)) [baseline]=$((BASE_PORT + 5)) [group]=$((BASE_PORT + 14)) [policy]=$((BASE_PORT + 18)) [nginx-sendfile]=$((BASE_PORT + 20)) [hyper]=$((BASE_PORT + 22)))
# The HTTPS listeners of the peers that have one here.
declare -A TLS_PORT=([bloomgate]=$((BASE_PORT + 6)) [nginx]=$((BASE_PORT + 7)) [nginx-sendfile]=$((BASE_PORT + 21)) [baseline]=$((BASE_PORT + 23)))
# bloomgate's disk-tier instances (the baseline has one too): HTTPS and admin ports.
declare -A DISK_TLS_PORT=([bloomgate]=$((BASE_PORT + 12)) [baseline]=$((BASE_PORT + 27)))
declare -A DISK_ADMIN_PORT=([bloomgate]=$((BASE_PORT + 11)) [baseline]=$((BASE_PORT + 26)))
# Where each peer serves hits from its disk cache: bloomgate's and ATS's second instances (small
# RAM over their disk); nginx keeps every cached body in files anyway. Varnish caches in memory only.
declare -A DISK_PORT=([bloomgate]=$((BASE_PORT + 10)) [nginx]=${PORT[nginx]} [nginx-sendfile]=${PORT[nginx-sendfile]} [ats]=$((BASE_PORT + 13)) [baseline]=$((BASE_PORT + 25)))
ADMIN_PORT=$((BASE_PORT + 9))
ORIGIN="127.0.0.1:$ORIGIN_PORT"
# The peer "group": its admin listener, and the two origin servers it has besides ORIGIN.
GROUP_ADMIN_PORT=$((BASE_PORT + 15))
GROUP_SERVERS=("127.0.0.1:$((BASE_PORT + 16))" "127.0.0.1:$((BASE_PORT + 17))")
# Every origin server running: requests that reached "the origin" are summed over them.
ORIGINS=("$ORIGIN")

# shellcheck source=load/lib.sh
source load/lib.sh
# Caches that live in files get a directory on one file system for all: memory-backed unless
# DISK_DIR names another.
SHM=$(mktemp -d "${DISK_DIR:-/dev/shm}/bloomgate-bench.XXXXXX")
trap 'rm -rf "$SHM"; stop_all' EXIT

install_missing() {
  local missing=()
  command -v wrk >/dev/null || missing+=(wrk)
  command -v nginx >/dev/null || missing+=(nginx)
  command -v varnishd >/dev/null || missing+=(varnish)
  command -v traffic_server >/dev/null || missing+=(trafficserver)
  command -v h2load >/dev/null || missing+=(nghttp2-client)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Waits until something answers HTTP on 127.0.0.1:$1 (any status), at most 20 s.
wait_for_http() {
  for _ in $(seq 200); do
    if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/"; then return 0; fi
    sleep 0.1
  done
  log "nothing answers on port $1"
  return 1
}

# Peak resident memory in MiB of a process and its descendants (VmHWM summed).
peak_rss_mib() {
  local kib=0 hwm pid
  for pid in $(process_tree "$1"); do
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    kib=$((kib + ${hwm:-0}))
  done
  echo $((kib / 1024))
}

# The process and its descendants, one PID a line.
process_tree() {
  local queue=("$1") pid child
  while ((${#queue[@]})); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    echo "$pid"
    for child in $(pgrep -P "$pid" || true); do queue+=("$child"); done
  done
}

# CPU time in clock ticks (utime + stime, every thread) of a process and its descendants, those
# that have exited included (cutime + cstime: nginx's cache loader exits during the first run, and
# without them its time left the sum, once below zero). The command name in /proc/PID/stat may hold
# spaces, so fields are counted after its closing ")".
cpu_ticks() {
  local total=0 pid stat
  for pid in $(process_tree "$1"); do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    stat=${stat##*) }
    total=$((total + $(echo "$stat" | awk '{print $12 + $13 + $14 + $15}')))
  done
  echo "$total"
}
CLOCK_TICKS=$(getconf CLK_TCK)

# Hits the disk-tier instance of PEER (bloomgate or baseline) read from its disk tier so far (0
# when it does not run).
disk_hits() {
  metric <({ curl -s "http://127.0.0.1:${DISK_ADMIN_PORT[$1]}/metrics" || true; }) bloomgate_disk_hits_total
}

origin_requests() {
  local total=0 origin n
  for origin in "${ORIGINS[@]}"; do
    n=$(curl -s "http://$origin/_origin/stats" | sed -E 's/.*"requests": ?([0-9]+).*/\1/')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

start_origin() {
  "$BLOOMGATE" origin --listen "$ORIGIN" >"$WORK/origin.log" 2>&1 &
  PIDS+=($!)
  wait_for_http "$ORIGIN_PORT"
}

# One certificate for every HTTPS listener, of one type (ECDSA P-256), valid for the run.
make_certificate() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
}

# bloomgate_config PORT ADMIN_PORT ADMISSION_LINE [TLS_PORT]: a bloomgate config on these ports.
bloomgate_config() {
  cat <<EOF
[server]
listen = "127.0.0.1:$1"
EOF
  if [[ -n "${4:-}" ]]; then
    cat <<EOF
[server.tls]
listen = "127.0.0.1:$4"
cert_file = "$WORK/cert.pem"
key_file = "$WORK/key.pem"
EOF
  fi
  cat <<EOF
[origin]
url = "http://$ORIGIN"
[cache]
max_bytes = "${CACHE_MIB}MiB"
[admin]
listen = "127.0.0.1:$2"
[admission]
$3
[log]
level = "warn"
EOF
}

start_bloomgate() {
  bloomgate_config "${PORT[bloomgate]}" "$ADMIN_PORT" 'mode = "probation"' "${TLS_PORT[bloomgate]}" >"$WORK/bloomgate.toml"
  "$BLOOMGATE" serve --config "$WORK/bloomgate.toml" >"$WORK/bloomgate.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

# The instance for disk hits: 4 MiB of RAM (so nearly every hit is read from the disk tier), a
# disk tier of DISK_MIB beside the peers' file caches, probation admission, HTTP and HTTPS.
start_bloomgate_disk() { start_disk_instance bloomgate "$BLOOMGATE"; }

# The baseline's (BASELINE) disk instance, configured as bloomgate's, with a tier of its own.
start_baseline_disk() { start_disk_instance baseline "$BASELINE"; }

# start_disk_instance PEER BINARY
start_disk_instance() {
  local name=$1 binary=$2
  cat >"$WORK/$name-disk.toml" <<EOF
[server]
listen = "127.0.0.1:${DISK_PORT[$name]}"
sendfile = ${DISK_SENDFILE:-false}
[server.tls]
listen = "127.0.0.1:${DISK_TLS_PORT[$name]}"
cert_file = "$WORK/cert.pem"
key_file = "$WORK/key.pem"
[origin]
url = "http://$ORIGIN"
[cache]
max_bytes = "4MiB"
max_object_bytes = "2MiB"
[disk]
path = "$SHM/$name-disk"
max_bytes = "${DISK_MIB}MiB"
block_bytes = "16MiB"
write_buffer = "64MiB"
mmap = ${DISK_MMAP:-true}
verify_reads = "${DISK_VERIFY_READS:-every}"
[admin]
listen = "127.0.0.1:${DISK_ADMIN_PORT[$name]}"
[admission]
mode = "probation"
[log]
level = "warn"
EOF
  "$binary" serve --config "$WORK/$name-disk.toml" >"$WORK/$name-disk.log" 2>&1 &
  DISK_PID=$!
  PIDS+=("$DISK_PID")
}

# bloomgate in front of a group of three origin servers: ORIGIN and GROUP_SERVERS, round-robin,
# passive checks (the defaults) and a probe of each every second. The probes reach the origins'
# stats endpoint, which no request counts.
start_group() {
  local server
  for server in "${GROUP_SERVERS[@]}"; do
    "$BLOOMGATE" origin --listen "$server" >"$WORK/origin-${server##*:}.log" 2>&1 &
    PIDS+=($!)
    wait_for_http "${server##*:}"
    ORIGINS+=("$server")
  done
  {
    bloomgate_config "${PORT[group]}" "$GROUP_ADMIN_PORT" 'mode = "probation"' | grep -v '^url = '
    cat <<EOF
[upstreams.origins]
servers = ["http://$ORIGIN", "http://${GROUP_SERVERS[0]}", "http://${GROUP_SERVERS[1]}"]
balance = "round-robin"
[upstreams.origins.health]
probe_path = "/_origin/stats"
probe_interval = "1s"
EOF
  } >"$WORK/group.toml"
  "$BLOOMGATE" serve --config "$WORK/group.toml" >"$WORK/group.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

# The peer "policy": the origin as a group of one, three routes, and on the one the load takes
# (every path but /static/ and /api/) five rules that leave what it caches as it is: a bypass by
# cookie and by field, a dropped query parameter, the client's Cache-Control ignored, a lifetime
# floor and a stale-if-error window.
start_policy() {
  {
    bloomgate_config "${PORT[policy]}" "$((BASE_PORT + 19))" 'mode = "probation"' | grep -v '^url = '
    cat <<EOF
[upstreams.origin]
servers = ["http://$ORIGIN"]
[[routes]]
name = "static"
path_prefix = "/static/"
upstream = "origin"
[routes.cache]
override_ttl = "1h"
[[routes]]
name = "api"
path_prefix = "/api/"
upstream = "origin"
[routes.cache]
enabled = false
[[routes]]
name = "site"
upstream = "origin"
[routes.cache]
ignore_client_cache_control = true
min_ttl = "1s"
stale_if_error = "1d"
[routes.cache.bypass]
cookies = ["session"]
headers = ["x-preview"]
[routes.cache.key]
drop_query_params = ["utm_source"]
EOF
  } >"$WORK/policy.toml"
  "$BLOOMGATE" serve --config "$WORK/policy.toml" >"$WORK/policy.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

# The peer "hyper": bloomgate as the peer "bloomgate" is, on hyper's HTTP/1.1 server
# (server.http1 = "hyper") instead of its own; plain HTTP only, no disk instance. Beside a
# BASELINE older than the native server, it separates what changed in the cache from the server.
start_hyper() {
  bloomgate_config "${PORT[hyper]}" "$((BASE_PORT + 24))" 'mode = "probation"' |
    sed 's/^\[server\]$/[server]\nhttp1 = "hyper"/' >"$WORK/hyper.toml"
  "$BLOOMGATE" serve --config "$WORK/hyper.toml" >"$WORK/hyper.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

start_baseline() {
  [[ -n "${BASELINE:-}" ]] || { log "PEERS names baseline but BASELINE is not set"; return 1; }
  bloomgate_config "${PORT[baseline]}" "$((ADMIN_PORT - 1))" "${BASELINE_ADMISSION:-enabled = true}" "${TLS_PORT[baseline]}" >"$WORK/baseline.toml"
  "$BASELINE" serve --config "$WORK/baseline.toml" >"$WORK/baseline.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

start_nginx() { start_nginx_instance nginx off; }

# nginx as Debian configures it for files (sendfile on), but with tcp_nopush off: see the header.
start_nginx-sendfile() { start_nginx_instance nginx-sendfile on; }

# start_nginx_instance NAME SENDFILE: an nginx of its own directories, cache and ports.
start_nginx_instance() {
  local name=$1 sendfile=$2
  local dir="$WORK/$name"
  mkdir -p "$dir/logs" "$dir/temp" "$SHM/$name"
  cat >"$dir/nginx.conf" <<EOF
user root;
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile $sendfile;
  tcp_nopush off;
  keepalive_requests 1000000;
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  proxy_cache_path $SHM/$name levels=1:2 keys_zone=bench:32m max_size=${DISK_MIB}m inactive=1h use_temp_path=off;
  upstream origin { server $ORIGIN; keepalive 128; }
  ssl_certificate $WORK/cert.pem;
  ssl_certificate_key $WORK/key.pem;
  ssl_protocols TLSv1.2 TLSv1.3;
  server {
    listen 127.0.0.1:${PORT[$name]};
    listen 127.0.0.1:${TLS_PORT[$name]} ssl http2;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache bench;
      proxy_cache_min_uses 2;
      proxy_cache_lock on;
      add_header X-Cache-Status \$upstream_cache_status;
    }
  }
}
EOF
  nginx -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

start_varnish() {
  local dir="$WORK/varnish"
  mkdir -p "$dir"
  # -j none: no privilege separation, so root can run it from a private directory.
  varnishd -F -j none -n "$dir" -a "127.0.0.1:${PORT[varnish]}" -b "$ORIGIN" \
    -s "malloc,${CACHE_MIB}m" -s "Transient=malloc,64m" >"$WORK/varnish.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

start_ats() { start_ats_instance ats "${PORT[ats]}" "$CACHE_MIB"; }

# ATS for disk hits: a RAM cache of 4 MiB, as bloomgate's disk-tier instance, so its hits are read
# from its storage file.
start_ats_disk() {
  start_ats_instance ats-disk "${DISK_PORT[ats]}" 4
  DISK_PID=$SERVER_PID
}

# start_ats_instance NAME PORT RAM_MIB: an ATS of its own directories and DISK_MIB of storage.
start_ats_instance() {
  local name=$1 port=$2 ram=$3
  local dir="$WORK/$name"
  mkdir -p "$dir/etc" "$dir/log" "$dir/run" "$SHM/$name"
  cp -r /etc/trafficserver/. "$dir/etc/"
  echo "$SHM/$name ${DISK_MIB}M" >"$dir/etc/storage.config"
  echo "map http://127.0.0.1:$port/ http://$ORIGIN/ @plugin=cache_promote.so @pparam=--policy=lru @pparam=--hits=2" \
    >"$dir/etc/remap.config"
  : >"$dir/etc/plugin.config"
  local overrides=(
    "proxy.config.http.server_ports STRING $port"
    "proxy.config.admin.user_id STRING #-1"
    "proxy.config.log.logfile_dir STRING $dir/log"
    "proxy.config.local_state_dir STRING $dir/run"
    "proxy.config.log.logging_enabled INT 0"
    "proxy.config.reverse_proxy.enabled INT 1"
    "proxy.config.url_remap.remap_required INT 1"
    "proxy.config.cache.ram_cache.size INT ${ram}M"
    "proxy.config.http.cache.required_headers INT 0"
    "proxy.config.http.insert_response_via_str INT 0"
    "proxy.config.exec_thread.autoconfig INT 1"
    "proxy.config.exec_thread.limit INT 2"
    "proxy.config.diags.debug.enabled INT 0"
  )
  local names
  names=$(printf '%s\n' "${overrides[@]}" | awk '{print $1}' | paste -sd'|')
  grep -vE "^CONFIG ($names) " /etc/trafficserver/records.config >"$dir/etc/records.config" || true
  printf 'CONFIG %s\n' "${overrides[@]}" >>"$dir/etc/records.config"
  PROXY_CONFIG_CONFIG_DIR="$dir/etc" traffic_server >"$WORK/$name.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
}

# Requests a URL until the peer serves it without the origin (at most 10 tries). nginx keys on the
# scheme too, so HTTPS objects are warmed over HTTPS (-k: the run's own certificate).
warm() {
  local url=$1 before after
  for _ in $(seq 10); do
    before=$(origin_requests)
    curl -sk -o /dev/null "$url"
    after=$(origin_requests)
    [[ "$before" == "$after" ]] && return 0
  done
  log "warning: $url is still fetched from the origin after 10 requests"
}

# The mixed workload: 80% of requests to 2000 popular 4 KiB objects, 20% to objects never seen again;
# "miss" is its one-hit misses alone (what a miss costs, which the mix's figure blends with hits).
# thread_id and round are globals: setup() and init() set them in each thread's own Lua state.
cat >"$WORK/mix.lua" <<'EOF'
local counter = 0
local next_thread = 0
setup = function(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end
-- args[1] is the round: each round has its own one-hit keys. args[2] is the share of popular
-- requests (0.8 for "mix", 0 for "miss"), in the one-hit keys too, so that the two never meet.
init = function(args)
  round = args[1] or "1"
  hot = tonumber(args[2] or "0.8")
  math.randomseed(1234 + thread_id + 100 * tonumber(round))
end
request = function()
  counter = counter + 1
  local key
  if math.random() < hot then
    key = "hot-" .. math.random(2000)
  else
    key = "once-" .. round .. "-" .. hot .. "-" .. thread_id .. "-" .. counter
  end
  return wrk.format("GET", "/obj/" .. key .. "?size=4096")
end
EOF

# The disk workloads: objects at random among those warmed, every one of them cached.
# disk_script NAME PREFIX COUNT SIZE
disk_script() {
  cat >"$WORK/$1.lua" <<EOF
request = function()
  return wrk.format("GET", "/obj/$2" .. math.random($3) .. "?size=$4")
end
EOF
}
disk_script disk disk- "$DISK_OBJECTS" 65536
disk_script disk1k disk-1k- "$DISK_SMALL_OBJECTS" 1024
disk_script disk1m disk-1m- "$((DISK_OBJECTS / 10))" 1048576

# Warms the objects the disk workloads in WORKLOADS ask for, at BASE (plain HTTP) and SECURE.
warm_disk() {
  local base=$1 secure=${2:-}
  [[ " $WORKLOADS " == *" disk "* || " $WORKLOADS " == *" disk-tls "* ]] && warm_objects "$base" "$DISK_OBJECTS" disk-
  [[ " $WORKLOADS " == *" disk1k "* ]] && warm_objects "$base" "$DISK_SMALL_OBJECTS" disk-1k- 1024
  [[ " $WORKLOADS " == *" disk1m "* ]] && warm_objects "$base" "$((DISK_OBJECTS / 10))" disk-1m- 1048576
  # nginx keys on the scheme: its HTTPS objects are other entries.
  if [[ -n "$secure" && " $WORKLOADS " == *" disk-tls "* ]]; then
    warm_objects "$secure" "$DISK_OBJECTS" disk-
  fi
  return 0
}

# Requests every disk object three times (second-hit admission stores each on its second request;
# bloomgate's small RAM then evicts it to the disk tier), 8 curls at a time.
# wrk latency in ms from a value like 812.00us, 1.23ms, 1.02s.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) n = n / 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n = n * 1000
    printf "%.3f", n
  }'
}

# Runs wrk; prints "requests/s p50_ms p99_ms errors requests".
# HTTP/2 over TLS (ALPN h2) with h2load: CONNECTIONS connections of H2_STREAMS concurrent streams
# each; p50 and p99 from its log of every request (microseconds, third column).
drive_h2() {
  local out requests_log="$WORK/h2load-requests.log"
  out=$(h2load -t "$THREADS" -c "$CONNECTIONS" -m "${H2_STREAMS:-10}" -D "$DURATION" \
    --log-file="$requests_log" "$@" 2>&1)
  echo "$out" >>"$WORK/h2load.log"
  local rps requests errors p50 p99
  rps=$(echo "$out" | awk '/^finished in/ {printf "%.0f", $4}')
  requests=$(echo "$out" | awk '/^requests:/ {print $8}')
  errors=$(echo "$out" | awk '/^requests:/ {n = $10 + $12} /^status codes:/ {n += $6 + $8} END {print n + 0}')
  read -r p50 p99 < <(cut -f3 "$requests_log" | sort -n |
    awk '{v[NR] = $1} END {if (NR) printf "%.3f %.3f\n", v[int(NR * 0.5) + 1] / 1000, v[int(NR * 0.99) + 1] / 1000; else print "0 0"}')
  echo "${rps:-0} $p50 $p99 $errors ${requests:-0}"
}

drive() {
  [[ ${DRIVER:-wrk} == h2load ]] && { drive_h2 "$@"; return; }
  local out
  out=$(wrk -t "$THREADS" -c "$CONNECTIONS" -d "${DURATION}s" --latency "$@" 2>&1)
  echo "$out" >>"$WORK/wrk.log"
  local rps p50 p99 errors requests
  rps=$(echo "$out" | awk '/^Requests\/sec:/ {printf "%.0f", $2}')
  requests=$(echo "$out" | awk '/ requests in / {print $1}')
  p50=$(to_ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
  p99=$(to_ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
  errors=$(echo "$out" | awk '/Non-2xx or 3xx responses:/ {n += $NF} /Socket errors:/ {for (i = 4; i <= NF; i += 2) n += $i} END {print n + 0}')
  echo "${rps:-0} $p50 $p99 $errors ${requests:-0}"
}

install_missing
make_certificate
if [[ -z "${BLOOMGATE:-}" ]]; then
  log "building the release binary"
  cargo build --release --quiet
  BLOOMGATE="${CARGO_TARGET_DIR:-target}/release/bloomgate"
fi

start_origin
DISK_WORKLOAD=0
[[ " $WORKLOADS " == *" disk"* ]] && DISK_WORKLOAD=1
# The second instance of each peer that has one for the disk loads, and its PID.
declare -A DISK_SERVER
for peer in bloomgate baseline ats; do
  if ((DISK_WORKLOAD)) && [[ " $PEERS " == *" $peer "* ]]; then
    log "starting $peer's disk instance on port ${DISK_PORT[$peer]}"
    "start_${peer}_disk"
    DISK_SERVER[$peer]=$DISK_PID
    wait_for_http "${DISK_PORT[$peer]}"
  fi
done
# All peers run at once and take turns per workload, so that load from elsewhere on the machine
# hits them alike; an idle peer costs next to nothing.
declare -A SERVER
RUNNING=()
for peer in $PEERS; do
  log "starting $peer on port ${PORT[$peer]}"
  "start_$peer"
  SERVER[$peer]=$SERVER_PID
  if wait_for_http "${PORT[$peer]}"; then
    RUNNING+=("$peer")
    warm "http://127.0.0.1:${PORT[$peer]}/obj/small?size=1024"
    warm "http://127.0.0.1:${PORT[$peer]}/obj/large?size=65536"
    if [[ -n "${TLS_PORT[$peer]:-}" ]]; then
      warm "https://127.0.0.1:${TLS_PORT[$peer]}/obj/small?size=1024"
    fi
    if ((DISK_WORKLOAD)) && [[ -n "${DISK_PORT[$peer]:-}" ]]; then
      log "warming the disk objects of $peer"
      secure=
      [[ -n "${DISK_TLS_PORT[$peer]:-}" ]] && secure="https://127.0.0.1:${DISK_TLS_PORT[$peer]}"
      [[ $peer == nginx* ]] && secure="https://127.0.0.1:${TLS_PORT[$peer]}"
      warm_disk "http://127.0.0.1:${DISK_PORT[$peer]}" "$secure"
    fi
    if [[ " $WORKLOADS " == *" ram64 "* && ($peer == bloomgate || $peer == varnish) ]]; then
      log "warming the 64 KiB objects in $peer's memory"
      warm_objects "http://127.0.0.1:${PORT[$peer]}" "$DISK_OBJECTS" disk-
    fi
  else
    log "$peer did not start; skipped (KEEP=1 keeps its log in $WORK)"
  fi
done

# peer_order ROUND: sets `order` to the running peers, reversed when ROUND is even, so that none
# always runs first.
peer_order() {
  order=("${RUNNING[@]}")
  if (($1 % 2 == 0)); then
    order=()
    for ((i = ${#RUNNING[@]} - 1; i >= 0; i--)); do order+=("${RUNNING[i]}"); done
  fi
}

RESULTS="$WORK/results"
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
  # With ALTERNATE=1, even rounds take the peers in reverse order.
  if [[ "${ALTERNATE:-0}" == 1 ]]; then peer_order "$round"; else peer_order 1; fi
  for workload in $WORKLOADS; do
    for peer in "${order[@]}"; do
      base="http://127.0.0.1:${PORT[$peer]}"
      secure="https://127.0.0.1:${TLS_PORT[$peer]:-0}"
      if [[ $workload == https || $workload == tls-hs || $workload == h2 ]] && [[ -z "${TLS_PORT[$peer]:-}" ]]; then
        continue
      fi
      [[ $workload == disk* && -z "${DISK_PORT[$peer]:-}" ]] && continue
      [[ $workload == disk-tls && -z "${TLS_PORT[$peer]:-}" ]] && continue
      [[ $workload == ram64 && $peer != bloomgate && $peer != varnish ]] && continue
      # The process whose CPU time is counted: bloomgate's disk-tier instance serves the disk loads.
      server=${SERVER[$peer]}
      [[ $workload == disk* && -n "${DISK_SERVER[$peer]:-}" ]] && server=${DISK_SERVER[$peer]}
      disk_secure="https://127.0.0.1:${TLS_PORT[$peer]:-0}"
      [[ -n "${DISK_TLS_PORT[$peer]:-}" ]] && disk_secure="https://127.0.0.1:${DISK_TLS_PORT[$peer]}"
      case $workload in
        1KiB) args=("$base/obj/small?size=1024") ;;
        64KiB) args=("$base/obj/large?size=65536") ;;
        mix) args=(-s "$WORK/mix.lua" "$base" -- "$round" 0.8) ;;
        miss) args=(-s "$WORK/mix.lua" "$base" -- "$round" 0) ;;
        https) args=("$secure/obj/small?size=1024") ;;
        tls-hs) args=(-H "Connection: close" "$secure/obj/small?size=1024") ;;
        h2) args=("$secure/obj/small?size=1024") ;;
        disk | disk1k | disk1m) args=(-s "$WORK/$workload.lua" "http://127.0.0.1:${DISK_PORT[$peer]}") ;;
        disk-tls) args=(-s "$WORK/disk.lua" "$disk_secure") ;;
        ram64) args=(-s "$WORK/disk.lua" "$base") ;;
        *) log "unknown workload $workload"; exit 2 ;;
      esac
      before=$(origin_requests)
      disk_hits_before=0
      [[ -n "${DISK_ADMIN_PORT[$peer]:-}" ]] && disk_hits_before=$(disk_hits "$peer")
      cpu_before=$(cpu_ticks "$server")
      driver=wrk
      [[ $workload == h2 ]] && driver=h2load
      read -r rps p50 p99 errors requests < <(DRIVER=$driver drive "${args[@]}")
      cpu_after=$(cpu_ticks "$server")
      after=$(origin_requests)
      if [[ $workload == disk* && -n "${DISK_ADMIN_PORT[$peer]:-}" ]]; then
        log "round $round, $peer $workload: $(($(disk_hits "$peer") - disk_hits_before)) of $requests requests read from the disk tier"
      fi
      # CPU microseconds per request.
      cpu=$(awk -v t=$((cpu_after - cpu_before)) -v hz="$CLOCK_TICKS" -v n="$requests" 'BEGIN { printf "%.2f", (n > 0 ? t * 1e6 / hz / n : 0) }')
      echo "$peer $workload $rps $p50 $p99 $errors $((after - before)) $cpu" >>"$RESULTS"
      log "round $round, $peer $workload: $rps requests/s, p50 $p50 ms, p99 $p99 ms, $cpu us CPU/request"
    done
  done
done
for peer in "${RUNNING[@]}"; do
  echo "$peer rss $(peak_rss_mib "${SERVER[$peer]}")" >>"$RESULTS"
done

# The fixed-rate phase (RATES): each workload of RATE_WORKLOADS offered at RATES percent of nginx's
# median peak for it above, to every peer in turn, by oha with coordinated-omission correction
# (-q, --latency-correction): the latency people see at the rate they run, not at saturation.
if [[ -n "${RATES:-}" ]]; then
  command -v oha >/dev/null || die "RATES needs oha (cargo install oha)"
  RATE_RESULTS="$WORK/rate-results"
  : >"$RATE_RESULTS"
  for workload in ${RATE_WORKLOADS:-1KiB 64KiB mix}; do
    peak=$(awk -v w="$workload" '$1 == "nginx" && $2 == w {print $3}' "$RESULTS" | sort -n |
      awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}')
    if [[ -z "$peak" || "$peak" == 0 ]]; then
      log "no nginx peak for $workload (run it in WORKLOADS with nginx in PEERS); its fixed rates skipped"
      continue
    fi
    for rate_round in $(seq "${RATE_ROUNDS:-1}"); do
      peer_order "$rate_round"
      for pct in $RATES; do
        rate=$((peak * pct / 100))
        for peer in "${order[@]}"; do
          base="http://127.0.0.1:${PORT[$peer]}"
          case $workload in
            1KiB) target=("$base/obj/small?size=1024") ;;
            64KiB) target=("$base/obj/large?size=65536") ;;
            mix)
              mix_urls "$base" "$WORK/mix-$peer.urls" $((rate * DURATION * 2))
              target=(--urls-from-file "$WORK/mix-$peer.urls")
              ;;
            *) log "fixed rates take 1KiB, 64KiB and mix, not $workload"; continue ;;
          esac
          rm -f "$WORK/rate.db"
          oha --no-tui --output-format json -z "${DURATION}s" -q "$rate" -c "$CONNECTIONS" \
            --latency-correction --db-url "$WORK/rate.db" "${target[@]}" >"$WORK/rate.json" 2>"$WORK/rate.err" ||
            { log "oha failed for $peer $workload at $rate/s: $(head -c 300 "$WORK/rate.err")"; continue; }
          # The last two: p99 and p99.9 without the requests sent in oha's own stalls (its result
          # vector doubling at 2^k requests, and the first 50 ms): load/oha_stalls.py.
          read -r p50 p99 p999 achieved own99 own999 < <(python3 - "$WORK/rate.json" "$WORK/rate.db" <<'PY'
import json, sys
sys.path.insert(0, "load")
from oha_stalls import percentile, requests, without_own_stalls
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
ms = lambda k: f"{1000 * (p.get(k) or 0):.3f}"
kept = without_own_stalls(requests(sys.argv[2]))
own = lambda q: f"{1000 * percentile(kept, q):.3f}" if kept else "0.000"
print(ms("p50"), ms("p99"), ms("p99.9"), f'{d["summary"]["requestsPerSec"]:.0f}', own(0.99), own(0.999))
PY
)
          echo "$workload $pct $rate $peer $p50 $p99 $p999 $achieved $own99 $own999" >>"$RATE_RESULTS"
          log "$peer $workload at $pct% of nginx's peak ($rate/s): p50 $p50 ms, p99 $p99 ms, p99.9 $p999 ms (without oha's stalls $own99 / $own999)"
        done
      done
    done
  done
fi

awk -v duration="$DURATION" -v rounds="$ROUNDS" -v connections="$CONNECTIONS" -v threads="$THREADS" -v cache="$CACHE_MIB" '
  function median(key, field,    n, i, j, t, v) {
    n = count[key]
    for (i = 1; i <= n; i++) v[i] = values[key, i, field]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return v[int((n + 1) / 2)]
  }
  $2 == "rss" { rss[$1] = $3; next }
  { key = $1 " " $2
    n = ++count[key]; row_rps[key, n] = $3; row[key, n] = $0
    for (i = 3; i <= NF; i++) values[key, n, i] = $i
    if (!($1 in seen)) { seen[$1] = 1; peers[++npeers] = $1 }
    if (!($2 in wseen)) { wseen[$2] = 1; workloads[++nworkloads] = $2 } }
  END {
    for (key in count) {
      # With several rounds, the median round by requests/s stands for its latencies (a shared
      # machine is noisy); CPU per request is the median of the rounds on its own.
      n = count[key]
      for (i = 1; i <= n; i++) order[i] = i
      for (i = 2; i <= n; i++) for (j = i; j > 1 && row_rps[key, order[j]] < row_rps[key, order[j - 1]]; j--) { t = order[j]; order[j] = order[j - 1]; order[j - 1] = t }
      split(row[key, order[int((n + 1) / 2)]], f, " ")
      rps[key] = f[3]; p50[key] = f[4]; p99[key] = f[5]; err[key] = f[6]; origin[key] = f[7]
      cpu[key] = median(key, 8)
    }
    printf "wrk -t%d -c%d -d%ds on 127.0.0.1, cache %d MiB each, median of %d round(s)\n\n", threads, connections, duration, cache, rounds
    printf "%-14s %-6s %10s %9s %9s %8s %8s %7s %8s %8s %9s\n", "peer", "load", "req/s", "p50 ms", "p99 ms", "vs bg", "origin", "errors", "cpu us", "cpu/bg", "peak MiB"
    for (w = 1; w <= nworkloads; w++) {
      base = rps["bloomgate " workloads[w]]
      base_cpu = cpu["bloomgate " workloads[w]]
      for (p = 1; p <= npeers; p++) {
        key = peers[p] " " workloads[w]
        if (!(key in rps)) continue
        ratio = base > 0 ? sprintf("%.2fx", rps[key] / base) : "-"
        cpu_ratio = base_cpu > 0 ? sprintf("%.2fx", cpu[key] / base_cpu) : "-"
        printf "%-14s %-6s %10d %9.3f %9.3f %8s %8d %7d %8.2f %8s %9s\n", peers[p], workloads[w], rps[key], p50[key], p99[key], ratio, origin[key], err[key], cpu[key], cpu_ratio, rss[peers[p]]
      }
    }
    print "\nvs bg: requests/s relative to bloomgate. origin: requests that reached the origin during the run."
    print "cpu us: the proxy'"'"'s CPU time (user + system, all its processes) per request, median of the rounds;"
    print "cpu/bg: that relative to bloomgate'"'"'s (above 1: the peer spends more CPU per request)."
    print "disk*: bloomgate'"'"'s and ATS'"'"'s second instances (4 MiB of RAM over their disk); nginx from its files."
    print "ram64: the disk load'"'"'s 64 KiB objects from bloomgate'"'"'s main instance (memory hits)."
    print "peak MiB: VmHWM summed over the peer'"'"'s processes (nginx and ATS keep cached bodies in files under /dev/shm, not counted)."

    # bloomgate against the better nginx (by requests/s) of those that ran, workload by workload.
    header = 0
    for (w = 1; w <= nworkloads; w++) {
      key = "bloomgate " workloads[w]
      best = ""
      for (p = 1; p <= npeers; p++) {
        if (peers[p] !~ /^nginx/ || !((peers[p] " " workloads[w]) in rps)) continue
        if (best == "" || rps[peers[p] " " workloads[w]] > rps[best " " workloads[w]]) best = peers[p]
      }
      if (best == "" || !(key in rps)) continue
      if (!header) {
        printf "\nbloomgate against the better nginx per workload\n\n"
        printf "%-6s %-14s %10s %10s %8s %8s %8s %8s\n", "load", "best nginx", "its req/s", "bg req/s", "bg/best", "its cpu", "bg cpu", "cpu b/n"
        header = 1
      }
      other = best " " workloads[w]
      ratio = rps[other] > 0 ? sprintf("%.2fx", rps[key] / rps[other]) : "-"
      cpu_ratio = cpu[other] > 0 ? sprintf("%.2fx", cpu[key] / cpu[other]) : "-"
      printf "%-6s %-14s %10d %10d %8s %8.2f %8.2f %8s\n", workloads[w], best, rps[other], rps[key], ratio, cpu[other], cpu[key], cpu_ratio
    }
    if (header) print "\nbg/best: bloomgate'"'"'s requests/s over the better nginx'"'"'s; cpu b/n: bloomgate'"'"'s CPU per request over that nginx'"'"'s."
  }' "$RESULTS"

if [[ -n "${RATES:-}" && -s "${RATE_RESULTS:-/dev/null}" ]]; then
  printf '\nfixed rates (oha -q, --latency-correction, -c%d -z%ds), as a percentage of nginx'"'"'s median peak above\n\n' "$CONNECTIONS" "$DURATION"
  printf 'median of %d round(s) each\n\n' "${RATE_ROUNDS:-1}"
  printf '%-6s %5s %9s %-10s %9s %9s %10s %10s %9s %10s\n' load "%" "rate/s" peer "p50 ms" "p99 ms" "p99.9 ms" "served/s" "p99 own" "p99.9 own"
  # Each (load, %, peer) in the order first met, each column its median over the rounds.
  python3 - "$RATE_RESULTS" <<'PY' | while read -r workload pct rate peer p50 p99 p999 achieved own99 own999; do
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    w, pct, rate, peer, *vals = line.split()
    rows.setdefault((w, pct, rate, peer), []).append([float(v) for v in vals])
order = {"1KiB": 0, "64KiB": 1, "mix": 2}
for (w, pct, rate, peer), runs in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 9), int(kv[0][1]))):
    med = [statistics.median(col) for col in zip(*runs)]
    print(w, pct, rate, peer, f"{med[0]:.3f}", f"{med[1]:.3f}", f"{med[2]:.3f}", f"{med[3]:.0f}",
          f"{med[4]:.3f}", f"{med[5]:.3f}")
PY
    printf '%-6s %5s %9s %-10s %9s %9s %10s %10s %9s %10s\n' "$workload" "$pct" "$rate" "$peer" "$p50" "$p99" "$p999" "$achieved" "$own99" "$own999"
  done
  printf '\np99 own, p99.9 own: without the requests oha sent in its own stalls (its result vector\n'
  printf 'doubling at 2^k requests, and the first 50 ms), which land on whichever peer it drives:\n'
  printf 'load/oha_stalls.py.\n'
fi
