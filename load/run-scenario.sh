#!/usr/bin/env bash
# Replays one load scenario end to end on loopback: starts `bloomgate origin` and `bloomgate serve`
# (a config generated from the scenario) on free ports, replays the scenario's trace through the
# proxy, prints the replay report and the proxy's key metrics, and stops both.
#
# Usage: load/run-scenario.sh load/scenarios/web07.toml [more.toml ...]   (from anywhere)
# Environment:
#   BLOOMGATE=path/to/bloomgate   the binary (default: $CARGO_TARGET_DIR or target, release; built if missing)
#   BLOOMGATE_EXTRA_TRACES=dir    where to look for a trace file missing at its scenario path
#                                 (by its file name; default ../shared/traces; load/traces/README.md)
#   JSON=1                        print the replay report as JSON
#   KEEP=1                        keep the work directory (configs, logs)
set -euo pipefail

SCENARIOS=()
for arg in "$@"; do SCENARIOS+=("$(realpath "$arg")"); done
cd "$(dirname "$0")/.."
((${#SCENARIOS[@]})) || {
  echo "usage: load/run-scenario.sh SCENARIO.toml [...]   (scenarios in load/scenarios/)" >&2
  exit 2
}
# shellcheck source=load/lib.sh
source load/lib.sh
find_bloomgate

# key_metrics FILE: the proxy's counters that say what admission did.
key_metrics() {
  local m=$1
  local requests hits writes
  requests=$(metric "$m" bloomgate_requests_total)
  hits=$(metric "$m" bloomgate_requests_total 'cache_status="hit"')
  writes=$(metric "$m" bloomgate_cache_writes_total)
  printf '  %-38s %s\n' \
    "requests (proxy)" "$requests" \
    "hits (proxy)" "$hits" \
    "cache writes" "$writes" \
    "  into main / probation" "$(metric "$m" bloomgate_cache_writes_total 'segment="main"') / $(metric "$m" bloomgate_cache_writes_total 'segment="probation"')" \
    "cache written bytes" "$(metric "$m" bloomgate_cache_written_bytes_total)" \
    "  into main / probation" "$(metric "$m" bloomgate_cache_written_bytes_total 'segment="main"') / $(metric "$m" bloomgate_cache_written_bytes_total 'segment="probation"')" \
    "cache evictions" "$(metric "$m" bloomgate_cache_evictions_total)" \
    "cache entries / bytes" "$(metric "$m" bloomgate_cache_entries) / $(metric "$m" bloomgate_cache_bytes)" \
    "  in main / probation" "$(metric "$m" bloomgate_cache_entries 'segment="main"') / $(metric "$m" bloomgate_cache_entries 'segment="probation"') entries" \
    "admission admitted (into main)" "$(metric "$m" bloomgate_admission_total 'decision="admitted"')" \
    "admission probation / promoted" "$(metric "$m" bloomgate_admission_total 'decision="probation"') / $(metric "$m" bloomgate_admission_total 'decision="promoted"')" \
    "admission first_hit (not stored)" "$(metric "$m" bloomgate_admission_total 'decision="first_hit"')" \
    "admission not_storable / too_large" "$(metric "$m" bloomgate_admission_total 'decision="not_storable"') / $(metric "$m" bloomgate_admission_total 'decision="too_large"')" \
    "filter fill current / previous" "$(metric "$m" bloomgate_filter_fill_ratio 'generation="current"') / $(metric "$m" bloomgate_filter_fill_ratio 'generation="previous"')" \
    "filter estimated items cur / prev" "$(metric "$m" bloomgate_filter_estimated_items 'generation="current"') / $(metric "$m" bloomgate_filter_estimated_items 'generation="previous"')" \
    "filter estimated fpr" "$(metric "$m" bloomgate_filter_estimated_fpr)" \
    "filter bytes" "$(metric "$m" bloomgate_filter_bytes)" \
    "filter rotations fpr / capacity / age" "$(metric "$m" bloomgate_filter_rotations_total 'reason="fpr_threshold"') / $(metric "$m" bloomgate_filter_rotations_total 'reason="capacity"') / $(metric "$m" bloomgate_filter_rotations_total 'reason="max_age"')" \
    "origin requests / body bytes" "$(metric "$m" bloomgate_origin_requests_total) / $(metric "$m" bloomgate_origin_bytes_total)"
}

run_scenario() {
  local scenario=$1 name settings
  name=$(basename "$scenario" .toml)
  settings=$(python3 load/scenario.py "$scenario") || exit 1
  local DESCRIPTION ORIGIN_MAX_AGE ORIGIN_EXTRA PROXY_TABLES TRACE_ARGS REPLAY_ARGS
  eval "$settings"
  if [[ "${TRACE_ARGS[0]:-}" == --trace && ! -e "${TRACE_ARGS[1]}" ]]; then
    local found="${BLOOMGATE_EXTRA_TRACES:-../shared/traces}/$(basename "${TRACE_ARGS[1]}")"
    [[ -e "$found" ]] || die "$name: trace ${TRACE_ARGS[1]} not found, nor $found (set BLOOMGATE_EXTRA_TRACES=dir?)"
    TRACE_ARGS[1]=$found
  fi

  start_origin "$name-origin" "$ORIGIN_MAX_AGE"
  local origin_pid=$ORIGIN_PID
  write_config "$WORK/$name.toml" "$ORIGIN_URL" "$PROXY_TABLES" "$ORIGIN_EXTRA"
  start_proxy "$name-proxy" "$WORK/$name.toml"
  local proxy_pid=$PROXY_PID

  echo "== scenario $name: $DESCRIPTION"
  echo "   bloomgate replay ${TRACE_ARGS[*]} ${REPLAY_ARGS[*]} --target $PROXY_URL"
  echo "   proxy config (beyond ports, origin and log level):"
  sed 's/^/     /' <<<"$PROXY_TABLES"
  local json=()
  [[ "${JSON:-0}" == 1 ]] && json=(--json)
  "$BLOOMGATE" replay "${TRACE_ARGS[@]}" "${REPLAY_ARGS[@]}" --target "$PROXY_URL" "${json[@]}"
  scrape "$ADMIN_URL" "$WORK/$name.metrics" || die "$name: no metrics from $ADMIN_URL"
  echo "-- proxy metrics after the replay ($ADMIN_URL/metrics)"
  key_metrics "$WORK/$name.metrics"
  echo "   peak RSS of the proxy: $(($(vm_kib "$proxy_pid" VmHWM) / 1024)) MiB"
  echo
  stop_pid "$proxy_pid"
  stop_pid "$origin_pid"
}

for scenario in "${SCENARIOS[@]}"; do
  run_scenario "$scenario"
done
