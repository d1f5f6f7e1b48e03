# Shared by the scripts in load/: find the binary, start origins and proxies on free loopback ports,
# read their metrics, and stop everything they started on exit. Source it; it runs nothing itself.
#
# Every process is started with port 0 and found by the line it prints on stdout, so two scripts (or
# a script and the tests) never fight over a port. Each started process's PID goes into PIDS; the
# EXIT trap sends them SIGTERM, waits up to 5 s, then SIGKILLs what is left, by PID.

PIDS=()
WORK=$(mktemp -d /tmp/bloomgate-load.XXXXXX)

stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${PIDS[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
  done
  if [[ "${KEEP:-0}" == 1 ]]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap stop_all EXIT
trap 'exit 130' INT TERM

log() { echo "$(basename "$0"): $*" >&2; }
die() {
  log "$*"
  exit 1
}

# Sets BLOOMGATE: $BLOOMGATE if given, else the release binary, built if missing.
find_bloomgate() {
  if [[ -z "${BLOOMGATE:-}" ]]; then
    BLOOMGATE="${CARGO_TARGET_DIR:-target}/release/bloomgate"
    if [[ ! -x "$BLOOMGATE" ]]; then
      log "building the release binary"
      cargo build --release --quiet
    fi
  fi
  [[ -x "$BLOOMGATE" ]] || die "no executable at $BLOOMGATE"
}

# Waits until FILE has a line matching the extended regex, while PID lives (at most 30 s); prints the
# line.
wait_for_line() {
  local file=$1 pattern=$2 pid=$3 line
  for _ in $(seq 300); do
    line=$(grep -E -m1 "$pattern" "$file" 2>/dev/null || true)
    if [[ -n "$line" ]]; then
      echo "$line"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  log "no line matching '$pattern' in $file; its end:"
  tail -n 20 "$file" >&2 || true
  return 1
}

# start_origin NAME [MAX_AGE]: starts `bloomgate origin`; sets ORIGIN_URL and ORIGIN_PID.
start_origin() {
  local name=$1 max_age=${2:-3600} line
  "$BLOOMGATE" origin --listen 127.0.0.1:0 --max-age "$max_age" >"$WORK/$name.log" 2>&1 &
  ORIGIN_PID=$!
  PIDS+=("$ORIGIN_PID")
  line=$(wait_for_line "$WORK/$name.log" '^origin listening on ' "$ORIGIN_PID") || die "$name did not start"
  ORIGIN_URL=${line#origin listening on }
}

# write_config FILE ORIGIN_URL [EXTRA_TABLES] [ORIGIN_KEYS]: a proxy config on port 0 (public and
# admin), logging warnings, with ORIGIN_KEYS (lines like `idle_timeout = "5s"`) in its [origin] table
# and EXTRA_TABLES (whole tables, e.g. [cache] and [admission]) appended.
write_config() {
  local file=$1 origin=$2 extra=${3:-} origin_keys=${4:-}
  cat >"$file" <<EOF
[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[origin]
url = "$origin"
$origin_keys
[log]
level = "warn"
$extra
EOF
}

# start_proxy NAME CONFIG: starts `bloomgate serve`; sets PROXY_PID, PROXY_URL (http://host:port)
# and ADMIN_URL (http://host:port, without /metrics). The line read here is the one
# bloomgate::listening::ListeningLine (src/listening.rs) prints and parses; keep the two in step.
start_proxy() {
  local name=$1 config=$2 line
  # Emptied here, not by the child's redirection: that runs after the fork, and a restart under
  # the same name would otherwise read the last run's line (its ports) first.
  : >"$WORK/$name.log"
  "$BLOOMGATE" serve --config "$config" >>"$WORK/$name.log" 2>&1 &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  line=$(wait_for_line "$WORK/$name.log" '^bloomgate listening on ' "$PROXY_PID") || die "$name did not start"
  PROXY_URL=$(sed -E 's/^bloomgate listening on (http:[^ ]+) .*/\1/' <<<"$line")
  ADMIN_URL=$(sed -E 's/.*\(admin (http:[^ ]+)\/metrics\).*/\1/' <<<"$line")
}

# stop_pid PID: SIGTERM, then waits for it to exit (at most 15 s), then SIGKILL.
stop_pid() {
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

# warm_objects BASE_URL COUNT PREFIX [SIZE]: asks for the objects of SIZE bytes (64 KiB unless
# given) BASE_URL/obj/PREFIX1 ..PREFIXCOUNT three times each, 8 clients at a time: a second-hit
# cache stores each on its second request and, when its RAM is small, has moved most of them to
# its disk tier by the third. HTTPS URLs are fetched without checking the certificate (-k).
warm_objects() {
  local base=$1 count=$2 prefix=$3 size=${4:-65536} pass i
  for pass in 1 2 3; do
    for i in $(seq "$count"); do echo "$base/obj/$prefix$i?size=$size"; done |
      xargs -P 8 -n 50 curl -sk >/dev/null
  done
}

# io_written PID: bytes PID and its children caused to reach the block layer (/proc/PID/io
# write_bytes; nginx's workers, cache manager and loader are children).
io_written() {
  local pid total=0 b
  for pid in "$1" $(pgrep -P "$1" || true); do
    b=$(awk '$1 == "write_bytes:" {print $2}' "/proc/$pid/io" 2>/dev/null || echo 0)
    total=$((total + b))
  done
  echo "$total"
}

# A loopback port free now, for a process that must listen where an earlier one did.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# scrape ADMIN_URL FILE: saves the Prometheus text of a proxy.
scrape() { curl -sf --max-time 5 "$1/metrics" >"$2"; }

# metric FILE NAME [LABEL_REGEX]: sum of the samples of NAME (all label sets, or those whose labels
# match LABEL_REGEX), 0 if none. Prints an integer when the sum is one.
metric() {
  local file=$1 name=$2 labels=${3:-}
  awk -v name="$name" -v labels="$labels" '
    /^#/ { next }
    {
      split($1, parts, "{")
      if (parts[1] != name) next
      if (labels != "" && $1 !~ labels) next
      sum += $2
    }
    END { if (sum == int(sum)) printf "%d\n", sum; else printf "%.6g\n", sum }' "$file"
}

# vm_kib PID FIELD: a /proc/PID/status field in KiB (VmRSS, VmHWM).
vm_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# open_fds PID: open file descriptors.
open_fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# mix_urls BASE FILE LINES: bench-peers.sh's mix as a URL list for oha (--urls-from-file): 80% of
# lines among 2,000 popular 4 KiB objects, 20% objects asked once (named afresh on every call),
# enough lines that oha's picks seldom repeat a one-hit key.
mix_urls() {
  python3 - "$1" "$2" "$3" <<'PY'
import random, sys
base, path, lines = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random()
tag = rng.randrange(1 << 30)
with open(path, "w") as f:
    for i in range(lines):
        if rng.random() < 0.8:
            f.write(f"{base}/obj/hot-{rng.randrange(1, 2001)}?size=4096\n")
        else:
            f.write(f"{base}/obj/rate-once-{tag}-{i}?size=4096\n")
PY
}
