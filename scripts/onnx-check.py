#!/usr/bin/env python3
"""Runs an ONNX model in onnxruntime (CPU execution provider) on the inputs lazybatch used and
compares the outputs with lazybatch's: prints one JSON line with the largest absolute
difference, the largest |reference| and their ratio (the relative difference the ONNX tests
bound, 1e-4 in f32), per request and overall.

Usage: scripts/onnx-check.py MODEL.onnx IO.json
  IO.json: {"inputs": [[...], ...], "outputs": [[...], ...]}, one list per request, flattened
  in the graph's own order ([C, H, W] for images; token ids for an integer input, taken
  modulo the vocabulary of the table the input indexes, as lazybatch's embedding does).
  Exit status 3 when onnxruntime is missing.
"""
import json
import sys

from needs import needs

needs("onnxruntime", ["numpy", "onnxruntime", "onnx"])
try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:  # the Rust test skips loudly on this status
    print(f"onnxruntime unavailable: {e}", file=sys.stderr)
    sys.exit(3)


def vocabulary(model_path, input_name):
    """Rows of the table the input's token ids index (a Gather of an initializer by them)."""
    import onnx
    g = onnx.load(model_path).graph
    dims = {t.name: list(t.dims) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == input_name and n.input[0] in dims:
            return dims[n.input[0]][0]
    return None


def main():
    model, io_path = sys.argv[1], sys.argv[2]
    io = json.load(open(io_path))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    tokens = "int" in inp.type
    vocab = vocabulary(model, inp.name) if tokens else None
    worst = {"max_abs_diff": 0.0, "max_abs_ref": 0.0, "rel_diff": 0.0, "values": 0}
    for x, ours in zip(io["inputs"], io["outputs"]):
        x = np.asarray(x, dtype=np.float64)
        if tokens:
            x = x.astype(np.int64)
            x = (x % vocab if vocab else x).reshape(1, -1)
        else:
            x = x.astype(np.float32).reshape([1] + [d if isinstance(d, int) else -1 for d in inp.shape[1:]])
        ref = sess.run(None, {inp.name: x})[0].astype(np.float64).ravel()
        ours = np.asarray(ours, dtype=np.float64)
        if ref.shape != ours.shape:
            print(json.dumps({"error": f"shapes differ: onnxruntime {ref.shape}, lazybatch {ours.shape}"}))
            sys.exit(1)
        d = float(np.max(np.abs(ref - ours)))
        m = float(np.max(np.abs(ref)))
        worst["max_abs_diff"] = max(worst["max_abs_diff"], d)
        worst["max_abs_ref"] = max(worst["max_abs_ref"], m)
        worst["rel_diff"] = max(worst["rel_diff"], d / max(m, 1e-30))
        worst["values"] += ours.size
    print(json.dumps(worst))


if __name__ == "__main__":
    main()
