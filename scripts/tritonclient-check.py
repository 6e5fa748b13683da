#!/usr/bin/env python3
"""Calls a running `lazybatch serve` with Triton's own Python client (tritonclient[http]):
liveness, readiness, metadata and one inference on a random input of the model's input shape,
then compares the answer with onnxruntime's for the same input when the model is an ONNX file
(onnxruntime imported in this Python or, failing that, in `python3`).

Usage: scripts/tritonclient-check.py URL MODEL_NAME [MODEL.onnx]
  e.g. lazybatch serve --model tests/fixtures/onnx/mobilenet_style.onnx --device cpu &
       scripts/tritonclient-check.py 127.0.0.1:8000 mobilenet_style tests/fixtures/onnx/mobilenet_style.onnx
"""
import json
import subprocess
import sys
import tempfile

import numpy as np
import tritonclient.http as http


def main():
    url, name = sys.argv[1], sys.argv[2]
    c = http.InferenceServerClient(url=url)
    print("live", c.is_server_live(), "ready", c.is_server_ready(), "model ready", c.is_model_ready(name))
    meta = c.get_model_metadata(name)
    print("metadata", json.dumps(meta))
    i, o = meta["inputs"][0], meta["outputs"][0]
    x = np.random.default_rng(0).uniform(-1, 1, i["shape"]).astype(np.float32)
    inp = http.InferInput(i["name"], i["shape"], i["datatype"])
    inp.set_data_from_numpy(x, binary_data=False)
    r = c.infer(name, [inp], outputs=[http.InferRequestedOutput(o["name"], binary_data=False)])
    y = r.as_numpy(o["name"])
    print("output", y.shape)
    if len(sys.argv) > 3:
        with tempfile.TemporaryDirectory() as d:
            np.save(f"{d}/x.npy", x)
            code = (f"import numpy as np, onnxruntime as ort; x = np.load('{d}/x.npy'); "
                    f"s = ort.InferenceSession('{sys.argv[3]}'); "
                    f"np.save('{d}/ref.npy', s.run(None, {{s.get_inputs()[0].name: x}})[0])")
            try:
                exec(code)
            except ImportError:
                subprocess.run(["python3", "-c", code], check=True)
            ref = np.load(f"{d}/ref.npy").reshape(y.shape)
        print("relative difference against onnxruntime", float(np.abs(ref - y).max() / np.abs(ref).max()))


if __name__ == "__main__":
    main()
