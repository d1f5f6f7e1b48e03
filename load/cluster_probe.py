"""Probes a bloomgate fleet behind HAProxy for load/cluster.sh, without changing what it stores.

Every probe is a HEAD with `Cache-Control: no-store`: a node that holds the object answers it as a
hit; a node that does not fetches it from the origin without storing it and without showing the
key to its doorkeeper (a no-store request is not storable, and admission is consulted only for
storable responses). The nodes key on host and path only (load/cluster.sh sets
cache.key.include_query = false, as HAProxy's `balance uri` hashes the path only), so a probe
needs no object size.

Commands:
  route LB_URL TRACE OUT.json             which node serves each distinct key of TRACE (X-Served-By)
  stored TRACE ROUTES.json HOST SAMPLE NAME=URL...
                                          for SAMPLE keys (half the most requested ones, half drawn
                                          at random from the rest), HEAD each node directly
                                          (Host: HOST) and count the nodes that hold the key
  moved BEFORE.json AFTER.json            share of keys whose node changed; prints JSON
  subset TRACE ROUTES.json OUT.csv NAME...
                                          TRACE's requests whose key routes to one of NAMEs
"""

import concurrent.futures
import csv
import gzip
import http.client
import json
import random
import sys
import threading
import urllib.parse
from collections import Counter

WORKERS = 8


def trace_rows(path):
    """Yields (time, key, size) from a `time,key,size` CSV (plain or gzip)."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rt", newline="") as f:
        reader = csv.reader(f)
        header = [h.strip().lstrip("#").strip() for h in next(reader)]
        if header[:3] != ["time", "key", "size"]:
            sys.exit(f"cluster_probe: {path}: expected a time,key,size header, got {header}")
        for row in reader:
            if len(row) >= 3:
                yield row[0], row[1], row[2]


def object_path(key):
    # As the replay client's PathMode::Obj: every byte outside RFC 3986's unreserved set escaped.
    return "/obj/" + urllib.parse.quote(key, safe="") + "?size=1"


class Prober:
    """One keep-alive connection per thread to one host:port."""

    def __init__(self, url, host_header=None):
        parsed = urllib.parse.urlsplit(url)
        self.netloc = parsed.netloc
        self.host_header = host_header
        self.local = threading.local()

    def head(self, key):
        for attempt in range(3):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.netloc, timeout=10)
            headers = {"Cache-Control": "no-store"}
            if self.host_header:
                headers["Host"] = self.host_header
            try:
                conn.request("HEAD", object_path(key), headers=headers)
                response = conn.getresponse()
                response.read()
                return response.status, response.getheader("X-Served-By"), response.getheader("Cache-Status", "")
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise


def is_hit(cache_status):
    return "hit" in (part.strip() for part in cache_status.split(";"))


def route(lb_url, trace, out):
    keys = list(dict.fromkeys(key for _, key, _ in trace_rows(trace)))
    prober = Prober(lb_url)
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(prober.head, keys))
    routes = {}
    for key, (status, node, _) in zip(keys, answers):
        if status != 200 or not node:
            sys.exit(f"cluster_probe: {key}: status {status}, X-Served-By {node!r}")
        routes[key] = node
    with open(out, "w") as f:
        json.dump(routes, f)
    shares = Counter(routes.values())
    print(json.dumps({"keys": len(routes), "keys_per_node": dict(sorted(shares.items()))}))


def stored(trace, routes_file, host, sample, nodes):
    with open(routes_file) as f:
        routes = json.load(f)
    counts = Counter(key for _, key, _ in trace_rows(trace))
    popular = [key for key, _ in counts.most_common(sample // 2)]
    rest = sorted(set(routes) - set(popular))
    keys = popular + random.Random(1).sample(rest, min(sample - len(popular), len(rest)))
    probers = {}
    for spec in nodes:
        name, url = spec.split("=", 1)
        probers[name] = Prober(url, host)

    def holders(key):
        return [name for name, p in probers.items() if is_hit(p.head(key)[2])]

    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        found = list(pool.map(holders, keys))
    by_count = Counter(len(h) for h in found)
    wrong = sum(1 for key, h in zip(keys, found) if len(h) == 1 and h[0] != routes[key])
    print(json.dumps({
        "sampled_keys": len(keys),
        "held_by_no_node": by_count[0],
        "held_by_one_node": by_count[1],
        "held_by_several_nodes": sum(n for count, n in by_count.items() if count > 1),
        "held_by_a_node_haproxy_does_not_route_to": wrong,
    }))


def moved(before_file, after_file):
    with open(before_file) as f:
        before = json.load(f)
    with open(after_file) as f:
        after = json.load(f)
    keys = [k for k in before if k in after]
    lost = {before[k] for k in keys} - {after[k] for k in keys}
    moved_keys = [k for k in keys if before[k] != after[k]]
    from_survivors = [k for k in moved_keys if before[k] not in lost]
    print(json.dumps({
        "keys": len(keys),
        "moved": len(moved_keys),
        "moved_share": round(len(moved_keys) / len(keys), 4) if keys else 0,
        "moved_from_surviving_nodes": len(from_survivors),
        "lost_nodes_keys_now_on": dict(sorted(Counter(after[k] for k in moved_keys).items())),
    }))


def subset(trace, routes_file, out, names):
    with open(routes_file) as f:
        routes = json.load(f)
    wanted = set(names)
    kept = 0
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time", "key", "size"])
        for row in trace_rows(trace):
            if routes.get(row[1]) in wanted:
                writer.writerow(row)
                kept += 1
    print(json.dumps({"requests": kept}))


def main():
    args = sys.argv[1:]
    commands = {
        "route": (3, lambda a: route(*a)),
        "stored": (5, lambda a: stored(a[0], a[1], a[2], int(a[3]), a[4:])),
        "moved": (2, lambda a: moved(*a)),
        "subset": (4, lambda a: subset(a[0], a[1], a[2], a[3:])),
    }
    if not args or args[0] not in commands or len(args) - 1 < commands[args[0]][0]:
        sys.exit(__doc__)
    commands[args[0]][1](args[1:])


main()
