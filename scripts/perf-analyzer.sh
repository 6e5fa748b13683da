#!/usr/bin/env bash
# Triton's Performance Analyzer against `lazybatch serve`, unmodified, on loopback: sync and
# async, over HTTP and gRPC (with a request parameter, sla_ms, over gRPC), against the NPU
# model's server (ResNet-50) and the CPU device's (ResNet-50 at a quarter width and half
# resolution); prints perf_analyzer's throughput and latencies and the server's own count.
#
# perf_analyzer comes from PyPI: the current wheels need glibc 2.38, so the binary is taken from
# tritonclient 2.41.0's wheel (its `data/bin/perf_analyzer`; Triton 23.12, built on Ubuntu
# 22.04), with the CUDA runtime it links (nvidia-cuda-runtime-cu12, PyPI; used for CUDA shared
# memory only) and libb64 (Debian: `apt-get install libb64-0d`). Cached in target/perf-analyzer.
#
# Usage: scripts/perf-analyzer.sh [--concurrency N] [--interval-ms MS]   (defaults 8, 3000)
set -euo pipefail
cd "$(dirname "$0")/.."
CONC=8 INTERVAL=3000
while [ $# -gt 0 ]; do
  case "$1" in
    --concurrency) CONC=$2; shift 2 ;;
    --interval-ms) INTERVAL=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cache=target/perf-analyzer
fetch() { # wheel spec, directory
  if [ ! -d "$cache/$2" ]; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cache/$2.tmp" "$1" >&2
    (cd "$cache/$2.tmp" && unzip -q -o ./*.whl) && mv "$cache/$2.tmp" "$cache/$2"
  fi
}
fetch "tritonclient==2.41.0" tritonclient
fetch "nvidia-cuda-runtime-cu12==12.4.127" cudart
PA=$(find "$cache/tritonclient" -path '*/bin/perf_analyzer' -type f | head -1)
chmod +x "$PA"
export LD_LIBRARY_PATH="$PWD/$cache/cudart/nvidia/cuda_runtime/lib:${LD_LIBRARY_PATH:-}"
if ! "$PA" --version >/dev/null 2>&1; then
  echo "perf_analyzer does not start here: $("$PA" --version 2>&1 | head -1) (libb64: apt-get install libb64-0d)" >&2
  exit 3
fi
cargo build --release --quiet
B=target/release/lazybatch
TMP=$(mktemp -d)
trap 'kill ${SPID:-0} 2>/dev/null || true; rm -rf "$TMP"' EXIT
echo "perf_analyzer $("$PA" --version 2>&1 | awk '{print $4}') against lazybatch serve, concurrency $CONC, ${INTERVAL}-ms windows ($(date -u +%FT%TZ), $(nproc) cores)"
printf '%-26s %-40s %10s %10s %10s %9s\n' server mode infer/s avg_ms p99_ms counted
serve_and_measure() { # label, perf_analyzer's --input-data, serve args...
  local label=$1 data=$2; shift 2
  $B serve "$@" --policy lazy --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 2>"$TMP/serve.err" >"$TMP/serve.out" &
  SPID=$!
  for _ in $(seq 600); do grep -q "serving" "$TMP/serve.err" 2>/dev/null && break; sleep 0.1; done
  local http grpc model
  http=$(grep -o 'http://[0-9.:]*' "$TMP/serve.err" | head -1 | sed 's|http://||')
  grpc=$(grep -o 'gRPC at [0-9.:]*' "$TMP/serve.err" | awk '{print $3}')
  model=$(grep -o 'serving [^ ]*' "$TMP/serve.err" | awk '{print $2}')
  for mode in "grpc sync" "grpc async" "http sync" "http async"; do
    set -- $mode
    local args=(-m "$model" -i "$1" --concurrency-range "$CONC" --measurement-interval "$INTERVAL" --input-data "$data")
    [ "$1" = grpc ] && args+=(-u "$grpc" --request-parameter sla_ms:100:double) || args+=(-u "$http")
    [ "$2" = async ] && args+=(--async)
    "$PA" "${args[@]}" >"$TMP/pa.txt" 2>&1 || { echo "FAILED: perf_analyzer ${args[*]}" >&2; cat "$TMP/pa.txt" >&2; exit 1; }
    local tput avg p99 count
    tput=$(awk '/Throughput:/ {print $2; exit}' "$TMP/pa.txt")
    avg=$(awk '/Avg latency:/ {printf "%.2f", $3 / 1000; exit}' "$TMP/pa.txt")
    p99=$(awk '/p99 latency:/ {printf "%.2f", $3 / 1000; exit}' "$TMP/pa.txt")
    count=$(awk '/Inference count:/ {print $3; exit}' "$TMP/pa.txt")
    printf '%-26s %-40s %10s %10s %10s %9s\n' "$label" "$mode$([ "$1" = grpc ] && echo ', sla_ms 100')" "$tput" "$avg" "$p99" "$count"
  done
  kill -TERM $SPID; wait $SPID || true; SPID=
  echo "  server: $(head -c 300 "$TMP/serve.out")"
}
# the NPU model computes nothing and takes any bits, perf_analyzer's default random bytes (NaN
# among them) too; the CPU device computes on its input and refuses non-finite values: zeros
serve_and_measure "resnet50, npu model" random --model resnet50 --device npu
serve_and_measure "resnet50 w0.25 r0.5, cpu" zero --model resnet50 --width 0.25 --res 0.5 --device cpu --profile-variation off --reps 1
