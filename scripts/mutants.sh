#!/usr/bin/env bash
# Mutation testing: every mutant cargo-mutants makes in a module with a decision or a number in
# it (a comparison flipped or moved across its boundary, `>` to `>=`, an operator swapped, a
# function's body replaced by a constant) must fail the tests that cover that module. One
# AREA at a time, each with the tests that cover it, so that a mutant's run takes seconds, not
# the whole suite's minutes. Survivors are listed in mutants.out/AREA/missed.txt; explain each
# in docs/mutants.md or kill it with a test. Needs `cargo install cargo-mutants` (27.x).
#
# Usage: scripts/mutants.sh [--lib-first] AREA [AREA ...] [-- CARGO-MUTANTS ARGS]   e.g. `--shard 0/4`
#   --lib-first  run every mutant against the area's unit tests alone (one binary to build,
#                about 23 s a mutant instead of 25-60), then only the survivors against all of
#                the area's tests (`--iterate`): the same verdicts, in about half the time when
#                the unit tests catch most mutants
#   scheduling  src/policy, src/runtime, src/engine (loop, source)   the whole suite
#   replicas    src/engine/{replicas,router}.rs, src/run/replicas_needed.rs
#   lengths     src/traffic (arrival processes, lengths, classes, traces)
#   npu         src/device/npu (the cycle-level NPU model)
#   metrics     src/metrics (tallies, percentiles, .hgrm)
#   capacity    src/run/capacity/ (the search, its bounds and its figure)
#   http        src/http (the v2 protocol, gRPC, metrics, load)
#   onnx        src/graph/onnx and its decoder/ (translation, folding, patterns, GPT-2 exports)
#   all         every area above
# About 3–7 minutes for cargo-mutants' first build of an area, then 15–60 s a mutant on 2 cores
# (the `mutants` profile: incremental, opt-level 1). A mutant that makes the tests hang counts
# as caught once it outlasts 5× the area's baseline test time (at least 20 s); the scheduling
# area, which runs the whole suite, gives each mutant 120 s (but 5× the unit tests' time in
# `--lib-first`'s first pass).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || { echo "cargo-mutants missing: cargo install cargo-mutants" >&2; exit 2; }
lib_first=0
[ "${1:-}" = --lib-first ] && { lib_first=1; shift; }
areas=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do areas+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#areas[@]} -gt 0 ] || { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ "${areas[0]}" = all ] && areas=(scheduling replicas lengths npu metrics capacity http onnx)

# files and the tests that cover them (cargo test arguments, then test-name filters)
area() {
  case "$1" in
    scheduling) files=('src/policy/*.rs' 'src/policy/**/*.rs' 'src/runtime/*.rs' 'src/engine/mod.rs' 'src/engine/source.rs')
                timeout=(--timeout 120)
                # the wall-clock CPU comparison is skipped: its latencies depend on the load
                tests=(-- --skip cpu_compare_runs_for_real) ;;
    replicas)   files=('src/engine/replicas.rs' 'src/engine/router.rs' 'src/run/replicas_needed.rs')
                tests=(--lib --test it -- replicas router) ;;
    lengths)    files=('src/traffic/*.rs')
                tests=(--lib --test it -- traffic:: runtime:: fuzz:: table:: hostile:: llm::gpt2 llm::a_gpt2_trace) ;;
    npu)        files=('src/device/npu/*.rs')
                tests=(--lib --test it -- npu table:: reproduce::quick_figures_are_pinned) ;;
    metrics)    files=('src/metrics/*.rs')
                tests=(--lib --test it -- metrics:: runtime:: statistics:: replicas tokens:: reproduce::) ;;
    capacity)   files=('src/run/capacity/mod.rs' 'src/run/capacity/figure.rs')
                tests=(--lib --test it -- capacity) ;;
    http)       files=('src/http/*.rs')
                tests=(--lib --test it -- http grpc statistics hostile cli::serve cli::load) ;;
    onnx)       files=('src/graph/onnx/*.rs' 'src/graph/onnx/decoder/*.rs')
                tests=(--lib --test it -- onnx) ;;
    *) echo "unknown area '$1' (scheduling, replicas, lengths, npu, metrics, capacity, http, onnx, all)" >&2; exit 2 ;;
  esac
}

for a in "${areas[@]}"; do
  timeout=()
  area "$a"
  args=()
  for f in "${files[@]}"; do args+=(-f "$f"); done
  echo "== $a: ${files[*]}" >&2
  mkdir -p "mutants.out/$a"
  if [ "$lib_first" = 1 ]; then
    # the same test-name filters, unit tests only: `--lib --test it -- F...` → `-- F...`
    # under `--cargo-arg=--lib`, which (unlike the arguments after `--`, given to the test run
    # only) also keeps each mutant's build to the library's test binary: without it every
    # build compiles tests/it too, about twice as long
    unit=(--)
    seen=0
    for t in "${tests[@]}"; do
      [ "$seen" = 1 ] && unit+=("$t")
      [ "$t" = -- ] && seen=1
    done
    echo "== $a: unit tests first: --lib ${unit[*]}" >&2
    # the area's own timeout is for its whole tests: the unit tests take seconds, so a hang
    # is called by cargo-mutants' default (5× their baseline, at least 20 s)
    cargo mutants --profile mutants --build-timeout 900 --features check \
      --cargo-arg=--lib -o "mutants.out/$a" "${args[@]}" "$@" -- "${unit[@]}" || true
    echo "== $a: the survivors against every test of the area" >&2
    rest=()
    for x in "$@"; do [ "$x" = --iterate ] || rest+=("$x"); done
    cargo mutants --profile mutants "${timeout[@]}" --build-timeout 900 --features check \
      -o "mutants.out/$a" "${args[@]}" --iterate ${rest[@]+"${rest[@]}"} -- "${tests[@]}" || true
  else
    cargo mutants --profile mutants "${timeout[@]}" --build-timeout 900 --features check \
      -o "mutants.out/$a" "${args[@]}" "$@" -- "${tests[@]}" || true
  fi
  for k in caught missed timeout unviable; do
    printf '%s %s: %s\n' "$a" "$k" "$(cat "mutants.out/$a/mutants.out/$k.txt" 2>/dev/null | wc -l)"
  done
done
