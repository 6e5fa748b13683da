#!/usr/bin/env bash
# Full-size ONNX import against onnxruntime: builds ResNet-50 (random weights, torchvision's
# layout, about 100 MB) and BERT-base (Hugging Face's layout as torch.onnx.export writes it,
# 12 layers, about 440 MB; sequence length fixed at 128) with scripts/onnx-fixtures.py --full
# (not committed), imports each, serves two requests on the CPU device (verify: bit-identical
# alone and batched) and compares their outputs with onnxruntime's on the same inputs
# (scripts/onnx-check.py).
# Usage: scripts/onnx-full-check.sh [DIR]   (DIR defaults to a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
dir=${1:-$(mktemp -d)}
python3 scripts/onnx-fixtures.py --full "$dir"
for m in resnet50 bert_base; do
  f="$dir/$m.onnx"
  dim=(); [ "$m" = bert_base ] && dim=(--dim seq=128)
  echo "$m: $(du -h "$f" | cut -f1)"
  target/release/lazybatch verify --model "$f" "${dim[@]}" --device cpu --requests 2 --max-batch 2 --io-json "$dir/$m.io.json"
  python3 scripts/onnx-check.py "$f" "$dir/$m.io.json"
done
