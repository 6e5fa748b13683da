#!/usr/bin/env bash
# What a user exports from PyTorch, imported and checked against onnxruntime: torchvision's
# ResNet-50, MobileNet-v2 and VGG-16 and Hugging Face's BertModel (bert-base sizes, sequence
# 128), random weights (nothing is downloaded), exported with torch.onnx.export's defaults at
# opset 17 (PyTorch 2.15 writes them through its dynamo exporter, weights in a .onnx.data file
# beside the model). Each is served on the CPU device (verify: bit-identical alone and
# batched) and compared with onnxruntime on the same inputs (scripts/onnx-check.py).
# Needs a Python with torch, torchvision, transformers and onnxscript (PYTHON=/path/to/python;
# not installed by CI: several GB). Usage: PYTHON=... scripts/onnx-pytorch-check.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
cargo build --release --quiet
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
"$py" - "$dir" <<'PY'
import sys, torch, torchvision
from transformers import BertConfig, BertModel
out = sys.argv[1]
x = torch.randn(1, 3, 224, 224)
for name in ["resnet50", "mobilenet_v2", "vgg16"]:
    m = getattr(torchvision.models, name)(weights=None).eval()
    torch.onnx.export(m, x, f"{out}/{name}.onnx", opset_version=17, input_names=["input"],
                      dynamic_axes={"input": {0: "batch"}})
class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = BertModel(BertConfig(), add_pooling_layer=False).eval()
    def forward(self, input_ids):
        return self.m(input_ids=input_ids).last_hidden_state
torch.onnx.export(Bert().eval(), (torch.randint(0, 30522, (1, 128)),), f"{out}/bert.onnx",
                  opset_version=17, input_names=["input_ids"],
                  dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
PY
for m in resnet50 mobilenet_v2 vgg16 bert; do
  f="$dir/$m.onnx"
  dim=(); [ "$m" = bert ] && dim=(--dim seq=128)
  target/release/lazybatch verify --model "$f" "${dim[@]}" --device cpu --requests 2 --max-batch 2 --io-json "$dir/$m.io.json"
  echo "$m against onnxruntime: $(python3 scripts/onnx-check.py "$f" "$dir/$m.io.json")"
done
