#!/usr/bin/env python3
"""Runs an ONNX model in onnxruntime (CPU execution provider) on the inputs lazybatch used and
compares the outputs with lazybatch's: prints one JSON line with the largest absolute
difference, the largest |reference| and their ratio (the relative difference the ONNX tests
bound, 1e-4 in f32), per request and overall.

Usage: scripts/onnx-check.py MODEL.onnx IO.json
  IO.json: {"inputs": [[...], ...], "outputs": [[...], ...]}, one list per request, flattened
  in the graph's own order ([C, H, W] for images). Exit status 3 when onnxruntime is missing.
"""
import json
import sys

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:  # the Rust test skips loudly on this status
    print(f"onnxruntime unavailable: {e}", file=sys.stderr)
    sys.exit(3)


def main():
    model, io_path = sys.argv[1], sys.argv[2]
    io = json.load(open(io_path))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    per_request = [d for d in inp.shape[1:]]
    worst = {"max_abs_diff": 0.0, "max_abs_ref": 0.0, "rel_diff": 0.0, "values": 0}
    for x, ours in zip(io["inputs"], io["outputs"]):
        dtype = np.int64 if "int" in inp.type else np.float32
        x = np.asarray(x, dtype=np.float64).astype(dtype).reshape([1] + per_request)
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
