#!/usr/bin/env bash
# Builds, on a machine with the Rust toolchain, what scripts/gpu-check.sh runs on a GPU machine
# that has none: the release binary, the integration-test binary and the CUDA benchmark,
# stripped, into DIR (default .gpu), with the checkout's path that the test binary was compiled
# with (it finds its fixtures and the binary through it). Then, on the GPU machine, from a copy
# of this checkout holding DIR: `scripts/gpu-prebuilt.sh` (same DIR).
# Both machines must be x86-64 Linux with a glibc at least as new as this one's.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.gpu}"
mkdir -p "$dir"
# the executable of one cargo target, from cargo's JSON messages
exe_of() {
  python3 -c '
import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1" | tail -1
}
it=$(cargo test --release --features check --test it --no-run --message-format=json | exe_of it)
bench=$(cargo bench --bench cuda --no-run --message-format=json | exe_of cuda)
# last, so that target/release/lazybatch is the build without the invariant checks
cargo build --release
for f in "$it:it" "$bench:cuda-bench" "target/release/lazybatch:lazybatch"; do
  cp "${f%%:*}" "$dir/${f##*:}"
  strip "$dir/${f##*:}"
done
pwd > "$dir/manifest-dir"
du -sh "$dir"/*
