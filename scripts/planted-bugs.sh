#!/usr/bin/env bash
# Planted bugs: each `tests/planted/loom_bug_<name>.patch` writes one concurrency bug into the
# library, and the loom model that must catch it says so with
# `#[cfg_attr(loom_bug_<name>, should_panic(expected = "..."))]` (docs/TESTING.md, "loom").
#
#   scripts/planted-bugs.sh --check      every patch applies to the working tree, names its loom
#                                        target (`Caught-by:`), and some test there expects it;
#                                        the patches, the tests' `loom_bug_*` cfgs and
#                                        Cargo.toml's check-cfg list name the same bugs; src/
#                                        holds none. Fast (no build): CI runs it.
#   scripts/planted-bugs.sh NAME...      for each bug (`loom_bug_<name>` or `<name>`): a copy of
#   scripts/planted-bugs.sh --all        the working tree with the patch applied, its loom target
#                                        built with `--cfg loom_bug_<name>` and each test that
#                                        expects the bug run in a process of its own; prints
#                                        `caught` or `NOT caught` per bug, exits 1 if any is not.
#   scripts/planted-bugs.sh --control    the negative control: a patch that adds one comment line
#                                        run as if it planted `CONTROL_BUG` below; exits 0 only
#                                        when it applied, built, ran and was reported NOT caught
#                                        (the run can fail). Its output: target/planted/control.log.
#
# A bug counts as caught when every test expecting it passes, that is, panics with its expected
# message (an abort or any other failure of such a test is NOT caught). The target's other tests
# are not run: they make no claim about the bug.
#
# Build: `--cfg loom` in RUSTFLAGS (every crate: loom's locks), `--cfg loom_bug_<name>` passed by
# `cargo rustc` to the test crate only (the library needs no cfg: the patch is the bug), so the
# dependencies build once in PLANTED_TARGET_DIR (default target/loom-bug) and each bug rebuilds
# only flushpoint and its test. The copy is target/planted/tree (remade for each bug) and each
# bug's build and test output is in target/planted/<bug>.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
planted=tests/planted
work=$root/target/planted
target_dir=${PLANTED_TARGET_DIR:-$root/target/loom-bug}
# The bug whose tests the negative control runs: its target, loom_prefetch, is the quickest to
# build and run.
CONTROL_BUG=loom_bug_bump_before_apply

die() { echo "planted-bugs: $*" >&2; exit 2; }

# The loom target a patch names in its header (the lines before its first `diff --git`).
caught_by() {
  sed -n '/^diff --git /q; s/^Caught-by: *\(loom_[a-z0-9_]*\) *$/\1/p' "$1"
}

# The tests of tests/<target>.rs that expect bug $2: a test whose attributes (the lines since
# the previous item's closing `}`, comments left out) hold `should_panic` and the bug's cfg.
expecting_tests() {
  awk -v bug="$2" '
    /^}/ { attrs = ""; next }
    /^[[:space:]]*\/\// { next }
    /^[[:space:]]*(pub )?fn [a-z0-9_]+/ {
      if (attrs ~ /should_panic/ && attrs ~ ("(^|[^a-z0-9_])" bug "([^a-z0-9_]|$)")) {
        sub(/^[[:space:]]*(pub )?fn /, ""); sub(/[^a-z0-9_].*/, ""); print
      }
      attrs = ""; next
    }
    { attrs = attrs "\n" $0 }
  ' "tests/$1.rs"
}

