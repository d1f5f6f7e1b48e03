#!/usr/bin/env bash
# Three bloomgate nodes behind HAProxy (config/cluster/haproxy.cfg: `balance uri`, `hash-type
# consistent`) on loopback, one synthetic origin, a real trace replayed through it. Shows:
#
#   1. the fleet's hit ratio against one node with three times the cache (and three times the
#      doorkeeper capacity), both cold, the same trace: within a point;
#   2. each object is stored on exactly one node: for a sample of keys every node is asked directly
#      (HEAD with Cache-Control: no-store, which neither stores nor shows the key to the doorkeeper),
#      and the fleet's cache writes are compared with the single node's;
#   3. stopping one node moves only about a third of the keys (the keys' nodes, read from HAProxy's
#      X-Served-By, before and after), none from the surviving nodes, and the survivors keep their
#      hit ratio (their own keys replayed before and after the loss).
#
# Usage: load/cluster.sh            (from anywhere; installs Debian's haproxy if it is missing)
# Environment:
#   TRACE=load/traces/web07.csv.gz        a time,key,size CSV (plain or gzip), relative to the repo
#   BLOOMGATE_EXTRA_TRACES=dir            where to look for TRACE's file name if TRACE is missing
#                                         (default ../shared/traces; see load/traces/README.md)
#   NODE_CACHE=8MiB NODE_CAPACITY=600     each node's cache.max_bytes and admission.capacity; the
#   SINGLE_CACHE=24MiB SINGLE_CAPACITY=1800   single node gets three times both
#   CONCURRENCY=16  SAMPLE=2000           replay concurrency; keys sampled for the stored-where check
#   SURVIVOR_CONCURRENCY=1                concurrency of the survivors' passes: in trace order, so the
#                                         two passes differ only by the lost node
#   BLOOMGATE=path/to/bloomgate           the binary (default: release build, built if missing)
#   KEEP=1                                keep the work directory (configs, logs, JSON)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=load/lib.sh
source load/lib.sh

TRACE=${TRACE:-load/traces/web07.csv.gz}
if [[ ! -e "$TRACE" ]]; then TRACE="${BLOOMGATE_EXTRA_TRACES:-../shared/traces}/$(basename "$TRACE")"; fi
[[ -e "$TRACE" ]] || die "trace $TRACE not found (set TRACE=file or BLOOMGATE_EXTRA_TRACES=dir; load/traces/README.md)"
NODE_CACHE=${NODE_CACHE:-8MiB}
NODE_CAPACITY=${NODE_CAPACITY:-600}
SINGLE_CACHE=${SINGLE_CACHE:-24MiB}
SINGLE_CAPACITY=${SINGLE_CAPACITY:-1800}
CONCURRENCY=${CONCURRENCY:-16}
SAMPLE=${SAMPLE:-2000}
SURVIVOR_CONCURRENCY=${SURVIVOR_CONCURRENCY:-1}

if ! command -v haproxy >/dev/null; then
  log "installing haproxy"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null
fi
find_bloomgate

# Nodes key on host and path: HAProxy's `balance uri` hashes the path only, and with the query out of
# the key a probe can ask for an object without knowing its size.
node_tables() {
  cat <<EOF
[cache]
max_bytes = "$1"
[cache.key]
include_query = false
[admission]
mode = "probation"
capacity = $2
EOF
}

# replay_json NAME URL TRACE [CONCURRENCY]: replays TRACE against URL; saves the JSON report as
# $WORK/NAME.json.
replay_json() {
  "$BLOOMGATE" replay --trace "$3" --target "$2" --concurrency "${4:-$CONCURRENCY}" --json >"$WORK/$1.json" 2>"$WORK/$1.err" ||
    die "replay $1 failed: $(tail -n 5 "$WORK/$1.err")"
  local errors
  errors=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["errors"]["total"])' "$WORK/$1.json")
  ((errors == 0)) || log "warning: replay $1 had $errors failed requests (see $WORK/$1.json)"
  ((errors < 100)) || die "replay $1: too many failed requests to go on"
}

