#!/usr/bin/env python3
"""Builds the small ONNX fixtures under tests/fixtures/onnx/ with the `onnx` package (random
weights from a fixed numpy seed; each file well under 1 MB), or, with --full, full-size ResNet-50 and
BERT-base built the same way into a directory you name (about 100 and 440 MB; not committed).

  resnet_style.onnx     3x32x32 image: conv+BN+ReLU stem, max pool, two residual blocks (one
                        with a strided 1x1 projection shortcut), global average pool, Flatten,
                        Gemm (transB=1) to 10 classes
  bert_style.onnx       a two-layer BERT-style encoder (hidden 32, 4 heads, FFN 64, vocabulary
                        100) as torch.onnx.export writes Hugging Face's BertModel; input_ids
                        [batch, seq] with seq a named axis (import with --dim seq=16)
  bert_sdpa_style.onnx  the same encoder as PyTorch 2.15's default exporter writes it (see
                        bert_style's sdpa flag)
  gpt2_style.onnx       a two-layer GPT-2-style decoder with a key/value cache (hidden 32, 4
                        heads, vocabulary 97, 128 positions) as torch.onnx.export writes Hugging
                        Face's GPT2LMHeadModel with use_cache: input_ids and past_key_values in,
                        logits and present out
  mobilenet_style.onnx  3x32x32 image: conv+BN+Clip(0,6), three depthwise-separable blocks
                        (depthwise 3x3 + BN + Clip(0,6), pointwise 1x1 + BN + Clip(0,6)), average
                        pool, global average pool, Reshape to [batch, -1], MatMul + Add, Softmax

one-operator models (op_*.onnx: Tanh, Sigmoid, Relu, Gelu exact and tanh at opset 20, the
Erf form of GELU, Identity and Dropout, ReduceMean with and without keepdims, and the shape
operators an exporter writes, folded), and three small files that must be refused
(bad_unknown_ops, bad_missing_initializer, bad_dynamic_shape). Every model has a named batch axis ("batch") and opset 17, as torch.onnx.export writes them.

Usage: scripts/onnx-fixtures.py [--out tests/fixtures/onnx] [--full DIR]
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, base, arr):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(self, op, inputs, base, **attrs):
        out = self.name(base)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1, bias=False):
        fan_in = cin // groups * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // groups, k, k)).astype(np.float32)
        ins = [x, self.init("w", w)]
        if bias:
            ins.append(self.init("b", self.rng.uniform(-0.1, 0.1, cout).astype(np.float32)))
        p = k // 2
        return self.node("Conv", ins, "conv", kernel_shape=[k, k], strides=[stride, stride],
                         pads=[p, p, p, p], group=groups)

    def bn(self, x, c):
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.uniform(-0.1, 0.1, c), r.uniform(-0.1, 0.1, c),
                  r.uniform(0.5, 1.5, c)]
        ins = [x] + [self.init(n, p.astype(np.float32)) for n, p in zip(["gamma", "beta", "mean", "var"], params)]
        return self.node("BatchNormalization", ins, "bn", epsilon=1e-5)

    def relu6(self, x):
        lo, hi = self.init("min", np.float32(0.0)), self.init("max", np.float32(6.0))
        return self.node("Clip", [x, lo, hi], "clip")

    def model(self, name, x_shape, out, out_shape, opset=OPSET):
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch"] + x_shape)
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch"] + out_shape)
        g = helper.make_graph(self.nodes, name, [x], [y], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="lazybatch scripts/onnx-fixtures.py")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def resnet_style():
    b = Builder(1)
    x = b.node("Relu", [b.bn(b.conv("input", 3, 16, 3), 16)], "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    # basic block, identity shortcut
    y = b.node("Relu", [b.bn(b.conv(x, 16, 16, 3), 16)], "relu")
    y = b.bn(b.conv(y, 16, 16, 3), 16)
    x = b.node("Relu", [b.node("Add", [y, x], "add")], "relu")
    # basic block, strided with a 1x1 projection shortcut
    y = b.node("Relu", [b.bn(b.conv(x, 16, 32, 3, stride=2), 32)], "relu")
    y = b.bn(b.conv(y, 32, 32, 3), 32)
    s = b.bn(b.conv(x, 16, 32, 1, stride=2), 32)
    x = b.node("Relu", [b.node("Add", [y, s], "add")], "relu")
    x = b.node("GlobalAveragePool", [x], "gap")
    x = b.node("Flatten", [x], "flatten", axis=1)
    w = b.rng.normal(0, np.sqrt(1 / 32), (10, 32)).astype(np.float32)
    c = b.rng.uniform(-0.1, 0.1, 10).astype(np.float32)
    x = b.node("Gemm", [x, b.init("fc_w", w), b.init("fc_b", c)], "fc", transB=1)
    return b.model("resnet_style", [3, 32, 32], x, [10])


def mobilenet_style():
    b = Builder(2)
    x = b.relu6(b.bn(b.conv("input", 3, 16, 3, stride=2), 16))
    c = 16
    for cout, stride in [(32, 1), (64, 2), (64, 1)]:
        x = b.relu6(b.bn(b.conv(x, c, c, 3, stride=stride, groups=c), c))
        x = b.relu6(b.bn(b.conv(x, c, cout, 1), cout))
        c = cout
    x = b.node("AveragePool", [x], "avgpool", kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("GlobalAveragePool", [x], "gap")
    x = b.node("Reshape", [x, b.init("shape", np.array([-1, c], dtype=np.int64))], "reshape")
    x = b.node("Dropout", [x], "dropout")
    w = b.rng.normal(0, np.sqrt(1 / c), (c, 10)).astype(np.float32)
    x = b.node("MatMul", [x, b.init("fc_w", w)], "fc")
    x = b.node("Add", [x, b.init("fc_b", b.rng.uniform(-0.1, 0.1, 10).astype(np.float32))], "fc_bias")
    x = b.node("Softmax", [x], "softmax", axis=-1)
    return b.model("mobilenet_style", [3, 32, 32], x, [10])


def bert_style(layers=2, d=32, heads=4, ffn=64, vocab=100, max_pos=64, name="bert_style", sdpa=False):
    """A BERT-style encoder as torch.onnx.export writes Hugging Face's BertModel at opset 17:
    word, position and token-type embeddings (the position and token-type ids sliced from
    constant buffers by the shape of input_ids), LayerNormalization, attention built from
    MatMul/Reshape/Transpose/Div/Softmax (one reshape shape computed from Shape/Gather/
    Unsqueeze/Concat), exact GELU through Erf, residual adds. Input: input_ids [batch, seq].

    With sdpa=True, the way PyTorch 2.15's default (dynamo) exporter writes the same model
    through scaled_dot_product_attention: Q and K each scaled by head^-1/4, K transposed through
    a 3-D reshape, an all-true mask built from Range/GreaterOrEqual/Expand/Where and added to
    the scores, Where(IsNaN(p), 0, p) after the softmax, token-type ids from GatherElements and
    Expand, and the GELU as x * (0.5 * (1 + erf(x / sqrt 2)))."""
    b = Builder(6)
    r = b.rng
    dh = d // heads

    def table(rows):
        return b.init("table", r.normal(0, 0.5, (rows, d)).astype(np.float32))

    def ln(x):
        g = b.init("ln_g", r.uniform(0.8, 1.2, d).astype(np.float32))
        beta = b.init("ln_b", r.uniform(-0.1, 0.1, d).astype(np.float32))
        return b.node("LayerNormalization", [x, g, beta], "ln", axis=-1, epsilon=1e-12)

    def linear(x, k, n):
        w = b.init("w", r.normal(0, np.sqrt(1 / k), (k, n)).astype(np.float32))
        bias = b.init("bias", r.uniform(-0.1, 0.1, n).astype(np.float32))
        return b.node("Add", [b.node("MatMul", [x, w], "matmul"), bias], "add")

    shape = b.node("Shape", ["input_ids"], "shape")
    seq = b.node("Gather", [shape, b.init("one", np.array(1, np.int64))], "gather", axis=0)
    batch = b.node("Gather", [shape, b.init("zero", np.array(0, np.int64))], "gather", axis=0)
    seq1 = b.node("Unsqueeze", [seq, b.init("axes", np.array([0], np.int64))], "unsqueeze")
    batch1 = b.node("Unsqueeze", [batch, b.init("axes", np.array([0], np.int64))], "unsqueeze")

    def sliced(buffer):
        return b.node("Slice", [buffer, b.init("starts", np.array([0], np.int64)), seq1,
                                b.init("axes", np.array([1], np.int64))], "slice")

    pos_ids = sliced(b.init("position_ids", np.arange(max_pos, dtype=np.int64)[None, :]))
    if sdpa:
        t = b.node("GatherElements", [b.init("token_type_buffer", np.zeros((1, max_pos), np.int64)), pos_ids],
                   "gather_elements", axis=1)
        type_ids = b.node("Expand", [t, b.node("Concat", [batch1, seq1], "concat", axis=0)], "expand")
    else:
        type_ids = sliced(b.init("token_type_ids", np.zeros((1, max_pos), np.int64)))
    x = b.node("Gather", [table(vocab), "input_ids"], "word_embeddings")
    x = b.node("Add", [x, b.node("Gather", [table(2), type_ids], "token_type_embeddings")], "add")
    x = b.node("Add", [x, b.node("Gather", [table(max_pos), pos_ids], "position_embeddings")], "add")
    x = ln(x)
    heads_shape = b.node("Concat", [batch1, seq1, b.init("hd", np.array([heads, dh], np.int64))],
                         "concat", axis=0)
    fixed_shape = b.init("hd_shape", np.array([0, 0, heads, dh], np.int64))
    if sdpa:
        # an all-true mask [batch, 1, 1, seq] from the sequence length, as 0 / -inf
        ar = b.node("Range", [b.init("r0", np.array(0, np.int64)), seq, b.init("r1", np.array(1, np.int64))], "range")
        ar = b.node("Unsqueeze", [ar, b.init("axes", np.array([0, 1, 2], np.int64))], "unsqueeze")
        ge = b.node("GreaterOrEqual", [ar, b.init("r0", np.array(0, np.int64))], "ge")
        ones = b.init("one_i", np.array([1, 1], np.int64))
        ge = b.node("Expand", [ge, b.node("Concat", [batch1, ones, seq1], "concat", axis=0)], "expand")
        mask = b.node("Where", [ge, b.init("zero_f", np.array(0.0, np.float32)),
                                b.init("neg_inf", np.array(-3.4028235e38, np.float32))], "where")
        quarter = b.init("scale", np.array(dh ** -0.25, np.float32))
    for _ in range(layers):
        q = b.node("Reshape", [linear(x, d, d), heads_shape], "reshape")
        k = b.node("Reshape", [linear(x, d, d), fixed_shape], "reshape")
        v = b.node("Reshape", [linear(x, d, d), fixed_shape], "reshape")
        q = b.node("Transpose", [q], "transpose", perm=[0, 2, 1, 3])
        v = b.node("Transpose", [v], "transpose", perm=[0, 2, 1, 3])
        if sdpa:
            k = b.node("Transpose", [k], "transpose", perm=[0, 2, 1, 3])
            kshape = b.node("Shape", [k], "shape")
            last = b.node("Slice", [kshape, b.init("m1", np.array([-1], np.int64)),
                                    b.init("max", np.array([2**63 - 1], np.int64))], "slice")
            rows = b.node("Slice", [kshape, b.init("m2", np.array([-2], np.int64)),
                                    b.init("m1", np.array([-1], np.int64))], "slice")
            lead = b.node("Slice", [kshape, b.init("min", np.array([-2**63], np.int64)),
                                    b.init("m2", np.array([-2], np.int64))], "slice")
            k = b.node("Reshape", [k, b.node("Concat", [b.init("m1", np.array([-1], np.int64)), rows, last],
                                             "concat", axis=0)], "reshape")
            k = b.node("Transpose", [k], "transpose", perm=[0, 2, 1])
            k = b.node("Reshape", [k, b.node("Concat", [lead, last, rows], "concat", axis=0)], "reshape")
            q = b.node("Mul", [q, quarter], "mul")
            k = b.node("Mul", [k, quarter], "mul")
            s = b.node("Add", [b.node("MatMul", [q, k], "scores"), mask], "add")
            p = b.node("Softmax", [s], "softmax", axis=-1)
            p = b.node("Where", [b.node("IsNaN", [p], "isnan"), b.init("zero_f", np.array(0.0, np.float32)), p],
                       "where")
        else:
            k = b.node("Transpose", [k], "transpose", perm=[0, 2, 3, 1])
            s = b.node("MatMul", [q, k], "scores")
            s = b.node("Div", [s, b.init("sqrt_dh", np.array(np.sqrt(dh), np.float32))], "div")
            p = b.node("Softmax", [s], "softmax", axis=-1)
        c = b.node("MatMul", [p, v], "context")
        c = b.node("Transpose", [c], "transpose", perm=[0, 2, 1, 3])
        c = b.node("Reshape", [c, b.init("d_shape", np.array([0, 0, d], np.int64))], "reshape")
        x = ln(b.node("Add", [linear(c, d, d), x], "residual"))
        h = linear(x, d, ffn)
        e = b.node("Erf", [b.node("Div", [h, b.init("sqrt2", np.array(1.4142135, np.float32))], "div")], "erf")
        e = b.node("Add", [e, b.init("one_f", np.array(1.0, np.float32))], "add")
        if sdpa:
            h = b.node("Mul", [h, b.node("Mul", [b.init("half", np.array(0.5, np.float32)), e], "mul")], "mul")
        else:
            h = b.node("Mul", [b.node("Mul", [h, e], "mul"), b.init("half", np.array(0.5, np.float32))], "mul")
        x = ln(b.node("Add", [linear(h, ffn, d), x], "residual"))
    xi = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", d])
    g = helper.make_graph(b.nodes, name, [xi], [y], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="lazybatch scripts/onnx-fixtures.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def resnet50():
    """Full-size ResNet-50 v1.5 (torchvision's layout: stride on the 3x3 of each bottleneck)."""
    b = Builder(50)
    x = b.node("Relu", [b.bn(b.conv("input", 3, 64, 7, stride=2), 64)], "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.node("Relu", [b.bn(b.conv(x, cin, width, 1), width)], "relu")
            y = b.node("Relu", [b.bn(b.conv(y, width, width, 3, stride=s), width)], "relu")
            y = b.bn(b.conv(y, width, width * 4, 1), width * 4)
            sc = x if i > 0 else b.bn(b.conv(x, cin, width * 4, 1, stride=s), width * 4)
            x = b.node("Relu", [b.node("Add", [y, sc], "add")], "relu")
            cin = width * 4
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    w = b.rng.normal(0, np.sqrt(1 / 2048), (1000, 2048)).astype(np.float32)
    x = b.node("Gemm", [x, b.init("fc_w", w), b.init("fc_b", np.zeros(1000, np.float32))], "fc", transB=1)
    return b.model("resnet50", [3, 224, 224], x, [1000])


def bad_fixtures():
    """Tiny files that must be refused with a clear error (tests/it/onnx.rs)."""
    out = {}
    # operators we do not translate, two kinds, one of them twice
    b = Builder(3)
    x = b.node("Relu", ["input"], "relu")
    x = b.node("Resize", [x, "", b.init("scales", np.array([1, 1, 2, 2], np.float32))], "resize")
    x = b.node("Floor", [x], "floor")
    x = b.node("Floor", [x], "floor")
    out["bad_unknown_ops"] = b.model("bad_unknown_ops", [3, 8, 8], x, [3, 16, 16])
    # a convolution whose weight is neither an initializer nor computed
    b = Builder(4)
    x = b.node("Conv", ["input", "missing_weight"], "conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g = helper.make_graph(b.nodes, "bad_missing_initializer",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 4, 8, 8])], [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    out["bad_missing_initializer"] = m  # onnx.checker rejects it too: not checked here
    # an image whose height is a named axis
    b = Builder(5)
    x = b.node("Relu", ["input"], "relu")
    xv = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, "height", 8])
    yv = helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 3, "height", 8])
    m = helper.make_model(helper.make_graph(b.nodes, "bad_dynamic_shape", [xv], [yv], []),
                          opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    out["bad_dynamic_shape"] = m
    return out


def op_fixtures():
    """One small model per operator the importer translates that no other fixture exercises
    (tests/it/onnx.rs checks each against onnxruntime): input [batch, 16], a Gemm, the operator
    (or the shape arithmetic that holds it), a Gemm to 8 outputs; ReduceMean on a 3x8x8 image.
    Sub is translated between constants only (folded), so it sits in the shape arithmetic."""
    out = {}

    def mlp(name, middle, opset=OPSET):
        b = Builder(11)
        w1 = b.init("w", b.rng.normal(0, 0.5, (16, 16)).astype(np.float32))
        x = b.node("Gemm", ["input", w1, b.init("b", b.rng.uniform(-0.5, 0.5, 16).astype(np.float32))],
                   "gemm", transB=1)
        x = middle(b, x)
        w2 = b.init("w", b.rng.normal(0, 0.5, (8, 16)).astype(np.float32))
        y = b.node("Gemm", [x, w2, b.init("b", np.zeros(8, np.float32))], "gemm", transB=1)
        return b.model(name, [16], y, [8], opset)

    out["op_tanh"] = mlp("op_tanh", lambda b, x: b.node("Tanh", [x], "tanh"))
    out["op_sigmoid"] = mlp("op_sigmoid", lambda b, x: b.node("Sigmoid", [x], "sigmoid"))
    out["op_relu"] = mlp("op_relu", lambda b, x: b.node("Relu", [x], "relu"))
    out["op_gelu"] = mlp("op_gelu", lambda b, x: b.node("Gelu", [x], "gelu"), opset=20)
    out["op_gelu_tanh"] = mlp("op_gelu_tanh", lambda b, x: b.node("Gelu", [x], "gelu", approximate="tanh"),
                              opset=20)

    def erf_gelu(b, x):
        # GELU as torch.onnx.export writes it before opset 20: x * 0.5 * (1 + Erf(x / sqrt 2))
        e = b.node("Erf", [b.node("Div", [x, b.init("sqrt2", np.float32(np.sqrt(2.0)))], "div")], "erf")
        one = b.node("Add", [e, b.init("one", np.float32(1.0))], "add")
        return b.node("Mul", [b.node("Mul", [x, one], "mul"), b.init("half", np.float32(0.5))], "mul")

    out["op_erf"] = mlp("op_erf", erf_gelu)

    def identity_dropout(b, x):
        return b.node("Dropout", [b.node("Identity", [x], "identity")], "dropout")

    out["op_identity"] = mlp("op_identity", identity_dropout)

    def image(name, keepdims):
        # ReduceMean over an image's H and W (a global average pool as exporters write it)
        b = Builder(12)
        x = b.conv("input", 3, 8, 3, bias=True)
        x = b.node("Sigmoid", [x], "sigmoid")
        x = b.node("ReduceMean", [x], "reducemean", axes=[2, 3], keepdims=keepdims)
        if keepdims:
            x = b.node("Flatten", [x], "flatten", axis=1)
        w = b.init("w", b.rng.normal(0, 0.5, (4, 8)).astype(np.float32))
        y = b.node("Gemm", [x, w, b.init("b", np.zeros(4, np.float32))], "gemm", transB=1)
        return b.model(name, [3, 8, 8], y, [4])

    out["op_reduce_mean"] = image("op_reduce_mean", 0)
    out["op_reduce_mean_keepdims"] = image("op_reduce_mean_keepdims", 1)

    def shape_arithmetic(b, x):
        # [batch, 16] reshaped to [batch, 16] through the shape operators an exporter writes:
        # Shape, Gather, Unsqueeze, Squeeze, Cast, Constant, Sub, the comparisons, Where, Concat
        shp = b.node("Shape", [x], "shape")
        n = b.node("Gather", [shp, b.init("zero", np.array(0, np.int64))], "gather", axis=0)
        n = b.node("Squeeze", [b.node("Unsqueeze", [n, b.init("axes", np.array([0], np.int64))], "unsqueeze"),
                               b.init("axes", np.array([0], np.int64))], "squeeze")
        f = b.node("Cast", [b.node("Cast", [n], "cast", to=TensorProto.FLOAT)], "cast", to=TensorProto.INT64)
        cols = b.node("Constant", [], "const", value=numpy_helper.from_array(np.array([20], np.int64)))
        cols = b.node("Sub", [cols, b.init("four", np.array([4], np.int64))], "sub")
        big = b.node("Greater", [cols, b.init("eight", np.array([8], np.int64))], "greater")
        ok = b.node("Equal", [cols, b.init("sixteen", np.array([16], np.int64))], "equal")
        for op in ["GreaterOrEqual", "Less", "LessOrEqual"]:
            t = b.node(op, [cols, b.init("c", np.array([16], np.int64))], op.lower())
            cols = b.node("Where", [t, cols, cols], "where")
        cols = b.node("Where", [big, cols, b.init("minus1", np.array([-1], np.int64))], "where")
        cols = b.node("Where", [ok, cols, b.init("minus1", np.array([-1], np.int64))], "where")
        target = b.node("Concat", [b.node("Unsqueeze", [f, b.init("axes", np.array([0], np.int64))], "unsqueeze"),
                                   cols], "concat", axis=0)
        return b.node("Reshape", [x, target], "reshape")

    out["op_shape_arithmetic"] = mlp("op_shape_arithmetic", shape_arithmetic)
    return out


def gpt2_style(layers=2, d=32, heads=4, vocab=97, n_pos=128, name="gpt2_style"):
    """A GPT-2-style decoder with a key/value cache as torch.onnx.export writes Hugging Face's
    GPT2LMHeadModel(use_cache=True) at opset 17 (eager attention, the TorchScript exporter,
    constant folding on): inputs input_ids [batch, seq] and past_key_values.{i}.key/value
    [batch, heads, past, head]; outputs logits [batch, seq, vocab] and present.{i}.key/value.
    Positions are Range(past, past + seq) from the shapes; each Conv1D is Reshape to 2-D, Gemm,
    Reshape back; Q|K|V one Gemm Split in three, each Reshaped to heads and Transposed, K and V
    concatenated onto the past (the present outputs); the scores divided by sqrt(head) and
    masked by Where with a lower-triangular buffer Sliced by the key and query lengths; the tanh
    GELU spelled out; lm_head tied to wte (folded: its own initializer, wte transposed)."""
    b = Builder(11)
    r = b.rng
    dh = d // heads
    i64 = lambda *v: np.array(v, np.int64)

    def ln(x):
        g = b.init("ln_g", r.uniform(0.8, 1.2, d).astype(np.float32))
        beta = b.init("ln_b", r.uniform(-0.1, 0.1, d).astype(np.float32))
        return b.node("LayerNormalization", [x, g, beta], "ln", axis=-1, epsilon=1e-5)

    shape = b.node("Shape", ["input_ids"], "shape")
    batch = b.node("Gather", [shape, b.init("zero", np.array(0, np.int64))], "gather", axis=0)
    seq = b.node("Gather", [shape, b.init("one", np.array(1, np.int64))], "gather", axis=0)
    batch1 = b.node("Unsqueeze", [batch, b.init("axes", i64(0))], "unsqueeze")
    seq1 = b.node("Unsqueeze", [seq, b.init("axes", i64(0))], "unsqueeze")

    def conv1d(x, k, n):
        """Hugging Face's Conv1D: x.view(-1, k) @ W + b, viewed back to [batch, seq, n]."""
        w = b.init("w", r.normal(0, np.sqrt(1 / k), (k, n)).astype(np.float32))
        bias = b.init("bias", r.uniform(-0.1, 0.1, n).astype(np.float32))
        x2 = b.node("Reshape", [x, b.init("flat", i64(-1, k))], "reshape")
        y = b.node("Gemm", [x2, w, bias], "gemm", alpha=1.0, beta=1.0)
        out = b.node("Concat", [batch1, seq1, b.init("n", i64(n))], "concat", axis=0)
        return b.node("Reshape", [y, out], "reshape")

    past = [(f"past_key_values.{i}.key", f"past_key_values.{i}.value") for i in range(layers)]
    past_len = b.node("Gather", [b.node("Shape", [past[0][0]], "shape"), b.init("two", np.array(2, np.int64))],
                      "gather", axis=0)
    end = b.node("Add", [seq, past_len], "add")
    pos = b.node("Range", [past_len, end, b.init("step", np.array(1, np.int64))], "range")
    pos = b.node("Unsqueeze", [pos, b.init("axes", i64(0))], "unsqueeze")
    wte_np = r.normal(0, 0.5, (vocab, d)).astype(np.float32)
    wte = b.init("wte", wte_np)
    x = b.node("Gather", [wte, "input_ids"], "wte")
    x = b.node("Add", [x, b.node("Gather", [b.init("wpe", r.normal(0, 0.1, (n_pos, d)).astype(np.float32)), pos],
                                 "wpe")], "add")
    bias_buf = b.init("attn_bias", np.tril(np.ones((n_pos, n_pos), bool))[None, None])
    heads_shape = b.node("Concat", [batch1, seq1, b.init("hd", i64(heads, dh))], "concat", axis=0)
    presents = []
    for i in range(layers):
        h = ln(x)
        qkv = conv1d(h, d, 3 * d)
        q, k, v = [f"split_{i}_{j}" for j in range(3)]
        b.nodes.append(helper.make_node("Split", [qkv, b.init("split", i64(d, d, d))], [q, k, v],
                                        name=f"split_{i}", axis=2))

        def heads_of(t):
            return b.node("Transpose", [b.node("Reshape", [t, heads_shape], "reshape")], "transpose",
                          perm=[0, 2, 1, 3])

        q, k, v = heads_of(q), heads_of(k), heads_of(v)
        for kv, t in (("key", k), ("value", v)):
            b.nodes.append(helper.make_node("Concat", [past[i][kv == "value"], t], [f"present.{i}.{kv}"],
                                            name=f"concat_present_{i}_{kv}", axis=-2))
        k, v = f"present.{i}.key", f"present.{i}.value"
        presents += [k, v]
        s = b.node("MatMul", [q, b.node("Transpose", [k], "transpose", perm=[0, 1, 3, 2])], "matmul")
        s = b.node("Div", [s, b.init("sqrt_dh", np.array(np.sqrt(dh), np.float32))], "div")
        q_len = b.node("Gather", [b.node("Shape", [q], "shape"), b.init("two", np.array(2, np.int64))],
                       "gather", axis=0)
        k_len = b.node("Gather", [b.node("Shape", [k], "shape"), b.init("two", np.array(2, np.int64))],
                       "gather", axis=0)
        start = b.node("Unsqueeze", [b.node("Sub", [k_len, q_len], "sub"), b.init("axes", i64(0))], "unsqueeze")
        k_len1 = b.node("Unsqueeze", [k_len, b.init("axes", i64(0))], "unsqueeze")
        mask = b.node("Slice", [bias_buf, start, k_len1, b.init("axes", i64(2))], "slice")
        mask = b.node("Slice", [mask, b.init("zero1", i64(0)), k_len1, b.init("axes", i64(3))], "slice")
        s = b.node("Where", [mask, s, b.init("mask_value", np.array(np.finfo(np.float32).min, np.float32))],
                   "where")
        p = b.node("Softmax", [s], "softmax", axis=-1)
        c = b.node("Transpose", [b.node("MatMul", [p, v], "matmul")], "transpose", perm=[0, 2, 1, 3])
        c = b.node("Reshape", [c, b.node("Concat", [batch1, seq1, b.init("d", i64(d))], "concat", axis=0)],
                   "reshape")
        x = b.node("Add", [conv1d(c, d, d), x], "add")
        h = conv1d(ln(x), d, 4 * d)
        # gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))
        cube = b.node("Pow", [h, b.init("three", np.array(3.0, np.float32))], "pow")
        inner = b.node("Add", [h, b.node("Mul", [b.init("c", np.array(0.044715, np.float32)), cube], "mul")], "add")
        t = b.node("Tanh", [b.node("Mul", [b.init("s", np.array(np.sqrt(2 / np.pi), np.float32)), inner], "mul")],
                   "tanh")
        g = b.node("Mul", [b.node("Mul", [b.init("half", np.array(0.5, np.float32)), h], "mul"),
                           b.node("Add", [b.init("one_f", np.array(1.0, np.float32)), t], "add")], "mul")
        x = b.node("Add", [x, conv1d(g, 4 * d, d)], "add")
    x = ln(x)
    logits = "logits"
    b.nodes.append(helper.make_node("MatMul", [x, b.init("lm_head", np.ascontiguousarray(wte_np.T))], [logits],
                                    name="lm_head"))
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    for pk, pv in past:
        for t in (pk, pv):
            ins.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, ["batch", heads, "past_seq", dh]))
    outs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "seq", vocab])]
    for j, t in enumerate(presents):
        outs.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, ["batch", heads, "total_seq", dh]))
    g = helper.make_graph(b.nodes, name, ins, outs, b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="lazybatch scripts/onnx-fixtures.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/onnx")
    ap.add_argument("--full", help="write full-size resnet50.onnx into this directory instead")
    a = ap.parse_args()
    if a.full:
        os.makedirs(a.full, exist_ok=True)
        onnx.save(resnet50(), os.path.join(a.full, "resnet50.onnx"))
        bert = bert_style(layers=12, d=768, heads=12, ffn=3072, vocab=30522, max_pos=512, name="bert_base")
        onnx.save(bert, os.path.join(a.full, "bert_base.onnx"))
        return
    os.makedirs(a.out, exist_ok=True)
    models = {f.__name__: f() for f in [resnet_style, mobilenet_style, bert_style]}
    models["bert_sdpa_style"] = bert_style(name="bert_sdpa_style", sdpa=True)
    models["gpt2_style"] = gpt2_style()
    models.update(bad_fixtures())
    models.update(op_fixtures())
    for name, m in models.items():
        path = os.path.join(a.out, name + ".onnx")
        onnx.save(m, path)
        print(f"{path}: {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
