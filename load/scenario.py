"""Reads a load/scenarios/*.toml file and prints shell assignments for load/run-scenario.sh.

A scenario has these tables (every key optional except a trace source):

    description = "one line shown in the output"
    [trace]      file = "load/traces/web07.csv.gz" (relative to the repository root), or the
                 synthetic parameters requests, objects, alpha, one_hit_share, seed
    [cache]      copied into the proxy's [cache] table (max_bytes, max_object_bytes, ...)
    [admission]  copied into the proxy's [admission] table (enabled, capacity, target_fpr, ...)
    [origin]     max_age: the synthetic origin's Cache-Control max-age in seconds (default 3600);
                 any other key is copied into the proxy's [origin] table
    [replay]     concurrency (default 16), rate (requests/s, 0 = unbounded), limit (0 = whole trace),
                 path_mode ("obj" or "key"), timeout (seconds)

Unknown tables and keys are errors, so a typo does not silently run the defaults.
Usage: python3 load/scenario.py SCENARIO.toml
"""

import json
import shlex
import sys
import tomllib

SYNTHETIC = {"requests", "objects", "alpha", "one_hit_share", "seed"}
REPLAY = {"concurrency", "rate", "limit", "path_mode", "timeout"}
TABLES = {"trace", "cache", "admission", "origin", "replay"}


def fail(message):
    sys.exit(f"scenario: {message}")


def toml_value(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    fail(f"{key} = {value!r}: only strings, numbers, booleans and lists of strings are copied")


def toml_table(name, table):
    lines = [f"[{name}]"]
    for key, value in table.items():
        if isinstance(value, dict):
            fail(f"[{name}.{key}]: nested tables are not copied; set them in the proxy config")
        lines.append(f"{key} = {toml_value(f'{name}.{key}', value)}")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 2:
        fail("usage: scenario.py SCENARIO.toml")
    path = sys.argv[1]
    try:
        with open(path, "rb") as f:
            scenario = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as error:
        fail(f"{path}: {error}")

    for key, value in scenario.items():
        if key == "description":
            continue
        if key not in TABLES or not isinstance(value, dict):
            fail(f"{path}: unknown key or table '{key}' (expected description, [{'], ['.join(sorted(TABLES))}])")

    trace = scenario.get("trace", {})
    trace_args = []
    if "file" in trace:
        extra = set(trace) - {"file"}
        if extra:
            fail(f"{path}: [trace] has a file, so {sorted(extra)} would be ignored")
        trace_args = ["--trace", trace["file"]]
    else:
        unknown = set(trace) - SYNTHETIC
        if unknown:
            fail(f"{path}: unknown [trace] keys {sorted(unknown)} (file, or {sorted(SYNTHETIC)})")
        for key in sorted(trace):
            trace_args += ["--" + key.replace("_", "-"), str(trace[key])]

    replay = scenario.get("replay", {})
    unknown = set(replay) - REPLAY
    if unknown:
        fail(f"{path}: unknown [replay] keys {sorted(unknown)} (expected {sorted(REPLAY)})")
    replay_args = ["--concurrency", str(replay.get("concurrency", 16))]
    if replay.get("rate", 0):
        replay_args += ["--rate", str(replay["rate"])]
    if replay.get("limit", 0):
        replay_args += ["--limit", str(replay["limit"])]
    for key in ("path_mode", "timeout"):
        if key in replay:
            replay_args += ["--" + key.replace("_", "-"), str(replay[key])]

    origin = dict(scenario.get("origin", {}))
    max_age = origin.pop("max_age", 3600)
    tables = [toml_table(name, scenario[name]) for name in ("cache", "admission") if name in scenario]
    if origin:
        # The script writes [origin] url itself; these keys go into the same table.
        tables.append("\n".join(f"{k} = {toml_value('origin.' + k, v)}" for k, v in origin.items()))

    out = {
        "DESCRIPTION": scenario.get("description", ""),
        "ORIGIN_MAX_AGE": str(max_age),
    }
    for name, value in out.items():
        print(f"{name}={shlex.quote(value)}")
    print(f"ORIGIN_EXTRA={shlex.quote(tables.pop() if origin else '')}")
    print(f"PROXY_TABLES={shlex.quote(chr(10).join(tables))}")
    print("TRACE_ARGS=(" + " ".join(shlex.quote(a) for a in trace_args) + ")")
    print("REPLAY_ARGS=(" + " ".join(shlex.quote(a) for a in replay_args) + ")")


main()