# field FILE KEY: a top-level number from a JSON file.
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
pct() { python3 -c 'import sys; print(f"{100 * float(sys.argv[1]):.2f}")' "$1"; }

# node_hits SNAPSHOT_BEFORE SNAPSHOT_AFTER: "requests hits hit%" between two scrapes of one node.
node_hits() {
  local r0 r1 h0 h1
  r0=$(metric "$1" bloomgate_requests_total)
  r1=$(metric "$2" bloomgate_requests_total)
  h0=$(metric "$1" bloomgate_requests_total 'cache_status="hit"')
  h1=$(metric "$2" bloomgate_requests_total 'cache_status="hit"')
  awk -v r=$((r1 - r0)) -v h=$((h1 - h0)) 'BEGIN { printf "%d %d %.2f\n", r, h, r ? 100 * h / r : 0 }'
}

start_origin origin
log "origin $ORIGIN_URL; trace $TRACE"

# 1a. One node with three times the cache.
node_tables "$SINGLE_CACHE" "$SINGLE_CAPACITY" >"$WORK/single.tables"
write_config "$WORK/single.toml" "$ORIGIN_URL" "$(cat "$WORK/single.tables")"
start_proxy single "$WORK/single.toml"
SINGLE_PID=$PROXY_PID
log "single node ($SINGLE_CACHE, capacity $SINGLE_CAPACITY): replaying"
replay_json single "$PROXY_URL" "$TRACE"
scrape "$ADMIN_URL" "$WORK/single.metrics"
stop_pid "$SINGLE_PID"

