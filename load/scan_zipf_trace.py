#!/usr/bin/env python3
"""Writes a scan-plus-Zipf trace (CSV, gzip) to show scan resistance: a loop over more keys than a
cache of 10% of the footprint holds, interleaved with a Zipf 0.9 workload.

    python3 load/scan_zipf_trace.py /tmp/scan-zipf.csv.gz
    bloomgate simulate --trace /tmp/scan-zipf.csv.gz --cache-percent 1,5,10

Every second request (on average) is the scan's next key; the others draw from 10,000 objects with
Zipf 0.9 popularity. The size column is left empty, so bloomgate synthesises sizes (and says so).
"""

import argparse
import bisect
import gzip
import random


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--requests", type=int, default=400_000)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--scan-keys", type=int, default=30_000)
    parser.add_argument("--scan-share", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cumulative, total = [], 0.0
    for rank in range(1, args.objects + 1):
        total += rank ** -args.alpha
        cumulative.append(total)
    scan = 0
    with gzip.open(args.path, "wt") as out:
        out.write("time,key,size\n")
        for time in range(args.requests):
            if rng.random() < args.scan_share:
                key = f"scan-{scan % args.scan_keys}"
                scan += 1
            else:
                rank = bisect.bisect_left(cumulative, rng.random() * total)
                key = f"zipf-{rank}"
            out.write(f"{time},{key},\n")


if __name__ == "__main__":
    main()
