#!/usr/bin/env bash
# Mutation testing of the scheduling code: every mutant cargo-mutants makes in the policies, the
# runtime (BatchTable, predictor, ledger, queue) and the engine must fail the test suite.
# Survivors are listed in mutants.out/missed.txt. Needs `cargo install cargo-mutants`.
# Usage: scripts/mutants.sh [FILE ...]   (default: src/policy, src/runtime, src/engine)
# About 20 s a mutant on 2 cores with the `mutants` profile (quick incremental builds).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || { echo "cargo-mutants missing: cargo install cargo-mutants" >&2; exit 2; }
files=("$@")
[ ${#files[@]} -gt 0 ] || files=('src/policy/*.rs' 'src/runtime/*.rs' 'src/engine/*.rs')
args=()
for f in "${files[@]}"; do args+=(-f "$f"); done
# the wall-clock CPU comparison is skipped: its latencies depend on the machine's load
exec cargo mutants --profile mutants --timeout 90 --build-timeout 600 --features check "${args[@]}" -- -- --skip cpu_compare_runs_for_real
