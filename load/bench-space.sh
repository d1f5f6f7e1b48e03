#!/usr/bin/env bash
# What the disk tier costs in disk space and device writes for small objects, per size.
#
# For each SIZE, a bloomgate with 1 MiB of RAM over a disk tier on DISK_DIR (the machine's disk
# unless given: a tmpfs write never reaches the storage layer) is asked for OBJECTS objects of
# that body size three times each (probation admits each on its second request; the small RAM
# then evicts it to disk). Reports, once the writer is idle:
#   records MiB   what the tier handed to the engine to store: each record (response head and
#                 body) with its key, bloomgate_disk_written_bytes_total
#   engine MiB    bytes the engine wrote into its segment files (record headers, keys, padding,
#                 seal summaries), bloomgate_disk_engine_written_bytes_total
#   device MiB    the process's /proc/PID/io write_bytes over the run: what reached the block layer
#   body MiB      the objects' bodies alone
# and the ratios engine/records (disk bytes per stored byte) and device/records (bytes written to
# the device per byte admitted).
#
# Usage: load/bench-space.sh               (from anywhere; builds the release binary if missing)
# Environment: SIZES="300 1024 4096" OBJECTS=20000 DISK_DIR=/var/tmp BLOOMGATE=path KEEP=1
set -euo pipefail

cd "$(dirname "$0")/.."
source load/lib.sh
SIZES=${SIZES:-"300 1024 4096"}
OBJECTS=${OBJECTS:-20000}
DISK_DIR=${DISK_DIR:-/var/tmp}
find_bloomgate
start_origin origin 3600

mib() { python3 -c "print(f'{$1 / 1048576:.2f}')"; }
ratio() { python3 -c "print(f'{$1 / max(1, $2):.3f}')"; }

printf '%-8s %8s %12s %12s %12s %10s %15s %15s\n' size objects "body MiB" "records MiB" \
  "engine MiB" "device MiB" "engine/records" "device/records"
for size in $SIZES; do
  dir=$(mktemp -d "$DISK_DIR/bloomgate-space.XXXXXX")
  write_config "$WORK/space-$size.toml" "$ORIGIN_URL" "[cache]
max_bytes = \"1MiB\"
max_object_bytes = \"256KiB\"
[admission]
mode = \"probation\"
[disk]
path = \"$dir\"
max_bytes = \"1GiB\"
block_bytes = \"16MiB\""
  start_proxy "space-$size" "$WORK/space-$size.toml"
  before=$(io_written "$PROXY_PID")
  warm_objects "$PROXY_URL" "$OBJECTS" "space-$size-" "$size"
  # The writer thread lands what is queued; then nothing more is written.
  sleep 3
  after=$(io_written "$PROXY_PID")
  scrape "$ADMIN_URL" "$WORK/space-$size.prom"
  records=$(metric "$WORK/space-$size.prom" bloomgate_disk_written_bytes_total)
  engine=$(metric "$WORK/space-$size.prom" bloomgate_disk_engine_written_bytes_total)
  device=$((after - before))
  stop_pid "$PROXY_PID"
  rm -rf "$dir"
  printf '%-8s %8d %12s %12s %12s %10s %15s %15s\n' "$size" "$OBJECTS" \
    "$(mib $((OBJECTS * size)))" "$(mib "$records")" "$(mib "$engine")" "$(mib "$device")" \
    "$(ratio "$engine" "$records")" "$(ratio "$device" "$records")"
done
