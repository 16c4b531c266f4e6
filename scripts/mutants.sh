#!/usr/bin/env bash
# Mutation testing over the holding, flush, handshake and block-store modules
# (config: .cargo/mutants.toml). Too slow for CI: ~8 min to install cargo-mutants, then
# one build + test run per mutant.
#
#   scripts/mutants.sh                 # full run over the configured files
#   scripts/mutants.sh --list          # list the mutants only
#   MUTANTS_FILES="src/node/deferred.rs src/holding/mod.rs" scripts/mutants.sh   # a subset
#       (`-f` on the command line is added to the config's examine_globs, so a subset
#       needs --no-config; MUTANTS_FILES does that and repeats the config's timeouts and
#       its exclude_re list)
#   scripts/mutants.sh --shard 1/4     # extra args go to cargo mutants
#   MUTANTS_TESTS="db node" scripts/mutants.sh   # choose test targets
#   MUTANTS_JOBS=2 scripts/mutants.sh  # parallel build dirs (default 1; 2 CPUs here), and
#       as many rustc jobs in all (cargo-mutants' own jobserver; CARGO_BUILD_JOBS is ignored)
#   MUTANTS_FILES=... scripts/mutants.sh --timeout 120 --baseline skip   # a fixed timeout:
#       the subset's --timeout-multiplier is dropped when --timeout is given
#
# Results: mutants.out/{caught,missed,unviable,timeout}.txt and outcomes.json.
# Exit code 2 means some mutants were missed (cargo-mutants' convention).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "installing cargo-mutants (~8 minutes)..." >&2
    nice -n 19 cargo install cargo-mutants --locked
fi

# Test targets run per mutant: the library's unit tests plus the integration tests that
# exercise the examined modules. Default: every target of tests/ (a folder with a main.rs,
# or a file) except loom_* (compiled to nothing without --cfg loom); the tool's tests
# (cli/tests, the binary, slow) are another package's.
if [[ -n "${MUTANTS_TESTS:-}" ]]; then
    targets="$MUTANTS_TESTS"
else
    targets=$( { ls tests/*/main.rs; ls tests/*.rs; } | sed -e 's|^tests/||' -e 's|/main\.rs$||' \
        -e 's|\.rs$||' | grep -v -e '^loom_' | tr '\n' ' ')
fi
# The targets go to every cargo command (`--cargo-arg`), the build included: arguments
# after `--` reach only `cargo test`, and the build (`cargo test --no-run`) would then
# compile every test target of the package for each mutant. MUTANTS_NO_LIB=1 drops --lib.
test_args=()
[[ -n "${MUTANTS_NO_LIB:-}" ]] || test_args+=(--cargo-arg=--lib)
for t in $targets; do test_args+=("--cargo-arg=--test=$t"); done
echo "test targets: ${test_args[*]}" >&2

scope=()
if [[ -n "${MUTANTS_FILES:-}" ]]; then
    scope=(--no-config --minimum-test-timeout 60)
    # cargo-mutants refuses --timeout with --timeout-multiplier: keep the caller's.
    if [[ " $* " != *" --timeout "* && " $* " != *" --timeout="* ]]; then
        scope+=(--timeout-multiplier 3)
    fi
    for f in $MUTANTS_FILES; do scope+=(-f "$f"); done
    # --no-config drops the config's exclusions too: repeat them.
    while IFS= read -r re; do
        [[ -n "$re" ]] && scope+=(--exclude-re "$re")
    done < <(python3 -c 'import sys, tomllib
for r in tomllib.load(open(".cargo/mutants.toml", "rb")).get("exclude_re", []): print(r)')
fi

# cargo-mutants runs its own jobserver sized to the CPUs, which overrides CARGO_BUILD_JOBS:
# allow as many rustc jobs in all as build directories, so `--jobs 1` builds with one job
# on a shared 2-CPU machine.
jobs="${MUTANTS_JOBS:-1}"
# Below the machine's other work, but not at 19: `journal_merger_priority` checks that the
# journal's merger thread runs lower than the thread that opened the engine, which cannot
# be seen from nice 19 (it refuses to run there rather than pass unseen).
exec nice -n 18 cargo mutants --jobs "$jobs" --jobserver-tasks "$jobs" "${scope[@]}" \
    "${test_args[@]}" "$@"
