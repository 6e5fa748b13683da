#!/usr/bin/env python3
"""The CPU device against onnxruntime, side by side in one run.

Builds the zoo's architectures as ONNX graphs with the `onnx` package (random weights, the
same layer sizes as models/*.toml: ResNet-50 v1.5, MobileNet-v1, VGG-16, BERT-base at S = 128,
one decoder step of GNMT and of the Transformer), times onnxruntime's CPU execution provider
and lazybatch's CPU device (through `cargo bench --bench cpu -- whole|step MODEL BATCH ROUNDS`)
in interleaved rounds at the same thread count, and prints one table of medians.

Usage: scripts/bench-vs-onnxruntime.sh [--threads 1,2] [--rounds 3] [--only resnet50,...]
(the shell script builds the bench binary and passes it as --ours).
"""

import argparse
import math
import os
import platform
import statistics
import subprocess
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 20


class Graph:
    """A small builder over onnx.helper: named nodes, random initializers, fixed shapes."""

    def __init__(self, name, seed=1):
        self.name = name
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.rng = np.random.default_rng(seed)
        self.k = 0

    def fresh(self, base):
        self.k += 1
        return f"{base}_{self.k}"

    def op(self, kind, inputs, **attrs):
        out = self.fresh(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def weight(self, shape, fan_in):
        name = self.fresh("w")
        a = self.rng.uniform(-1, 1, size=shape).astype(np.float32) * np.float32(
            np.sqrt(3.0 / max(fan_in, 1))
        )
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def const(self, value, dtype=np.int64):
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def input(self, name, shape, dtype=TensorProto.FLOAT, value=None):
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        if value is None:
            np_t = np.float32 if dtype == TensorProto.FLOAT else np.int64
            value = (
                self.rng.standard_normal(shape).astype(np_t)
                if np_t == np.float32
                else np.zeros(shape, dtype=np_t)
            )
        self.feeds[name] = value
        return name

    # -- layers ------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, pad=0, groups=1, act="relu"):
        w = self.weight([cout, cin // groups, k, k], cin // groups * k * k)
        b = self.weight([cout], 1)
        y = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[pad] * 4, group=groups)
        return self.act(y, act)

    def act(self, y, act):
        if act == "relu":
            return self.op("Relu", [y])
        if act == "relu6":
            return self.op("Clip", [y, self.const(0.0, np.float32), self.const(6.0, np.float32)])
        if act == "gelu":
            return self.op("Gelu", [y], approximate="tanh")
        if act == "tanh":
            return self.op("Tanh", [y])
        return y

    def linear(self, x, k, n, act=None, bias=True):
        y = self.op("MatMul", [x, self.weight([k, n], k)])
        if bias:
            y = self.op("Add", [y, self.weight([n], 1)])
        return self.act(y, act)

    def layernorm(self, x, d):
        g = self.const(np.ones(d), np.float32)
        b = self.const(np.zeros(d), np.float32)
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def model(self, out, dtype=TensorProto.FLOAT):
        g = helper.make_graph(
            self.nodes, self.name, self.inputs,
            [helper.make_tensor_value_info(out, dtype, None)], self.inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 10
        return m


def resnet50(b):
    g = Graph("resnet50")
    x = g.input("image", [b, 3, 224, 224])
    x = g.conv(x, 3, 64, 7, 2, 3)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = g.conv(x, cin, width, 1)
            y = g.conv(y, width, width, 3, s, 1)  # v1.5: the stride on the 3x3
            y = g.conv(y, width, width * 4, 1, act=None)
            sc = g.conv(x, cin, width * 4, 1, s, act=None) if i == 0 else x
            x = g.op("Relu", [g.op("Add", [y, sc])])
            cin = width * 4
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.model(g.linear(x, 2048, 1000)), g.feeds


def mobilenet(b):
    g = Graph("mobilenet_v1")
    x = g.conv(g.input("image", [b, 3, 224, 224]), 3, 32, 3, 2, 1, act="relu6")
    cin = 32
    for cout, s in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [
        (1024, 2), (1024, 1)
    ]:
        x = g.conv(x, cin, cin, 3, s, 1, groups=cin, act="relu6")
        x = g.conv(x, cin, cout, 1, act="relu6")
        cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.model(g.linear(x, 1024, 1000)), g.feeds


def vgg16(b):
    g = Graph("vgg16")
    x = g.input("image", [b, 3, 224, 224])
    cin = 3
    for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]:
        if v == "M":
            x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        else:
            x = g.conv(x, cin, v, 3, 1, 1)
            cin = v
    x = g.op("Flatten", [x])
    x = g.linear(x, 25088, 4096, "relu")
    x = g.linear(x, 4096, 4096, "relu")
    return g.model(g.linear(x, 4096, 1000)), g.feeds


def heads_of(g, x, b, s, h, dh):
    """[b, s, h*dh] -> [b, h, s, dh]."""
    return g.op("Transpose", [g.op("Reshape", [x, g.const([b, s, h, dh])])], perm=[0, 2, 1, 3])


def merge_heads(g, x, b, s, d):
    return g.op("Reshape", [g.op("Transpose", [x], perm=[0, 2, 1, 3]), g.const([b, s, d])])


def attend(g, q, k, v, dh):
    """softmax(q·kᵀ / √dh)·v over [b, h, s, dh] tensors."""
    s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.op("Mul", [s, g.const(1.0 / np.sqrt(dh), np.float32)])
    return g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])


