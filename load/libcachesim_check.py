#!/usr/bin/env python3
"""Checks bloomgate's reference policies against libCacheSim on the same traces.

For each trace and cache size (percent of the trace's footprint), runs libCacheSim's LRU, S3FIFO,
WTinyLFU and Sieve (the `libcachesim` package on PyPI) over the trace, and `bloomgate simulate
--policies lru,s3-fifo,w-tinylfu,sieve --json` over the same trace, and prints both object and byte
hit ratios with their difference in points. Exits non-zero when a difference exceeds --tolerance.

Sizes: a trace's size column where it has one; where it has none, bloomgate's synthesized size
(src/trace/size.rs: a log-normal from SipHash-1-3 of the key), computed here the same way, so that
both simulators see the same bytes.

    python3 -m venv /tmp/lcs && /tmp/lcs/bin/pip install libcachesim
    /tmp/lcs/bin/python load/libcachesim_check.py --bloomgate target/release/bloomgate \\
        load/traces/web07.csv.gz load/traces/web12.csv.gz ../shared/traces/adaptsize.csv.gz
"""

import argparse
import csv
import gzip
import io
import json
import math
import struct
import subprocess
import sys

import libcachesim as lcs

# bloomgate's report name -> libCacheSim's cache class.
POLICIES = {
    "admit-all": lcs.LRU,
    "s3-fifo": lcs.S3FIFO,
    "w-tinylfu": lcs.WTinyLFU,
    "sieve": lcs.Sieve,
}
MASK = (1 << 64) - 1


def rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & MASK


def siphash13(k0, k1, data):
    """SipHash-1-3 of bytes `data` under the key (k0, k1), as the siphasher crate computes it."""
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rnd(v0, v1, v2, v3):
        v0 = (v0 + v1) & MASK
        v1 = rotl(v1, 13) ^ v0
        v0 = rotl(v0, 32)
        v2 = (v2 + v3) & MASK
        v3 = rotl(v3, 16) ^ v2
        v0 = (v0 + v3) & MASK
        v3 = rotl(v3, 21) ^ v0
        v2 = (v2 + v1) & MASK
        v1 = rotl(v1, 17) ^ v2
        v2 = rotl(v2, 32)
        return v0, v1, v2, v3

    tail = len(data) % 8
    for i in range(0, len(data) - tail, 8):
        (m,) = struct.unpack_from("<Q", data, i)
        v3 ^= m
        v0, v1, v2, v3 = rnd(v0, v1, v2, v3)
        v0 ^= m
    b = (len(data) & 0xFF) << 56
    for i, byte in enumerate(data[len(data) - tail :]):
        b |= byte << (8 * i)
    v3 ^= b
    v0, v1, v2, v3 = rnd(v0, v1, v2, v3)
    v0 ^= b
    v2 ^= 0xFF
    for _ in range(3):
        v0, v1, v2, v3 = rnd(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def synthesized_size(key):
    """bloomgate's size for a key its trace gave none (src/trace/size.rs)."""
    bits = siphash13(0, 0, key.encode())
    u1 = ((bits >> 32) + 0.5) / float(1 << 32)
    u2 = (bits & 0xFFFFFFFF) / float(1 << 32)
    normal = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    size = 8192.0 * math.exp(1.0 * normal)
    # Rust's f64::round rounds half away from zero.
    return min(max(int(math.floor(size + 0.5)), 64), 4 << 20)


def read_trace(path):
    """The trace as (dense id, size) pairs, and its footprint (each object's first size)."""
    opener = gzip.open if path.endswith(".gz") else open
    ids, requests, footprint = {}, [], 0
    with opener(path, "rt", newline="") as text:
        for row in csv.DictReader(text):
            key = row["key"]
            size = int(row["size"]) if row.get("size") else synthesized_size(key)
            if key not in ids:
                ids[key] = len(ids)
                footprint += size
            requests.append((ids[key], size))
    return requests, footprint


def libcachesim_ratios(cls, cache_bytes, requests):
    cache = cls(cache_size=cache_bytes)
    request = lcs.Request()
    hits = hit_bytes = total_bytes = 0
    for obj_id, size in requests:
        request.obj_id = obj_id
        request.obj_size = size
        total_bytes += size
        if cache.get(request):
            hits += 1
            hit_bytes += size
    return hits / len(requests), hit_bytes / total_bytes


def bloomgate_ratios(binary, path, percents):
    out = subprocess.run(
        [
            binary,
            "simulate",
            "--trace",
            path,
            "--cache-percent",
            ",".join(str(p) for p in percents),
            "--policies",
            ",".join(POLICIES),
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    report = json.loads(out)
    return [
        (
            cache["cache_bytes"],
            {p["policy"]: (p["hit_ratio"], p["byte_hit_ratio"]) for p in cache["policies"]},
        )
        for cache in report["caches"]
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--bloomgate", default="target/release/bloomgate")
    parser.add_argument("--percent", default="1,5,10")
    parser.add_argument("--tolerance", type=float, default=0.5, help="points of hit ratio")
    args = parser.parse_args()
    percents = [float(p) for p in args.percent.split(",")]
    worst = 0.0
    print("| trace | cache | policy | libCacheSim hit% | bloomgate hit% | diff | libCacheSim byte% | bloomgate byte% | diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.traces:
        requests, footprint = read_trace(path)
        ours = bloomgate_ratios(args.bloomgate, path, percents)
        for percent, (cache_bytes, policies) in zip(percents, ours):
            expected = max(int(math.floor(footprint * percent / 100.0 + 0.5)), 1)
            if expected != cache_bytes:
                sys.exit(f"{path}: cache of {percent}% is {cache_bytes} B in bloomgate, {expected} B here: sizes differ")
            for name, cls in POLICIES.items():
                theirs = libcachesim_ratios(cls, cache_bytes, requests)
                mine = policies[name]
                diff = [100.0 * (m - t) for m, t in zip(mine, theirs)]
                worst = max(worst, abs(diff[0]))
                label = "lru" if name == "admit-all" else name
                print(
                    f"| {path.split('/')[-1]} | {percent:g}% | {label} | {100 * theirs[0]:.2f} | {100 * mine[0]:.2f} | {diff[0]:+.2f} "
                    f"| {100 * theirs[1]:.2f} | {100 * mine[1]:.2f} | {diff[1]:+.2f} |"
                )
                sys.stdout.flush()
    print(f"\nlargest object hit ratio difference: {worst:.2f} points (tolerance {args.tolerance})")
    if worst > args.tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main()