# 1b. Three nodes behind HAProxy.
declare -A NODE_URL NODE_ADMIN NODE_PID
export BLOOMGATE_LISTEN
BLOOMGATE_LISTEN=127.0.0.1:$(free_port)
for i in 1 2 3; do
  node_tables "$NODE_CACHE" "$NODE_CAPACITY" >"$WORK/node$i.tables"
  write_config "$WORK/node$i.toml" "$ORIGIN_URL" "$(cat "$WORK/node$i.tables")"
  start_proxy "node$i" "$WORK/node$i.toml"
  NODE_URL[node$i]=$PROXY_URL
  NODE_ADMIN[node$i]=$ADMIN_URL
  NODE_PID[node$i]=$PROXY_PID
  admin=${ADMIN_URL#http://}
  export "BLOOMGATE_NODE$i=${PROXY_URL#http://}" "BLOOMGATE_ADMIN${i}_HOST=${admin%:*}" "BLOOMGATE_ADMIN${i}_PORT=${admin##*:}"
done
haproxy -db -f config/cluster/haproxy.cfg >"$WORK/haproxy.log" 2>&1 &
HAPROXY_PID=$!
PIDS+=("$HAPROXY_PID")
LB="http://$BLOOMGATE_LISTEN"
for _ in $(seq 100); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$LB/obj/readiness-probe?size=1") == 200 ]] && break
  kill -0 "$HAPROXY_PID" 2>/dev/null || die "haproxy exited: $(tail -n 5 "$WORK/haproxy.log")"
  sleep 0.1
done
# Until each node has passed its health checks (rise 2 x inter 500ms), HAProxy may route around it.
sleep 1.5

log "cluster (3 x $NODE_CACHE, capacity $NODE_CAPACITY each) behind HAProxy $LB: replaying"
replay_json cluster "$LB" "$TRACE"
for node in node1 node2 node3; do scrape "${NODE_ADMIN[$node]}" "$WORK/$node.after-replay"; done

# 2. Where each key is stored.
log "mapping every key to its node through HAProxy"
python3 load/cluster_probe.py route "$LB" "$TRACE" "$WORK/routes-before.json" >"$WORK/routes-before.out"
log "asking each node directly for $SAMPLE sampled keys"
python3 load/cluster_probe.py stored "$TRACE" "$WORK/routes-before.json" "$BLOOMGATE_LISTEN" "$SAMPLE" \
  "node1=${NODE_URL[node1]}" "node2=${NODE_URL[node2]}" "node3=${NODE_URL[node3]}" >"$WORK/stored.out"

# 3. Stopping node3: the survivors' own keys, replayed before and after. A probe that finds a key
# stored refreshes its place in the LRU; so that both passes start from the same order, each follows a
# full mapping (this one also shows the mapping is stable).
python3 load/cluster_probe.py route "$LB" "$TRACE" "$WORK/routes-again.json" >/dev/null
cmp -s <(python3 -c 'import json, sys; print(sorted(json.load(open(sys.argv[1])).items()))' "$WORK/routes-before.json") \
  <(python3 -c 'import json, sys; print(sorted(json.load(open(sys.argv[1])).items()))' "$WORK/routes-again.json") ||
  die "HAProxy mapped some keys to another node the second time, with every node up"
python3 load/cluster_probe.py subset "$TRACE" "$WORK/routes-before.json" "$WORK/survivors.csv" node1 node2 >"$WORK/subset.out"
for node in node1 node2; do scrape "${NODE_ADMIN[$node]}" "$WORK/$node.s0"; done
log "replaying the keys of node1 and node2 ($(field "$WORK/subset.out" requests 2>/dev/null || cat "$WORK/subset.out") requests), all nodes up"
replay_json survivors-before "$LB" "$WORK/survivors.csv" "$SURVIVOR_CONCURRENCY"
for node in node1 node2; do scrape "${NODE_ADMIN[$node]}" "$WORK/$node.s1"; done

log "stopping node3"
stop_pid "${NODE_PID[node3]}"
# node3's /readyz fails from the first moment of its shutdown; wait until HAProxy has marked it down.
node3_key=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(next(k for k, v in r.items() if v == "node3"))' "$WORK/routes-before.json")
for _ in $(seq 100); do
  served_by=$(curl -s -o /dev/null -D - -H 'Cache-Control: no-store' -I "$LB/obj/$node3_key?size=1" | tr -d '\r' | awk -F': ' 'tolower($1) == "x-served-by" {print $2}')
  [[ -n "$served_by" && "$served_by" != node3 ]] && break
  sleep 0.1
done
log "mapping every key again"
python3 load/cluster_probe.py route "$LB" "$TRACE" "$WORK/routes-after.json" >"$WORK/routes-after.out"
python3 load/cluster_probe.py moved "$WORK/routes-before.json" "$WORK/routes-after.json" >"$WORK/moved.out"
for node in node1 node2; do scrape "${NODE_ADMIN[$node]}" "$WORK/$node.s2"; done
log "replaying the keys of node1 and node2 again, node3 down"
replay_json survivors-after "$LB" "$WORK/survivors.csv" "$SURVIVOR_CONCURRENCY"
for node in node1 node2; do scrape "${NODE_ADMIN[$node]}" "$WORK/$node.s3"; done

# The report.
single_hit=$(pct "$(field "$WORK/single.json" hit_ratio)")
cluster_hit=$(pct "$(field "$WORK/cluster.json" hit_ratio)")
single_bytes=$(pct "$(field "$WORK/single.json" byte_hit_ratio)")
cluster_bytes=$(pct "$(field "$WORK/cluster.json" byte_hit_ratio)")
single_writes=$(metric "$WORK/single.metrics" bloomgate_cache_writes_total)
cluster_writes=0
echo "== HAProxy (balance uri, hash-type consistent) in front of 3 bloomgate nodes; trace $(basename "$TRACE"), $(field "$WORK/cluster.json" requests) requests"
echo
echo "1. Hit ratio: the fleet against one node with three times the cache (both cold, one pass)"
printf '   %-44s %8s %10s %8s %9s\n' "" "hit %" "byte hit %" "writes" "admitted"
printf '   %-44s %8s %10s %8s %9s\n' "one node, $SINGLE_CACHE, capacity $SINGLE_CAPACITY" "$single_hit" "$single_bytes" "$single_writes" \
  "$(metric "$WORK/single.metrics" bloomgate_admission_total 'decision="admitted"')"
for node in node1 node2 node3; do
  m="$WORK/$node.after-replay"
  w=$(metric "$m" bloomgate_cache_writes_total)
  cluster_writes=$((cluster_writes + w))
  read -r requests hits ratio < <(node_hits /dev/null "$m")
  printf '   %-44s %8s %10s %8s %9s\n' "  $node, $NODE_CACHE, capacity $NODE_CAPACITY ($requests requests)" "$ratio" "" "$w" \
    "$(metric "$m" bloomgate_admission_total 'decision="admitted"')"
done
printf '   %-44s %8s %10s %8s\n' "fleet of 3 (replay report)" "$cluster_hit" "$cluster_bytes" "$cluster_writes"
FAILED=0
awk -v a="$cluster_hit" -v b="$single_hit" 'BEGIN {
  d = a - b; ok = d <= 1 && d >= -1
  printf "   difference: %+.2f points (target: within 1): %s\n", d, ok ? "ok" : "NOT MET"; exit !ok }' || FAILED=1
