#!/usr/bin/env bash
# Runs every fuzz target for a bounded time: `fuzz/run.sh [SECONDS]` (default 60 per target);
# FUZZ_TARGETS="h1_differential" runs only those named.
#
# Not run in CI. Needs a C++ compiler (libFuzzer is built from source) and installs cargo-fuzz if it
# is absent. cargo-fuzz passes nightly-only flags to rustc; RUSTC_BOOTSTRAP=1 lets stable accept them.
# Each target starts from the committed seeds in fuzz/seeds/TARGET and grows its working corpus in
# fuzz/corpus/TARGET; a crash is written to fuzz/artifacts/TARGET and stops that target's run.
# bloomgate has no `unsafe` code, so the targets run without AddressSanitizer (which roughly halves
# the executions per second); set FUZZ_SANITIZER=address to turn it on. Overflow checks and debug assertions are always on.
set -euo pipefail

seconds="${1:-60}"
sanitizer="${FUZZ_SANITIZER:-none}"
cd "$(dirname "$0")"

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

targets=(${FUZZ_TARGETS:-trace_reader bloom_snapshot config request_to_origin h1_differential})
status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "== $target: ${seconds}s"
    # -rss_limit_mb: a decoder that allocates what a header claims fails here, not in swap.
    # h1_differential compares inputs of at most 8 KiB (tests/h1/differential.rs, MAX_INPUT).
    max_len=()
    [[ $target == h1_differential ]] && max_len=(-max_len=8192)
    if ! cargo fuzz run --debug-assertions --sanitizer "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=10 "${max_len[@]}" \
        -print_final_stats=1; then
        echo "== $target: FAILED (see fuzz/artifacts/$target)"
        status=1
    fi
done
exit "$status"
