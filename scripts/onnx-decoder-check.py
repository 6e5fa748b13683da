#!/usr/bin/env python3
"""Runs a decoder-only ONNX export with a key/value cache (inputs input_ids and
past_key_values.{i}.key/value, outputs logits and present.{i}.key/value, as Hugging Face's
GPT-2 exports) in onnxruntime on the prompts lazybatch served, step by step as a server does —
the prompt with an empty cache, then one token at a time with the cache it returned — and
compares every step's logits and chosen token with lazybatch's. Prints one JSON line: the
largest absolute difference of the logits, the largest |reference|, their ratio (the relative
difference the tests bound, 1e-4 in f32), the values compared, the decode steps run, and how
many tokens onnxruntime would have chosen otherwise.

Usage: scripts/onnx-decoder-check.py MODEL.onnx IO.json
  IO.json: `lazybatch verify --io-json`: {"inputs": [[prompt ids], ...], "outputs": [[...], ...]},
  each request's outputs lazybatch's captured order: the prefill's logits and first token, then
  each decode step's logits and token. The next step is fed lazybatch's token, so that one
  near tie does not shift every step after it.
  Exit status 3 when onnxruntime is missing, 1 when the outputs do not line up.
"""
import json
import sys

from needs import needs

needs("onnxruntime", ["numpy", "onnxruntime"])
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
    ins = sess.get_inputs()
    tokens_in = ins[0].name
    past = [i for i in ins[1:]]
    vocab = sess.get_outputs()[0].shape[-1]
    worst = {"max_abs_diff": 0.0, "max_abs_ref": 0.0, "rel_diff": 0.0, "values": 0, "steps": 0,
             "tokens_differ": 0}
    for prompt, ours in zip(io["inputs"], io["outputs"]):
        ours = np.asarray(ours, dtype=np.float64)
        if len(ours) % (vocab + 1):
            print(json.dumps({"error": f"{len(ours)} outputs are not whole steps of {vocab} logits and a token"}))
            sys.exit(1)
        steps = ours.reshape(-1, vocab + 1)
        cache = {p.name: np.zeros([1, p.shape[1], 0, p.shape[3]], np.float32) for p in past}
        feed = np.asarray(prompt, dtype=np.float64).astype(np.int64) % vocab
        for row in steps:
            res = sess.run(None, {tokens_in: feed.reshape(1, -1), **cache})
            ref = res[0][0, -1].astype(np.float64)
            got = row[:vocab]
            worst["max_abs_diff"] = max(worst["max_abs_diff"], float(np.max(np.abs(ref - got))))
            worst["max_abs_ref"] = max(worst["max_abs_ref"], float(np.max(np.abs(ref))))
            worst["values"] += vocab
            worst["steps"] += 1
            token = int(row[vocab])
            worst["tokens_differ"] += int(int(np.argmax(ref)) != token)
            cache = {p.name: res[1 + j] for j, p in enumerate(past)}
            feed = np.array([token], np.int64)
    worst["rel_diff"] = worst["max_abs_diff"] / max(worst["max_abs_ref"], 1e-30)
    print(json.dumps(worst))


if __name__ == "__main__":
    main()