echo
echo "2. Each object stored on one node"
echo "   fleet cache writes $cluster_writes against $single_writes on the single node"
python3 - "$WORK/stored.out" "$WORK/routes-before.out" <<'EOF' || FAILED=1
import json, sys
s = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
print(f"   keys per node (HAProxy's choice): {r['keys_per_node']} of {r['keys']} distinct keys")
print(f"   of {s['sampled_keys']} keys (the most requested half, and random others), asked on every node directly: held by one node {s['held_by_one_node']},"
      f" by none (never admitted, or evicted) {s['held_by_no_node']}, by several {s['held_by_several_nodes']},"
      f" by a node HAProxy does not send it to {s['held_by_a_node_haproxy_does_not_route_to']}")
ok = s["held_by_several_nodes"] == 0 and s["held_by_a_node_haproxy_does_not_route_to"] == 0
print(f"   {'ok' if ok else 'NOT MET'}: no key is stored on more than one node, nor off its node")
sys.exit(0 if ok else 1)
EOF
echo
echo "3. Stopping node3"
python3 - "$WORK/moved.out" <<'EOF' || FAILED=1
import json, sys
m = json.load(open(sys.argv[1]))
print(f"   keys whose node changed: {m['moved']} of {m['keys']} ({100 * m['moved_share']:.1f}%, all of node3's),"
      f" {m['moved_from_surviving_nodes']} of them from node1 or node2; node3's keys went to {m['lost_nodes_keys_now_on']}")
ok = m["moved_from_surviving_nodes"] == 0 and 0.2 <= m["moved_share"] <= 0.45
print(f"   {'ok' if ok else 'NOT MET'}: only node3's keys moved, about a third of all (0.20 to 0.45)")
sys.exit(0 if ok else 1)
EOF
echo "   hit ratio of node1 and node2 on their own keys (a warm pass each), before and after node3 stopped:"
for node in node1 node2; do
  read -r r_before _ before < <(node_hits "$WORK/$node.s0" "$WORK/$node.s1")
  read -r r_after _ after < <(node_hits "$WORK/$node.s2" "$WORK/$node.s3")
  awk -v n="$node" -v b="$before" -v rb="$r_before" -v a="$after" -v ra="$r_after" 'BEGIN {
    ok = a - b <= 1 && b - a <= 1
    printf "   %s: %.2f%% of %d requests -> %.2f%% of %d requests: %s\n", n, b, rb, a, ra, ok ? "ok (within 1 point)" : "NOT MET"
    exit !ok }' || FAILED=1
done
echo "   survivors' replay: hit ratio $(pct "$(field "$WORK/survivors-before.json" hit_ratio)")% before, $(pct "$(field "$WORK/survivors-after.json" hit_ratio)")% after"
exit "$FAILED"
