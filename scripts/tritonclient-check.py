#!/usr/bin/env python3
"""Calls a running `lazybatch serve` with Triton's own Python client (tritonclient[http]):
liveness, readiness (also of version 1), the server's metadata, the model's metadata and
configuration, one inference twice, with the tensors as JSON and with the binary tensor
extension (tritonclient's default), four asynchronous inferences with their own ids, and the
inference statistics; prints one JSON object with what it got.
Given an ONNX file, it also compares the answer with onnxruntime's for the same input
(onnxruntime imported in this Python or, failing that, in `python3`).

Usage: scripts/tritonclient-check.py URL MODEL_NAME [--onnx MODEL.onnx] [--input VALUES.json]
  e.g. lazybatch serve --model tests/fixtures/onnx/mobilenet_style.onnx --device cpu &
       scripts/tritonclient-check.py 127.0.0.1:8000 mobilenet_style --onnx tests/fixtures/onnx/mobilenet_style.onnx
--input: a JSON list of the input's values (flat); default: uniform in [-1, 1), seed 0.
Exit status 3: tritonclient (or numpy) is not installed (`pip install tritonclient[http]`).
"""
import argparse
import json
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import tritonclient.http as http
except ImportError as e:
    print(f"tritonclient-check: {e} (pip install tritonclient[http])", file=sys.stderr)
    sys.exit(3)


def onnxruntime_output(path, x):
    with tempfile.TemporaryDirectory() as d:
        np.save(f"{d}/x.npy", x)
        code = (f"import numpy as np, onnxruntime as ort; x = np.load('{d}/x.npy'); "
                f"s = ort.InferenceSession('{path}'); "
                f"np.save('{d}/ref.npy', s.run(None, {{s.get_inputs()[0].name: x}})[0])")
        try:
            exec(code)
        except ImportError:
            subprocess.run(["python3", "-c", code], check=True)
        return np.load(f"{d}/ref.npy")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--onnx")
    p.add_argument("--input")
    a = p.parse_args()
    c = http.InferenceServerClient(url=a.url, concurrency=4)
    out = {"live": c.is_server_live(), "ready": c.is_server_ready(),
           "model_ready": c.is_model_ready(a.model),
           "model_ready_v1": c.is_model_ready(a.model, "1"),
           "server_metadata": c.get_server_metadata(),
           "config": c.get_model_config(a.model)}
    meta = c.get_model_metadata(a.model)
    out["metadata"] = meta
    i, o = meta["inputs"][0], meta["outputs"][0]
    dtype = np.int64 if i["datatype"] == "INT64" else np.float32
    if a.input:
        with open(a.input) as f:
            x = np.array(json.load(f), dtype=dtype).reshape(i["shape"])
    else:
        x = np.random.default_rng(0).uniform(-1, 1, i["shape"]).astype(dtype)
    out["outputs"] = {}
    for binary in (False, True):
        inp = http.InferInput(i["name"], list(x.shape), i["datatype"])
        inp.set_data_from_numpy(x, binary_data=binary)
        r = c.infer(a.model, [inp], outputs=[http.InferRequestedOutput(o["name"], binary_data=binary)])
        y = r.as_numpy(o["name"])
        out["outputs"]["binary" if binary else "json"] = y.astype(np.float64).ravel().tolist()
        out["shape"] = list(y.shape)
    # asynchronous requests, each with its own id: answers matched by it
    inp = http.InferInput(i["name"], list(x.shape), i["datatype"])
    inp.set_data_from_numpy(x)
    pending = [c.async_infer(a.model, [inp], request_id=f"req-{k}") for k in range(4)]
    out["async_ids"] = [p.get_result().get_response()["id"] for p in pending]
    out["statistics"] = c.get_inference_statistics(a.model)
    if a.onnx:
        ref = onnxruntime_output(a.onnx, x).reshape(y.shape)
        out["rel_diff_onnxruntime"] = float(np.abs(ref - y).max() / np.abs(ref).max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
