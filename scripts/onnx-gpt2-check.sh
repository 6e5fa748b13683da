#!/usr/bin/env bash
# A real decoder export with its key/value cache, imported and checked against onnxruntime:
# Hugging Face's GPT2LMHeadModel (random weights, nothing downloaded; eager attention) exported
# by torch.onnx.export's TorchScript exporter at opset 17 with past_key_values in and present
# out, at a tiny size (2 layers, width 64) and at GPT-2 small's (12 layers, width 768, 50,257
# tokens). Each is served on the CPU device (verify: bit-identical alone and batched across
# steps) and run in onnxruntime step by step with its cache on the same prompts
# (scripts/onnx-decoder-check.py: every step's logits, every token).
# Needs a Python with torch and transformers (PYTHON=/path/to/python; not installed by CI:
# several GB). Usage: PYTHON=... scripts/onnx-gpt2-check.sh [DIR]   (SIZES="tiny small")
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
cargo build --release --quiet
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
for size in ${SIZES:-tiny small}; do
  "$py" - "$dir/gpt2_$size.onnx" "$size" <<'PY'
import sys, warnings, torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.cache_utils import DynamicCache
warnings.filterwarnings("ignore")
path, size = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cfg = (GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128)
       if size == "tiny" else GPT2Config())
cfg._attn_implementation = "eager"
m = GPT2LMHeadModel(cfg).eval()
L, H, dh = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head

class WithCache(torch.nn.Module):
    """input_ids and the past as tensors in, the logits and the present out (as an exported
    decoder's graph has them)."""
    def __init__(self, m):
        super().__init__()
        self.m = m
    def forward(self, input_ids, *past):
        cache = DynamicCache()
        for i in range(L):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.m(input_ids=input_ids, past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)

ids = torch.randint(0, cfg.vocab_size, (1, 5))
past = [torch.zeros(1, H, 3, dh) for _ in range(2 * L)]
ins = ["input_ids"] + [f"past_key_values.{i}.{kv}" for i in range(L) for kv in ("key", "value")]
outs = ["logits"] + [f"present.{i}.{kv}" for i in range(L) for kv in ("key", "value")]
axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
axes.update({n: {0: "batch", 2: "past_seq"} for n in ins[1:]})
axes.update({n: {0: "batch", 2: "total_seq"} for n in outs[1:]})
with torch.no_grad():
    torch.onnx.export(WithCache(m), (ids, *past), path, input_names=ins, output_names=outs,
                      dynamic_axes=axes, opset_version=17, dynamo=False)
print(f"{path}: exported (torch {torch.__version__})", file=sys.stderr)
PY
  echo "== gpt2_$size"
  ./target/release/lazybatch verify --model "$dir/gpt2_$size.onnx" --requests 4 --max-batch 4 \
    --io-json "$dir/gpt2_$size.io.json" | tail -2
  python3 scripts/onnx-decoder-check.py "$dir/gpt2_$size.onnx" "$dir/gpt2_$size.io.json"
done