def bert(b, seq=128, d=768, h=12, layers=12):
    g = Graph("bert_base")
    ids = g.input("tokens", [b, seq], TensorProto.INT64)
    x = g.op("Gather", [g.weight([30522, d], 1), ids])
    x = g.op("Add", [x, g.weight([seq, d], 1)])  # learned positions
    x = g.op("Add", [x, g.weight([d], 1)])  # token type 0
    x = g.layernorm(x, d)
    for _ in range(layers):
        qkv = g.linear(x, d, 3 * d)
        q, k, v = (g.op("Slice", [qkv, g.const([i * d]), g.const([(i + 1) * d]), g.const([2])])
                   for i in range(3))
        a = attend(g, heads_of(g, q, b, seq, h, d // h), heads_of(g, k, b, seq, h, d // h),
                   heads_of(g, v, b, seq, h, d // h), d // h)
        a = g.linear(merge_heads(g, a, b, seq, d), d, d)
        x = g.layernorm(g.op("Add", [a, x]), d)
        f = g.linear(g.linear(x, d, 3072, "gelu"), 3072, d)
        x = g.layernorm(g.op("Add", [f, x]), d)
    first = g.op("Gather", [x, g.const(0)], axis=1)
    return g.model(g.linear(first, d, d, "tanh")), g.feeds


def transformer_step(b, past=15, src=30, d=512, h=8, layers=6, vocab=33708):
    """One decoder step: the token in, past keys/values and the encoder's keys/values given."""
    g = Graph("transformer_step")
    table = g.weight([vocab, d], 1)
    ids = g.input("token", [b], TensorProto.INT64)
    x = g.op("Mul", [g.op("Gather", [table, ids]), g.const(np.sqrt(d), np.float32)])
    x = g.op("Add", [x, g.weight([d], 1)])  # the step's sinusoid
    dh = d // h
    for l in range(layers):
        y = g.layernorm(x, d)
        qkv = g.linear(y, d, 3 * d, bias=False)
        q, k, v = (g.op("Slice", [qkv, g.const([i * d]), g.const([(i + 1) * d]), g.const([1])])
                   for i in range(3))
        keys = g.op("Concat", [g.input(f"past_k{l}", [b, past, d]),
                               g.op("Reshape", [k, g.const([b, 1, d])])], axis=1)
        vals = g.op("Concat", [g.input(f"past_v{l}", [b, past, d]),
                               g.op("Reshape", [v, g.const([b, 1, d])])], axis=1)
        qh = heads_of(g, g.op("Reshape", [q, g.const([b, 1, d])]), b, 1, h, dh)
        a = attend(g, qh, heads_of(g, keys, b, past + 1, h, dh), heads_of(g, vals, b, past + 1, h, dh), dh)
        a = g.linear(g.op("Reshape", [merge_heads(g, a, b, 1, d), g.const([b, d])]), d, d, bias=False)
        x = g.op("Add", [a, x])
        y = g.layernorm(x, d)
        q = g.op("Reshape", [g.linear(y, d, d, bias=False), g.const([b, 1, d])])
        ck = heads_of(g, g.input(f"cross_k{l}", [b, src, d]), b, src, h, dh)
        cv = heads_of(g, g.input(f"cross_v{l}", [b, src, d]), b, src, h, dh)
        a = attend(g, heads_of(g, q, b, 1, h, dh), ck, cv, dh)
        a = g.linear(g.op("Reshape", [merge_heads(g, a, b, 1, d), g.const([b, d])]), d, d, bias=False)
        x = g.op("Add", [a, x])
        y = g.layernorm(x, d)
        x = g.op("Add", [g.linear(g.linear(y, d, 2048, "relu"), 2048, d), x])
    x = g.layernorm(x, d)
    logits = g.op("Gemm", [x, table], transB=1)  # the tied table, read transposed
    return g.model(g.op("ArgMax", [logits], axis=1), TensorProto.INT64), g.feeds


def gnmt_step(b, src=30, hdim=1024, vocab=36548):
    """One decoder step: 4 LSTM layers fed the attention context, additive attention."""
    g = Graph("gnmt_step")
    ids = g.input("token", [b], TensorProto.INT64)
    emb = g.op("Gather", [g.weight([vocab, hdim], 1), ids])
    ctx_prev = g.input("attn_prev", [b, hdim])
    keys = g.input("memory", [b, src, hdim])
    values = g.input("enc", [b, src, hdim])

    def lstm(xs, l):
        x = g.op("Concat", xs + [g.input(f"h{l}", [b, hdim])], axis=1)
        k = hdim * (len(xs) + 1)
        gates = g.linear(x, k, 4 * hdim)
        i, f, c_in, o = (g.op("Slice", [gates, g.const([j * hdim]), g.const([(j + 1) * hdim]),
                                        g.const([1])]) for j in range(4))
        c = g.op("Add", [g.op("Mul", [g.op("Sigmoid", [f]), g.input(f"c{l}", [b, hdim])]),
                         g.op("Mul", [g.op("Sigmoid", [i]), g.op("Tanh", [c_in])])])
        return g.op("Mul", [g.op("Sigmoid", [o]), g.op("Tanh", [c])])

    h0 = lstm([emb, ctx_prev], 0)
    q = g.op("Reshape", [g.linear(h0, hdim, hdim, bias=False), g.const([b, 1, hdim])])
    e = g.op("Tanh", [g.op("Add", [g.op("Add", [keys, q]), g.weight([hdim], 1)])])
    scores = g.op("Reshape", [g.op("MatMul", [e, g.weight([hdim, 1], hdim)]), g.const([b, 1, src])])
    p = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Reshape", [g.op("MatMul", [p, values]), g.const([b, hdim])])
    h1 = lstm([h0, ctx], 1)
    h2 = lstm([h1, ctx], 2)
    r2 = g.op("Add", [h2, h1])
    h3 = lstm([r2, ctx], 3)
    r3 = g.op("Add", [h3, r2])
    return g.model(g.op("ArgMax", [g.linear(r3, hdim, vocab)], axis=1), TensorProto.INT64), g.feeds


# (label, our model name, mode, batch, builder)
CASES = [
    ("ResNet-50", "resnet50", "whole", 1, resnet50),
    ("ResNet-50", "resnet50", "whole", 16, resnet50),
    ("MobileNet-v1", "mobilenet", "whole", 1, mobilenet),
    ("MobileNet-v1", "mobilenet", "whole", 16, mobilenet),
    ("VGG-16", "vgg16", "whole", 1, vgg16),
    ("VGG-16", "vgg16", "whole", 16, vgg16),
    ("BERT-base S=128", "bert", "whole", 1, bert),
    ("BERT-base S=128", "bert", "whole", 8, bert),
    ("Transformer decoder step", "transformer", "step", 1, transformer_step),
    ("Transformer decoder step", "transformer", "step", 64, transformer_step),
    ("GNMT decoder step", "gnmt", "step", 1, gnmt_step),
    ("GNMT decoder step", "gnmt", "step", 64, gnmt_step),
]


def ort_ms(session, feeds, reps):
    session.run(None, feeds)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def ours_ms(binary, model, mode, batch, reps, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run([binary, mode, model, str(batch), str(reps)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="the cpu bench binary")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="timed passes per round and side (at least)")
    ap.add_argument("--min-round-ms", type=float, default=300.0,
                    help="more passes per round for fast models, both sides the same number, so "
                         "that a round times at least this long (one slow pass then moves the "
                         "median of many, not of two)")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"{time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores; onnxruntime "
          f"{ort.__version__} (CPU execution provider); medians of {a.rounds} interleaved rounds "
          f"of {a.reps} passes or more (at least {a.min_round_ms:.0f} ms a round, both sides the "
          f"same number; ms per batch)")
    print(f"| model | batch | threads | lazybatch | onnxruntime | ratio | paired ratios: median [range] |")
    print(f"|---|---|---|---|---|---|---|")
    for threads in [int(t) for t in a.threads.split(",")]:
        for label, model, mode, batch, build in CASES:
            if only and model not in only:
                continue
            m, feeds = build(batch)
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            ours, theirs = [], []
            # passes per round: enough for `--min-round-ms` at onnxruntime's speed
            reps = max(a.reps, math.ceil(a.min_round_ms / max(ort_ms(sess, feeds, 1), 1e-3)))
            for _ in range(a.rounds):
                ours.append(ours_ms(a.ours, model, mode, batch, reps, threads))
                theirs.append(ort_ms(sess, feeds, reps))
            o, t = statistics.median(ours), statistics.median(theirs)
            # each round's two sides ran seconds apart: their ratio, round by round, shows how
            # far the machine's speed wandered between rounds
            paired = sorted(a / b for a, b in zip(ours, theirs))
            spread = f"{statistics.median(paired):.2f}× [{paired[0]:.2f}–{paired[-1]:.2f}]"
            print(f"| {label} | {batch} | {threads} | {o:.2f} | {t:.2f} | {o / t:.2f}× | {spread} |",
                  flush=True)


if __name__ == "__main__":
    main()
