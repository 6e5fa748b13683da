#!/usr/bin/env bash
# What a user with an NVIDIA card runs: build, the GPU tests with REQUIRE_GPU=1 (CUDA against
# the CPU reference, model by model and op by op, on both convolution paths; preemption and
# merging on the GPU), `verify --ops` (the first node that differs from the CPU, if any; cuDNN
# convolutions, and im2col and TF32 for the models with convolutions), the speed of ResNet-50,
# VGG-16 and BERT-base at batch 1 to 64 in f32 and f16 on each convolution path (cuDNN's graph
# API, also with CUDA graphs; its legacy API; im2col) beside PyTorch eager at batch 1, 8, 32 and
# 64 (scripts/torch-baseline.py), `cargo
# bench --bench cuda` (GEMM nodes against cuBLAS on the same shapes, scheduler share of node
# time), `profile --device cuda` for ResNet-50, GNMT and Transformer (ResNet-50 and the
# Transformer also with --cuda-graphs), and a GraphB-vs-LazyB `compare --device cuda` at a low
# and a high load, `validate` (the table's prediction against the card on the same arrivals), and
# GPT-2's time to first token and per output token under the LLM policies (scripts/llm-device.sh).
# Writes everything to ${OUT:-out/gpu-check} and a summary to report.md there,
# each step's seconds in its Steps line. Needs the NVIDIA driver; cuBLAS, cuBLASLt and NVRTC 13
# from the CUDA toolkit or from pip (nvidia-cublas, nvidia-cuda-nvrtc) on LD_LIBRARY_PATH; cuDNN
# 9 (pip nvidia-cudnn-cu13) for the cuDNN path, PyTorch for the peer, and python3 for the llm part
# (its SLO and tables).
# SMOKE=1 checks the script itself (about 8 minutes on the software CUDA stand-in, 2 cores):
# reduced models, few requests, and no test run.
# Every step runs whatever the ones before it did; the report ends with each step's outcome, and
# the script exits 1 when any step failed (0 only when every one passed).
#
# Time on an H100 (measured 2026-11-26, 16 host cores, binaries prebuilt): GPU tests 12 s, the
# 17 full-size verifies about 90 s (before GPT-2 joined them: untimed on a card), bench under
# 1 minute, the profiles under 1 minute, compare 27 s for ResNet-50 (500 requests x 6 policies
# x 2 loads) and 115 s for GNMT (200 requests); the Transformer's compare (about 2,000 node
# executions a request) was not run.
#
# BIN_DIR=DIR runs binaries built elsewhere instead of cargo (for a GPU machine with no Rust
# toolchain; scripts/gpu-prebuild.sh makes DIR and scripts/gpu-prebuilt.sh runs this script with
# it): DIR/lazybatch, DIR/it (the integration-test binary) and DIR/cuda-bench.
# PARTS=LIST runs only these parts, comma-separated (default: all):
# tests,kernels,verify,graphs,speed,bench,profile,compare,validate,capacity,llm.
# VERIFY_MODELS="resnet50 gnmt …" narrows the verify part (default: the eight zoo models of the
# paper's kind, then GPT-2 small).
# LLM_REQUESTS=N serves N requests a point in the llm part (default 40: GPT-2 at full width,
# batch up to 64, two loads x five policies, compare only); LLM_CAPACITY=1 adds the capacity
# search under the token SLO (many probes: minutes on a card). SMOKE=1 skips the part: profiling
# GPT-2 on the software stand-in alone takes over 10 minutes.
# VALIDATE="resnet50:300 gnmt:100 transformer:50" (the default) names the models of the validate
# part and the requests of each point (5 policies x 0.3 and 0.9 of Serial's capacity, each served
# twice on the card: --repeat); `capacity` searches ResNet-50's highest rate at p99 <= 50 ms, an
# SLA of 50 ms (LazyB fills the slack up to its SLA: a p99 bound under the SLA is not what it aims
# at), under Serial, GraphB(5), LazyB, lazy:adaptive and the Oracle (1,000 requests a probe, one
# seed, 5% precision).
# VALIDATE_SEED=N draws the validate part's arrivals from seed N (default 1, validate's own).
# CAPACITY_SEEDS=N serves each capacity probe with N seeds (default 1).
# REQS_SEQ=N serves N requests a compare point for the models other than ResNet-50 (default 200).
# SPEED_MODELS="resnet50 vgg16 mobilenet_v1 bert_base" (the default) names the models of the speed
# part; it ends with lazybatch's curve beside PyTorch's without our input nodes, which PyTorch's
# timing leaves out (scripts/speed-vs-torch.py).
# STEP_TIMEOUT=SECONDS ends any one step after that long (it then counts as failed).
# MODELS="resnet50 gnmt transformer" (the default) names the models to profile and compare.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu-check}"
mkdir -p "$out"
bin=target/release/lazybatch
[ -z "${BIN_DIR:-}" ] || bin="$BIN_DIR/lazybatch"
parts=",${PARTS:-tests,kernels,verify,graphs,speed,bench,profile,compare,validate,capacity,llm},"
want() { [[ "$parts" == *",$1,"* ]]; }
tmo=() # the prefix that ends a step's command after STEP_TIMEOUT seconds
[ -z "${STEP_TIMEOUT:-}" ] || tmo=(timeout "$STEP_TIMEOUT")
steps="$out/steps.txt" # one line per step: ok, FAILED or skipped, and its name
: > "$steps"
# step NAME COMMAND...: runs COMMAND (its output goes into the report), records how it ended and
# never stops the script. COMMAND is one command or one pipeline (pipefail: any part failing
# fails it), since `set -e` does not act inside a command whose status is tested.
step() {
  local name=$1 rc=0 t0=$SECONDS
  shift
  if declare -F "$1" > /dev/null; then
    "$@" || rc=$? # a function of this script: it runs its commands under "${tmo[@]}" itself
  else
    "${tmo[@]}" "$@" || rc=$?
  fi
  local took="$((SECONDS - t0)) s"
  if [ "$rc" = 0 ]; then
    echo "ok       $name ($took)" >> "$steps"
  else
    echo "STEP FAILED: $name (exit $rc, $took)"
    echo "FAILED   $name (exit $rc, $took)" >> "$steps"
  fi
}
gpu_tests() {
  # one test at a time with every module loaded up front: the no-allocation test reads
  # device-wide free memory, which a test in a parallel thread or a lazily loaded cuBLAS kernel
  # would change; the step fails with cargo, whatever grep keeps
  local run=(cargo test --release --features check --test it cuda:: --)
  [ -z "${BIN_DIR:-}" ] || run=("$BIN_DIR/it" cuda::)
  CUDA_MODULE_LOADING=EAGER REQUIRE_GPU=1 "${tmo[@]}" "${run[@]}" --nocapture --test-threads=1 2>&1 \
    | grep -E "^test |values, max|max relative|free device|test result|panicked|Verify"
  return "${PIPESTATUS[0]}"
}
run_bench() {
  if [ -n "${BIN_DIR:-}" ]; then
    "${tmo[@]}" "$BIN_DIR/cuda-bench" "${bench[@]:1}" 2>&1
  else
    "${tmo[@]}" cargo bench --bench cuda "${bench[@]}" 2>&1 | grep -v -E "^\s*(Compiling|Finished|Running)"
  fi
}
first_lines() { # COMMAND...: its first 14 lines of output; fails when it fails
  "${tmo[@]}" "$@" | sed -n 1,14p
}
# model sizes for profile/compare (width, res) and for verify (vwidth, vres). --res scales image
# inputs, so only ResNet-50 takes it: `img_args MODEL RES...` sets img to RES for it, else empty.
if [ "${SMOKE:-0}" = 1 ]; then
  width=(--width 0.125); res=(--res 0.25); vwidth=("${width[@]}"); vres=("${res[@]}")
  mb=8; reqs=40; reqs_seq=40; pols=serial,graph:5,lazy; bench=(-- --small)
  vmodels=(resnet50 gnmt transformer)
  speed_models=(resnet50); torch_batches=1
