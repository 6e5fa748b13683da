#!/usr/bin/env bash
# The long fuzzing campaign: the model-file loader, the NPU configuration and the trace parser,
# CASES mutated inputs each (default 200000; CI runs 48). A failure prints the minimal input;
# fix it and add it to the regression tests at the end of tests/it/fuzz.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_CASES="${CASES:-200000}"
time cargo test --release --test it fuzz_ -- --test-threads=3
