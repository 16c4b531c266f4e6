#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (stable toolchain, no sanitizer).
#
#   scripts/fuzz.sh                     # every target, FUZZ_SECONDS each (default 60)
#   scripts/fuzz.sh holding_ops         # named targets only
#   FUZZ_SECONDS=600 scripts/fuzz.sh    # the issue's 10-minute-per-target run
#   FUZZ_SECONDS=20 scripts/fuzz.sh     # CI smoke
#   FUZZ_SANITIZER=address FUZZ_TOOLCHAIN=nightly scripts/fuzz.sh   # with ASan
#
# Installs cargo-fuzz if absent (~3 minutes). Corpora grow in fuzz/corpus/<target>/,
# crashers land in fuzz/artifacts/<target>/ — copy each into tests/fuzz_regressions.rs.
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
mkdir -p fuzz/target/logs
nice -n 19 cargo +"$toolchain" fuzz build --sanitizer "$sanitizer"

status=0
for t in "${targets[@]}"; do
    log="fuzz/target/logs/$t.log"
    mkdir -p "fuzz/corpus/$t"
    if nice -n 19 cargo +"$toolchain" fuzz run --sanitizer "$sanitizer" "$t" -- \
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
done
exit $status
