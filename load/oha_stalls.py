"""The load generator's own stalls in an oha run recorded with --db-url.

oha keeps every result in one vector; when it doubles (at 2^k requests) the copy holds up the
sender, and with --latency-correction each request it then sends late counts that wait. Those
moments, and the first 50 ms (connections being opened), are oha's, not the proxy's: requests
sent in them are the ones `without_own_stalls` leaves out. See load/tail-study.sh and
docs/benchmarks.md ("Where the light-load tail comes from").
"""

import sqlite3

# Around each doubling: from just before the 2^k-th request was sent to this long after it.
BEFORE, AFTER = 0.005, 0.06
START = 0.05


def requests(db):
    """(sent, corrected latency) of each successful request, in seconds, oldest first."""
    return sqlite3.connect(db).execute(
        "select start_latency_correction, duration from oha where status between 200 and 399 "
        "order by 1").fetchall()


def doublings(rows):
    """When the 2^k-th request (k >= 12) was sent."""
    return [rows[(1 << k) - 1][0] for k in range(12, 40) if (1 << k) <= len(rows)]


def own(sent, marks):
    """Whether a request sent at `sent` falls in one of oha's own stalls."""
    return sent < START or any(m - BEFORE <= sent <= m + AFTER for m in marks)


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def without_own_stalls(rows):
    """The latencies of the requests not sent in oha's own stalls, sorted."""
    marks = doublings(rows)
    return sorted(d for s, d in rows if not own(s, marks))