else
  width=(); res=(); vwidth=(); vres=()
  read -r -a vmodels <<< "${VERIFY_MODELS:-resnet50 gnmt transformer_base vgg16 mobilenet_v1 bert_base las lstm_stack gpt2}"
  read -r -a speed_models <<< "${SPEED_MODELS:-resnet50 vgg16 mobilenet_v1 bert_base}"; torch_batches=1,8,32,64
  mb=64; reqs=500; reqs_seq=${REQS_SEQ:-200}; pols=serial,graph:5,graph:25,graph:50,lazy,oracle; bench=()
fi
img_args() {
  local m=$1
  shift
  if [ "$m" = resnet50 ]; then img=("$@"); else img=(); fi
}
# the models whose results depend on the convolution path
has_conv() { [[ " resnet50 vgg16 mobilenet_v1 " == *" $1 "* ]]; }
{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /' || true
  echo
  if [ -z "${BIN_DIR:-}" ]; then
    echo '## Build'
    echo '```'
    step build cargo build --release --quiet
    echo '```'
    echo
  fi
  if want tests; then
    echo '## Tests (REQUIRE_GPU=1)'
    echo '```'
    if [ "${SMOKE:-0}" = 1 ]; then
      echo "(skipped: SMOKE=1)"
      echo "skipped  GPU tests (SMOKE=1)" >> "$steps"
    else
      step "GPU tests" gpu_tests
    fi
    echo '```'
    echo
  fi
  if want kernels; then
    echo '## Kernels'
    echo '```'
    step kernels "$bin" kernels
    echo '```'
    echo
  fi
  if want verify; then
    echo '## Verify on the GPU (alone vs forced preemptions/merges, and against the CPU: f32 node by node, f16 whole models)'
    echo '```'
    for m in "${vmodels[@]}"; do
      img_args "$m" "${vres[@]}"
      step "verify $m" "$bin" verify --device cuda --model "$m" "${vwidth[@]}" "${img[@]}" --ops
    done
    for m in "${vmodels[@]}"; do
      img_args "$m" "${vres[@]}"
      step "verify $m f16" "$bin" verify --device cuda --precision f16 --model "$m" "${vwidth[@]}" "${img[@]}"
    done
    for m in "${vmodels[@]}"; do
      has_conv "$m" || continue
      img_args "$m" "${vres[@]}"
      step "verify $m --conv im2col" "$bin" verify --device cuda --conv im2col --model "$m" "${vwidth[@]}" "${img[@]}"
      step "verify $m tf32" "$bin" verify --device cuda --precision tf32 --model "$m" "${vwidth[@]}" "${img[@]}"
    done
    echo '```'
    echo
  fi
  if want graphs; then
    echo '## Verify with CUDA graphs (the launches of each node replayed as one graph)'
    echo '```'
    for m in resnet50 gnmt transformer_base; do
      img_args "$m" "${vres[@]}"
      step "verify $m --cuda-graphs" "$bin" verify --device cuda --cuda-graphs --model "$m" "${vwidth[@]}" "${img[@]}"
    done
    echo '```'
    echo
  fi
  if want speed; then
    echo '## Speed: the batching curve per precision and convolution path, and PyTorch eager'
    for m in "${speed_models[@]}"; do
      img_args "$m" "${res[@]}"
      for precision in f32 f16; do
        convs=(cudnn)
        if has_conv "$m"; then convs+=(cudnn-legacy im2col); fi
        for conv in "${convs[@]}"; do
          for graphs in "" --cuda-graphs; do
            # graphs on the default path only
            [ -z "$graphs" ] || [ "$conv" = cudnn ] || continue
            echo
            echo "### $m $precision --conv $conv $graphs"
            echo '```'
            mkdir -p "$out/speed"
            step "speed $m $precision $conv $graphs" first_lines "$bin" profile --device cuda --model "$m" "${width[@]}" "${img[@]}" \
              --precision "$precision" --conv "$conv" $graphs --max-batch "$mb" \
              --save "$out/speed/$m-$precision-$conv${graphs:+-graphs}.profile.json"
            echo '```'
          done
        done
      done
    done
    echo
    echo '### PyTorch eager (scripts/torch-baseline.py)'
    echo '```'
    if python3 -c 'import torch' 2> /dev/null; then
      step "pytorch eager" python3 scripts/torch-baseline.py --batches "$torch_batches" \
        --models "$(IFS=,; echo "${speed_models[*]}")" --json "$out/speed/torch.json"
    else
      echo "(no PyTorch here: the peer is not measured)"
      echo "skipped  pytorch eager (no PyTorch)" >> "$steps"
    fi
    echo '```'
    if [ -f "$out/speed/torch.json" ]; then
      echo
      echo '### Like for like: without our input nodes, which PyTorch does not time (scripts/speed-vs-torch.py)'
      echo
      step "speed vs pytorch" python3 scripts/speed-vs-torch.py "$out/speed" "$out/speed/torch.json" \
        --batches "$torch_batches"
    fi
    echo
  fi
  if want bench; then
    echo '## GEMM nodes vs cuBLAS, scheduler share (cargo bench --bench cuda)'
    echo '```'
    step bench run_bench
    echo '```'
  fi
  for m in ${MODELS:-resnet50 gnmt transformer}; do
    img_args "$m" "${res[@]}"
    if want profile; then
      echo
      echo "## profile --device cuda --model $m"
      echo '```'
      step "profile $m" first_lines "$bin" profile --device cuda --model "$m" "${width[@]}" "${img[@]}" --max-batch "$mb" --save "$out/$m.profile.json"
      echo '```'
      if [ "$m" != gnmt ]; then
        echo
        echo "## profile --device cuda --cuda-graphs --model $m (each node's launches replayed as one CUDA graph)"
        echo '```'
        step "profile $m --cuda-graphs" first_lines "$bin" profile --device cuda --cuda-graphs --model "$m" "${width[@]}" "${img[@]}" --max-batch "$mb" --save "$out/$m.graphs.profile.json"
        echo '```'
      fi
    fi
    if want compare; then
      echo
      echo "## compare --device cuda --model $m --load 0.3,0.9"
      echo '```'
      n=$reqs; [ "$m" = resnet50 ] || n=$reqs_seq
      step "compare $m" "$bin" compare --device cuda --model "$m" "${width[@]}" "${img[@]}" --load 0.3,0.9 --requests "$n" \
        --max-batch "$mb" --profile "$out/$m.profile.json" --policies "$pols" --out "$out/$m"
      echo '```'
    fi
  done
  if want capacity; then
    # the stand-in is two orders slower than a card: a bound it can meet
    n=1000; p99=50; [ "${SMOKE:-0}" = 1 ] && n=40 && p99=400
    echo
    echo "## capacity --device cuda: the highest rate each policy serves at p99 <= its SLA, $p99 ms"
    echo '```'
    img_args resnet50 "${res[@]}"
    step "capacity resnet50" "$bin" capacity --device cuda --model resnet50 "${width[@]}" "${img[@]}" \
      --policies serial,graph:5,lazy,lazy:adaptive,oracle --sla-ms "$p99" --p99-ms "$p99" --requests "$n" --seeds "${CAPACITY_SEEDS:-1}" --search-precision 5 \
      --max-batch "$mb" --out "$out/capacity-resnet50"
    echo '```'
  fi
  if want validate; then
    echo
    echo '## validate --device cuda: the simulator (the table in virtual time) against the card, same arrivals'
    for spec in ${VALIDATE:-resnet50:300 gnmt:100 transformer:50}; do
      m=${spec%%:*}; n=${spec##*:}
      [ "${SMOKE:-0}" = 1 ] && n=30
      img_args "$m" "${res[@]}"
      echo
      echo "### $m, $n requests a point"
      echo '```'
      step "validate $m" "$bin" validate --device cuda --model "$m" "${width[@]}" "${img[@]}" \
        --load 0.3,0.9 --policies serial,graph:5,graph:25,lazy,oracle --requests "$n" --max-batch "$mb" \
        --repeat --seed "${VALIDATE_SEED:-1}" --out "$out/validate-$m"
      echo '```'
    done
  fi
  if want llm; then
    echo
    echo "## GPT-2 on the card: TTFT and TPOT under the LLM policies (scripts/llm-device.sh)"
    echo '```'
    if [ "${SMOKE:-0}" = 1 ]; then
      echo "(skipped: SMOKE=1; profiling GPT-2 on the software stand-in alone takes over 10 minutes)"
      echo "skipped  llm gpt2 (SMOKE=1)" >> "$steps"
    else
      compare_only=1; [ "${LLM_CAPACITY:-0}" = 1 ] && compare_only=0
      step "llm gpt2" env DEVICE=cuda BIN="$bin" WIDTH=1 MAX_BATCH="$mb" REQUESTS="${LLM_REQUESTS:-40}" \
        CAP_REQUESTS="${LLM_REQUESTS:-40}" COMPARE_ONLY="$compare_only" scripts/llm-device.sh "$out/llm"
    fi
    echo '```'
  fi
  echo
  echo '## Steps'
  echo '```'
  cat "$steps"
  echo '```'
} 2>&1 | tee "$out/report.md"
echo "wrote $out/report.md"
if grep -q '^FAILED' "$steps"; then
  echo "gpu-check: $(grep -c '^FAILED' "$steps") step(s) failed:" >&2
  grep '^FAILED' "$steps" >&2
  exit 1
fi
