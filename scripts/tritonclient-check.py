#!/usr/bin/env python3
"""Calls a running `lazybatch serve` with Triton's own Python client (tritonclient[http]):
liveness, readiness (also of version 1), the server's metadata, the model's metadata and
configuration, one inference twice, with the tensors as JSON and with the binary tensor
extension (tritonclient's default), four asynchronous inferences with their own ids, and the
inference statistics; prints one JSON object with what it got. With --grpc ADDR, the same over
gRPC with tritonclient[grpc] (raw tensors, Triton's default there; a request parameter
`sla_ms`; once gzip-compressed), under the key "grpc".
Given an ONNX file, it also compares the answer with onnxruntime's for the same input
(onnxruntime imported in this Python or, failing that, in `python3`).

Usage: scripts/tritonclient-check.py URL MODEL_NAME [--onnx MODEL.onnx] [--input VALUES.json]
                                     [--grpc HOST:PORT]
  e.g. lazybatch serve --model tests/fixtures/onnx/mobilenet_style.onnx --device cpu &
       scripts/tritonclient-check.py 127.0.0.1:8000 mobilenet_style --onnx tests/fixtures/onnx/mobilenet_style.onnx
--input: a JSON list of the input's values (flat); default: uniform in [-1, 1), seed 0.
Exit status 3: tritonclient (or numpy) is not installed (`pip install tritonclient[http,grpc]`).
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time

from needs import needs

needs("tritonclient-check", ["numpy", "tritonclient", "geventhttpclient"], pip="numpy 'tritonclient[http,grpc]'")
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


def over_grpc(addr, model, x):
    """The same calls over gRPC: what they returned, as JSON."""
    try:
        import tritonclient.grpc as grpc
    except (ImportError, RuntimeError) as e:
        print(f"tritonclient-check: {e} (pip install tritonclient[grpc])", file=sys.stderr)
        sys.exit(3)
    c = grpc.InferenceServerClient(url=addr)
    out = {"live": c.is_server_live(), "ready": c.is_server_ready(),
           "model_ready": c.is_model_ready(model), "model_ready_v1": c.is_model_ready(model, "1"),
           "server_metadata": c.get_server_metadata(as_json=True),
           "config": c.get_model_config(model, as_json=True)["config"]}
    meta = c.get_model_metadata(model, as_json=True)
    out["metadata"] = meta
    i, o = meta["inputs"][0], meta["outputs"][0]
    inp = grpc.InferInput(i["name"], list(x.shape), i["datatype"])
    inp.set_data_from_numpy(x)
    r = c.infer(model, [inp], outputs=[grpc.InferRequestedOutput(o["name"])], request_id="one",
                parameters={"sla_ms": 60000.0})
    y = r.as_numpy(o["name"])
    out["id"] = r.get_response().id
    # gzip-compressed request: the same answer
    z = c.infer(model, [inp], outputs=[grpc.InferRequestedOutput(o["name"])],
                compression_algorithm="gzip")
    out["gzip_equal"] = bool((z.as_numpy(o["name"]) == y).all())
    out["output"] = y.astype(np.float64).ravel().tolist()
    out["shape"] = list(y.shape)
    results = []
    for k in range(4):
        c.async_infer(model, [inp], callback=lambda result, error: results.append((result, error)),
                      request_id=f"req-{k}")
    deadline = time.monotonic() + 60
    while len(results) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    out["async_ids"] = sorted(res.get_response().id for res, err in results if err is None)
    try:
        c.infer(model, [grpc.InferInput("not-" + i["name"], list(x.shape), i["datatype"])])
    except grpc.InferenceServerException as e:
        out["wrong_input"] = {"status": e.status(), "message": e.message()}
    out["statistics"] = c.get_inference_statistics(model, as_json=True)
    c.close()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--onnx")
    p.add_argument("--input")
    p.add_argument("--grpc")
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
    if a.grpc:
        out["grpc"] = over_grpc(a.grpc, a.model, x)
    if a.onnx:
        ref = onnxruntime_output(a.onnx, x).reshape(y.shape)
        out["rel_diff_onnxruntime"] = float(np.abs(ref - y).max() / np.abs(ref).max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
