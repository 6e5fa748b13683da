#!/usr/bin/env bash
# Regenerates docs/ablation/: on the `paper` NPU configuration, GNMT, the Transformer and
# ResNet-50 under GraphB(5), every reading of LazyB's rules (lazy, lazy:recheck, lazy:all,
# lazy:past-max, oracle and oracle:recheck), the GNMT ablation (lazy:no-decoder-preempt),
# DVABatch-style stretching and lazy:adaptive built on either rule: the rate grid
# (`compare`, 10,000 requests a run, 5 seeds) and capacity at p99 <= 100 ms (`capacity`, 2 seeds
# x 5,000 requests a probe, 2% precision). docs/policies.md ("GNMT, explained by ablation")
# shows them. About 3 minutes on 2 cores.
# Usage: scripts/ablation.sh [OUT]   (OUT defaults to docs/ablation; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
out=${1:-docs/ablation}
mkdir -p "$out"
policies=graph:5,lazy,lazy:recheck,lazy:all,lazy:past-max,lazy:no-decoder-preempt,dva:25:0,dva:25:5,dva:50:5,dva:100:5,lazy:adaptive,lazy:adaptive:recheck,oracle,oracle:recheck
for m in gnmt transformer_base resnet50; do
  "$bin" compare --device npu --npu-config paper --model "$m" --policies "$policies" \
    --rates 16,128,250,500,1000,1500,2000 --seeds 5 --progress off > "$out/$m.txt"
  "$bin" capacity --device npu --npu-config paper --model "$m" --p99-ms 100 \
    --policies "$policies" --progress off > "$out/capacity_$m.txt"
  echo "ablation: $m written to $out" >&2
done
