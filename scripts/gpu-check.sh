#!/usr/bin/env bash
# What a user with an NVIDIA card runs: build, the GPU tests with REQUIRE_GPU=1 (CUDA against
# the CPU reference, model by model and op by op; preemption and merging on the GPU), `verify
# --ops` (the first node that differs from the CPU, if any), `cargo bench --bench cuda` (GEMM
# nodes against cuBLAS on the same shapes, scheduler share of node time), `profile --device cuda`
# for ResNet-50, GNMT and Transformer, and a GraphB-vs-LazyB `compare --device cuda` at a low and
# a high load. Writes everything to ${OUT:-out/gpu-check} and a summary to report.md there.
# Needs the NVIDIA driver; cuBLAS and NVRTC 13 from the CUDA toolkit or from pip
# (nvidia-cublas, nvidia-cuda-nvrtc) on LD_LIBRARY_PATH.
# SMOKE=1 checks the script itself (about 8 minutes on the software CUDA stand-in, 2 cores):
# reduced models, few requests, and no test run.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu-check}"
mkdir -p "$out"
bin=target/release/lazybatch
cargo build --release
if [ "${SMOKE:-0}" = 1 ]; then
  small=(--width 0.125 --res 0.25); vsmall=("${small[@]}"); mb=8; reqs=40; pols=serial,graph:5,lazy; bench=(-- --small)
else
  small=(); vsmall=(--width 0.25 --res 0.5); mb=64; reqs=500; pols=serial,graph:5,graph:25,graph:50,lazy,oracle; bench=()
fi
{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /' || true
  echo
  echo '## Tests (REQUIRE_GPU=1)'
  echo '```'
  if [ "${SMOKE:-0}" = 1 ]; then echo "(skipped: SMOKE=1)"; else
    REQUIRE_GPU=1 cargo test --release --test it cuda -- --nocapture 2>&1 | grep -E "^test |values, max|max relative|free device|test result|panicked|Verify" || true
  fi
  echo '```'
  echo
  echo '## Kernels'
  echo '```'
  "$bin" kernels
  echo '```'
  echo
  echo '## Verify on the GPU (alone vs forced preemptions/merges, and against the CPU)'
  echo '```'
  for m in resnet50 gnmt transformer; do "$bin" verify --device cuda --model "$m" "${vsmall[@]}" --ops || echo "VERIFY FAILED: $m"; done
  "$bin" verify --device cuda --precision f16 --model resnet50 "${vsmall[@]}" || true
  echo '```'
  echo
  echo '## GEMM nodes vs cuBLAS, scheduler share (cargo bench --bench cuda)'
  echo '```'
  cargo bench --bench cuda "${bench[@]}" 2>&1 | grep -v -E "^\s*(Compiling|Finished|Running)" || echo "BENCH FAILED"
  echo '```'
  for m in resnet50 gnmt transformer; do
    echo
    echo "## profile --device cuda --model $m"
    echo '```'
    "$bin" profile --device cuda --model "$m" "${small[@]}" --max-batch "$mb" --save "$out/$m.profile.json" | sed -n 1,14p
    echo '```'
    echo
    echo "## compare --device cuda --model $m --load 0.3,0.9"
    echo '```'
    "$bin" compare --device cuda --model "$m" "${small[@]}" --load 0.3,0.9 --requests "$reqs" --max-batch "$mb" \
      --profile "$out/$m.profile.json" --policies "$pols" --out "$out/$m"
    echo '```'
  done
} 2>&1 | tee "$out/report.md"
echo "wrote $out/report.md"
