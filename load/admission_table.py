#!/usr/bin/env python3
"""Prints, as a Markdown table, probation beside S3-FIFO, W-TinyLFU, SIEVE and LRU (admit-all) for
each trace at 1, 5 and 10% of its footprint: object and byte hit ratio, and bytes written into main
(MiB, and over admit-all's written bytes) and in all (over admit-all's). Every figure is from one run per trace of

    bloomgate simulate --trace T --cache-percent 1,5,10 --policies lru,probation,s3-fifo,w-tinylfu,sieve --json

    python3 load/admission_table.py load/traces/web07.csv.gz load/traces/web12.csv.gz ...
"""
import json
import os
import subprocess
import sys

BLOOMGATE = os.environ.get("BLOOMGATE", "target/release/bloomgate")
ORDER = ["probation", "s3-fifo", "w-tinylfu", "sieve", "admit-all"]


def main():
    print("| trace | cache | policy | hit % | byte hit % | main written MiB | main written / admit-all | all written / admit-all |")
    print("|---|---|---|---|---|---|---|---|")
    for trace in sys.argv[1:]:
        command = [BLOOMGATE, "simulate", "--trace", trace, "--cache-percent", "1,5,10",
                   "--policies", "lru,probation,s3-fifo,w-tinylfu,sieve", "--json"]
        report = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        name = trace.split("/")[-1].replace(".csv.gz", "")
        for cache in report["caches"]:
            policies = {p["policy"]: p for p in cache["policies"]}
            written = policies["admit-all"]["written_bytes"]
            best = max(policies["s3-fifo"]["hit_ratio"], policies["w-tinylfu"]["hit_ratio"])
            for kind in ORDER:
                p = policies[kind]
                label = "lru (admit-all)" if kind == "admit-all" else kind
                if kind == "probation":
                    label += " (%+.2f vs best of s3-fifo, w-tinylfu)" % (100 * (p["hit_ratio"] - best))
                print("| %s | %g%% | %s | %.2f | %.2f | %.1f | %.2fx | %.2fx |" % (
                    name, round(cache["cache_percent_of_footprint"], 2), label, 100 * p["hit_ratio"],
                    100 * p["byte_hit_ratio"], p["main_written_bytes"] / 2**20,
                    p["main_written_bytes"] / written, p["written_bytes"] / written))


if __name__ == "__main__":
    main()
