#!/usr/bin/env bash
# Checks that a crate depending on a package compiles none of the tool's dependencies.
#
#   scripts/check-lib-deps.sh [PACKAGE]   (default: flushpoint, the library)
#
# `cargo tree -e normal,build -p PACKAGE` is exactly what a dependent crate compiles for it
# (default features; dev-dependencies are never compiled for dependents). Exit 0 when none of
# the tool-only crates appear, 1 (and the offending paths) otherwise. CI runs it on the
# library (must pass) and on `flushpoint-cli` (must fail: the check can fail).
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=${1:-flushpoint}
# The tool's own dependencies: argument parsing, progress bars, JSON output.
tool_only='^(clap|clap_builder|clap_derive|indicatif|console|serde_json|anstream)$'
tree=$(cargo tree -e normal,build -p "$pkg" --prefix none)
crates=$(sed 's/ (.*//; s/ v[0-9].*//' <<<"$tree" | sort -u)
count=$(wc -l <<<"$crates")
bad=$(grep -E "$tool_only" <<<"$crates" || true)
if [ -n "$bad" ]; then
  echo "check-lib-deps: $pkg compiles tool-only crates ($count crates in all):" $bad
  exit 1
fi
echo "check-lib-deps: $pkg compiles $count crates, none of the tool's (clap, indicatif, serde_json, ...)"