check() {
  local fails=0 n=0 p bug target
  local -A patched=()
  for p in "$planted"/*.patch; do
    [ -e "$p" ] || die "no patch in $planted/"
    bug=$(basename "$p" .patch)
    n=$((n + 1))
    patched[$bug]=1
    target=$(caught_by "$p")
    if [[ $bug != loom_bug_* ]]; then
      echo "$p: the name is not loom_bug_<name>"; fails=$((fails + 1))
    fi
    if [ -z "$target" ] || [ ! -f "tests/$target.rs" ]; then
      echo "$p: no 'Caught-by: <loom target>' line naming a tests/loom_*.rs"; fails=$((fails + 1))
    elif [ -z "$(expecting_tests "$target" "$bug")" ]; then
      echo "$p: no test in tests/$target.rs expects it (cfg_attr($bug, should_panic(...)))"
      fails=$((fails + 1))
    fi
    if ! git apply --check "$p" 2>/dev/null; then
      echo "$p: does not apply to the working tree:"; git apply --check "$p" 2>&1 | sed 's/^/  /' || true
      fails=$((fails + 1))
    fi
    if ! grep -q "'cfg($bug)'" Cargo.toml; then
      echo "$p: 'cfg($bug)' missing from Cargo.toml's check-cfg list"; fails=$((fails + 1))
    fi
  done
  # Every bug the tests or Cargo.toml name has its patch.
  for bug in $( { grep -rhoE 'loom_bug_[a-z0-9_]+' tests --include='*.rs';
                  grep -oE 'loom_bug_[a-z0-9_]+' Cargo.toml; } | sort -u); do
    if [ -z "${patched[$bug]:-}" ]; then
      echo "$bug: named in tests/ or Cargo.toml, no $planted/$bug.patch"; fails=$((fails + 1))
    fi
  done
  if grep -rn 'loom_bug_' src; then
    echo "src/: the library holds a loom_bug_ cfg (a planted bug is a patch)"; fails=$((fails + 1))
  fi
  if [ "$fails" -gt 0 ]; then
    echo "planted-bugs --check: $fails problem(s)"; exit 1
  fi
  echo "planted-bugs --check: $n patches apply; the tests, the patches and Cargo.toml name the same $n bugs"
}

# Runs bug $1 planted by patch file $2, logging to $3; prints one line. Returns 0 when the bug
# is caught, 1 when a test expecting it does not catch it, 2 when it could not be run (no
# expecting test, the patch does not apply, the build failed).
run_one() {
  local bug=$1 patch=$2 log=$3 target tree bin t rc started tests=() caught=() missed=()
  target=$(caught_by "$patch")
  [ -n "$target" ] || { echo "NOT caught  $bug: no Caught-by line in $patch"; return 2; }
  mapfile -t tests < <(expecting_tests "$target" "$bug")
  [ "${#tests[@]}" -gt 0 ] || { echo "NOT caught  $bug: no test in tests/$target.rs expects it"; return 2; }
  tree=$work/tree
  started=$(date +%s)
  rm -rf "$tree"
  mkdir -p "$tree"
  # The working tree as it is (tracked and untracked files, not the ignored ones).
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -cf - -T - 2>/dev/null | tar -xf - -C "$tree"
  # Outside any repository (the copy sits under this one's target/): paths are the copy's.
  if ! (cd "$tree" && GIT_CEILING_DIRECTORIES=$work git apply "$patch") >"$log" 2>&1; then
    echo "NOT caught  $bug: the patch does not apply (see $log)"; return 2
  fi
  echo "building tests/$target.rs with $bug planted (log: $log)"
  if ! bin=$(cd "$tree" && env -u CARGO_ENCODED_RUSTFLAGS RUSTFLAGS="--cfg loom" \
      CARGO_TARGET_DIR="$target_dir" cargo rustc --release -p flushpoint --test "$target" \
      --message-format=json-render-diagnostics -- --cfg "$bug" 2>>"$log" \
      | grep '"reason":"compiler-artifact"' | grep "\"name\":\"$target\"" \
      | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1) || [ -z "$bin" ]; then
    echo "NOT caught  $bug: the build failed (see $log)"; return 2
  fi
  for t in "${tests[@]}"; do
    rc=0
    (cd "$tree" && "$bin" --exact "$t" --test-threads 1 --nocapture) >"$work/test.out" 2>&1 || rc=$?
    { echo "--- $t: exit $rc"; cat "$work/test.out"; } >>"$log"
    if [ "$rc" -eq 0 ]; then
      caught+=("$t")
    elif [ "$rc" -gt 128 ]; then
      missed+=("$t (aborted by signal $((rc - 128)))")
    elif grep -q "did not panic as expected" "$work/test.out"; then
      missed+=("$t (did not panic)")
    else
      missed+=("$t (failed, exit $rc)")
    fi
  done
  local secs=$(($(date +%s) - started))
  if [ "${#missed[@]}" -eq 0 ]; then
    echo "caught      $bug by $target: ${caught[*]} (${secs} s)"
  else
    echo "NOT caught  $bug by $target: ${missed[*]}${caught:+; caught by ${caught[*]}} (${secs} s, see $log)"
    return 1
  fi
}

control() {
  local patch=$work/control.patch rc=0
  mkdir -p "$work"
  {
    echo "Caught-by: $(caught_by "$planted/$CONTROL_BUG.patch")"
    echo "Bug: none (the negative control: one comment line added to src/lib.rs)."
    echo
    echo "diff --git a/src/lib.rs b/src/lib.rs"
    echo "--- a/src/lib.rs"
    echo "+++ b/src/lib.rs"
    echo "@@ -1,2 +1,3 @@"
    sed -n '1p' src/lib.rs | sed 's/^/ /'
    echo "+// The planted-bugs negative control: no bug."
    sed -n '2p' src/lib.rs | sed 's/^/ /'
  } >"$patch"
  run_one "$CONTROL_BUG" "$patch" "$work/control.log" || rc=$?
  case $rc in
    0) echo "planted-bugs --control: a harmless patch was reported caught: the run cannot fail"
       exit 1 ;;
    1) echo "planted-bugs --control: a harmless patch is reported NOT caught, as it must be" ;;
    *) echo "planted-bugs --control: the control did not run (see $work/control.log)"; exit 1 ;;
  esac
}

[ $# -gt 0 ] || die "usage: $0 --check | --control | --all | NAME..."
case $1 in
  --check) check; exit ;;
  --control) control; exit ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit ;;
  --all) set -- "$planted"/*.patch ;;
esac
mkdir -p "$work"
bugs=()
for a in "$@"; do
  a=$(basename "$a" .patch)
  [[ $a == loom_bug_* ]] || a=loom_bug_$a
  [ -f "$planted/$a.patch" ] || die "no $planted/$a.patch"
  bugs+=("$a")
done
failed=0
for bug in "${bugs[@]}"; do
  run_one "$bug" "$root/$planted/$bug.patch" "$work/$bug.log" || failed=$((failed + 1))
done
echo "planted-bugs: $((${#bugs[@]} - failed)) of ${#bugs[@]} caught"
[ "$failed" -eq 0 ]
