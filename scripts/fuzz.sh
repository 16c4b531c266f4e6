#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (stable toolchain, no sanitizer).
#
#   scripts/fuzz.sh                     # every target, FUZZ_SECONDS each (default 60)
#   scripts/fuzz.sh holding_ops         # named targets only
#   FUZZ_SECONDS=600 scripts/fuzz.sh    # the issue's 10-minute-per-target run
#   FUZZ_SECONDS=20 scripts/fuzz.sh     # CI smoke
#   FUZZ_SANITIZER=address FUZZ_TOOLCHAIN=nightly scripts/fuzz.sh   # with ASan
#   FUZZ_STORE=1 scripts/fuzz.sh        # then merge the new inputs into the stored corpus
#   FUZZ_TARGET_DIR=/tmp/t scripts/fuzz.sh   # build somewhere else than fuzz/target
#
# Installs cargo-fuzz if absent (~3 minutes). Each run starts from the stored corpus
# tests/fuzz_corpus/<target>/ (read only) and grows the working corpus fuzz/corpus/<target>/
# (git-ignored); crashers land in fuzz/artifacts/<target>/. With FUZZ_STORE=1, libFuzzer's
# -merge=1 rewrites tests/fuzz_corpus/<target>/ as a small set of inputs covering every
# edge the stored and the working corpus cover (hit counts and comparison features ignored,
# so a decoder keeps a few dozen inputs); a crasher is added there by hand. CI replays
# tests/fuzz_corpus/ through the same checks in tests/regressions/fuzz_corpus.rs (`cargo test`).
# Prints one summary line per target: executions, exec/s, and whether it crashed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz (~3 minutes)..." >&2
    nice -n 19 cargo install cargo-fuzz --locked
fi

secs="${FUZZ_SECONDS:-60}"
sanitizer="${FUZZ_SANITIZER:-none}"
toolchain="${FUZZ_TOOLCHAIN:-stable}"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cd fuzz && cargo +"$toolchain" fuzz list)
fi
target_dir=("--target-dir" "${FUZZ_TARGET_DIR:-fuzz/target}")
logs="${FUZZ_TARGET_DIR:-fuzz/target}/logs"
mkdir -p "$logs"
nice -n 19 cargo +"$toolchain" fuzz build --sanitizer "$sanitizer" "${target_dir[@]}"

status=0
for t in "${targets[@]}"; do
    log="$logs/$t.log"
    mkdir -p "fuzz/corpus/$t" "tests/fuzz_corpus/$t"
    if nice -n 19 cargo +"$toolchain" fuzz run --sanitizer "$sanitizer" "${target_dir[@]}" "$t" \
        "fuzz/corpus/$t" "tests/fuzz_corpus/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 -max_len=4096 >"$log" 2>&1; then
        result=ok
    else
        result=CRASH
        status=1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "$t: ${secs}s, $execs executions, $rate exec/s, $cov, $result (log: $log)"
    if [[ "${FUZZ_STORE:-0}" == 1 && $result == ok ]]; then
        merged=$(mktemp -d)
        nice -n 19 cargo +"$toolchain" fuzz run --sanitizer "$sanitizer" "${target_dir[@]}" "$t" \
            "$merged" "tests/fuzz_corpus/$t" "fuzz/corpus/$t" -- -merge=1 -max_len=4096 \
            -use_counters=0 -use_cmp=0 -use_value_profile=0 \
            >"$log.merge" 2>&1
        rm -rf "tests/fuzz_corpus/$t"
        mv "$merged" "tests/fuzz_corpus/$t"
        echo "$t: stored corpus now $(ls "tests/fuzz_corpus/$t" | wc -l) inputs"
    fi
done
exit $status
