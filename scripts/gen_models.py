#!/usr/bin/env python3
"""Generate the model files in models/ (format: docs/model-format.md): the paper's seven and
the decoder-only GPT-2 small and medium.

    python3 scripts/gen_models.py            # write models/*.toml and check them
    python3 scripts/gen_models.py --check    # check only, write nothing
    python3 scripts/gen_models.py --out DIR  # write somewhere else

Besides writing the TOML files, this script re-derives every model's parameter
count from the node list it emits, with the formulas of the op table in
docs/model-format.md, using its own small shape tracker (feature widths per
node, rows per request, the div ratio of encoder loops).  It also counts the
weight-GEMM MACs (conv: Ho*Wo*Cout*(Cin/groups)*kh*kw, linear: K*N per row,
LSTM: 4*H*(K+H) per step).  It prints a table against the reference figures in
shared/reference/models.md and exits with status 1 if anything differs.

Python 3 standard library only.
"""

import argparse
import math
import os
import sys

# --------------------------------------------------------------------------
# Op field order and defaults (docs/model-format.md, "Ops").
# A field is written when it differs from its default, or when it is listed in
# ALWAYS (the field that says what the node is, e.g. a pool's kind).
# --------------------------------------------------------------------------

OPS = {
    "input": [("shape", None), ("seq", None), ("tokens", False)],
    "conv2d": [("out_channels", None), ("kernel", None), ("stride", 1), ("padding", 0),
               ("groups", 1), ("bias", False), ("bn", False), ("act", "none")],
    "pool": [("kind", "max"), ("kernel", None), ("stride", None), ("padding", 0)],
    "flatten": [],
    "linear": [("out_features", None), ("bias", False), ("act", "none"), ("tied", None)],
    "add": [("act", "none")],
    "concat": [],
    "act": [("kind", None)],
    "batchnorm": [],
    "layernorm": [],
    "softmax": [],
    "embedding": [("vocab", None), ("dim", None), ("scale", False), ("positional", "none"),
                  ("positions", 0), ("token_types", 0), ("tied", None), ("after_src", False)],
    "lstm": [("hidden", None), ("reverse", False)],
    "attention": [("mode", "additive"), ("heads", 1)],
    "argmax": [],
    "take": [("row", 0)],
}
ALWAYS = {("input", "shape"), ("input", "seq"), ("pool", "kind"), ("attention", "mode"),
          ("take", "row")}
ACTS = {"none", "relu", "relu6", "gelu", "tanh", "sigmoid"}
CLASSES = ("static", "encoder", "decoder")


class GenError(Exception):
    pass


# --------------------------------------------------------------------------
# Model builder
# --------------------------------------------------------------------------

class Node:
    def __init__(self, name, op, inputs, cls, loop, div, fields, comment, shares=None):
        self.name, self.op, self.inputs = name, op, list(inputs)
        self.cls, self.loop, self.div = cls, loop, div
        self.fields = fields
        self.comment = comment
        self.shares = shares


class Model:
    def __init__(self, name, description, source, header, max_batch=64, seq2seq=None):
        self.name, self.description, self.source = name, description, source
        self.header = header            # list of comment lines (without '# ')
        self.max_batch = max_batch
        self.seq2seq = seq2seq          # dict or None
        self.nodes = []
        self._cls, self._loop, self._div = "static", None, 1
        self._comment = None

    # -- context: which loop the following nodes belong to --------------------
    def static(self):
        self._cls, self._loop, self._div = "static", None, 1

    def enter(self, cls, loop=None, div=1):
        assert cls in ("encoder", "decoder")
        self._cls, self._loop, self._div = cls, (loop or cls), div

    def comment(self, text):
        self._comment = text

    def add(self, name, op, inputs=(), shares=None, **fields):
        if op not in OPS:
            raise GenError(f"{self.name}: unknown op {op}")
        known = [f for f, _ in OPS[op]]
        for f in fields:
            if f not in known:
                raise GenError(f"{self.name}.{name}: op {op} has no field {f}")
        if isinstance(inputs, str):
            inputs = [inputs]
        self.nodes.append(Node(name, op, inputs, self._cls, self._loop, self._div,
                               dict(fields), self._comment, shares))
        self._comment = None
        return name

    def get(self, node, field):
        if field in node.fields:
            return node.fields[field]
        d = dict(OPS[node.op])[field]
        if node.op == "pool" and field == "stride" and d is None:
            return node.fields.get("kernel")
        return d


# --------------------------------------------------------------------------
# TOML emitter
# --------------------------------------------------------------------------

def tval(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if ("." in r or "e" in r) else r + ".0"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(tval(x) for x in v) + "]"
    raise GenError(f"cannot write {v!r}")


def emit_header(m, summary):
    L = []
    for line in m.header:
        L.append(("# " + line).rstrip())
    L.append("#")
    for line in summary:
        L.append(("# " + line).rstrip())
    L.append("#")
    L.append("# Generated by scripts/gen_models.py -- edit that script, not this file.")
    return "\n".join(L) + "\n\n"


def emit_body(m):
    L = []
    L.append(f"name = {tval(m.name)}")
    L.append(f"description = {tval(m.description)}")
    L.append(f"source = {tval(m.source)}")
    L.append(f"max_batch = {tval(m.max_batch)}")
    if m.seq2seq:
        L.append("")
        L.append("[seq2seq]")
        for k in ("lengths", "enc_scale", "dec_scale", "ref_enc", "ref_dec", "max_enc", "max_dec",
                  "max_context"):
            if k in m.seq2seq:
                L.append(f"{k} = {tval(m.seq2seq[k])}")
    for n in m.nodes:
        L.append("")
        if n.comment:
            L.append(f"# {n.comment}")
        L.append("[[node]]")
        L.append(f"name = {tval(n.name)}")
        L.append(f"op = {tval(n.op)}")
        if n.op != "input":
            L.append(f"inputs = {tval(n.inputs)}")
        if n.cls != "static":
            L.append(f"class = {tval(n.cls)}")
            if n.loop != n.cls:
                L.append(f"loop = {tval(n.loop)}")
            if n.div != 1:
                L.append(f"div = {tval(n.div)}")
        if n.shares:
            L.append(f"shares = {tval(n.shares)}")
        for f, d in OPS[n.op]:
            if f in n.fields and (n.fields[f] != d or (n.op, f) in ALWAYS):
                L.append(f"{f} = {tval(n.fields[f])}")
    return "\n".join(L) + "\n"


def parse_back(text):
    """Read an emitted file back into a Model (the checks run on what was written)."""
    import tomllib
    d = tomllib.loads(text)
    for k in d:
        if k not in ("name", "description", "source", "max_batch", "seq2seq", "node"):
            raise GenError(f"unknown top-level key {k}")
    m = Model(d["name"], d.get("description", ""), d.get("source", ""), [], d.get("max_batch", 64),
              d.get("seq2seq"))
    for t in d.get("node", []):
        t = dict(t)
        name, op = t.pop("name"), t.pop("op")
        inputs = t.pop("inputs", [])
        cls = t.pop("class", "static")
        loop = t.pop("loop", None if cls == "static" else cls)
        div = t.pop("div", 1)
        shares = t.pop("shares", None)
        if cls == "static" and (loop is not None or div != 1):
            raise GenError(f"{m.name}.{name}: loop/div on a static node")
        if op not in OPS:
            raise GenError(f"{m.name}.{name}: unknown op {op}")
        for f in t:
            if f not in dict(OPS[op]):
                raise GenError(f"{m.name}.{name}: op {op} has no field {f}")
        m.nodes.append(Node(name, op, inputs, cls, loop, div, t, None, shares))
    return m


# --------------------------------------------------------------------------
# Shape tracker and parameter / MAC counter (independent of the emitter: it
# reads only the node list and the formulas of the format doc).
# --------------------------------------------------------------------------

class T:
    """A node output per request: rows x feature shape.
    rows: 'one' | 'src' | 'dec' | int;  res: time resolution (div) of 'src' rows."""
    def __init__(self, rows, shape, res=None, tokens=False):
        self.rows, self.shape, self.res, self.tokens = rows, tuple(shape), res, tokens

    def key(self):
        return (self.rows, self.shape, self.res, self.tokens)

    def __repr__(self):
        r = self.rows if self.rows != "src" else f"src/{self.res}"
        return f"{r} x {list(self.shape)}" + (" tokens" if self.tokens else "")


def conv_out(h, k, s, p):
    return (h + 2 * p - k) // s + 1


def analyze(m):
    """Returns (info per node, totals).  Raises GenError on any inconsistency."""
    byname = {}
    for i, n in enumerate(m.nodes):
        if n.name in byname:
            raise GenError(f"{m.name}: duplicate node name {n.name}")
        if not n.name or any(not (c.isascii() and (c.isalnum() or c in "_.-")) for c in n.name):
            raise GenError(f"{m.name}: bad node name {n.name!r}")
        byname[n.name] = i

    # loop groups: consecutive runs of the same (class, loop)
    group, seen, gid, prev = [], {}, -1, None
    for n in m.nodes:
        if n.cls not in CLASSES:
            raise GenError(f"{m.name}.{n.name}: bad class {n.cls}")
        key = None if n.cls == "static" else (n.cls, n.loop)
        if key != prev:
            prev = key
            if key is not None:
                if key in seen:
                    raise GenError(f"{m.name}.{n.name}: loop {key} is not contiguous")
                gid += 1
                seen[key] = gid
        group.append(None if key is None else seen[key])
        if n.cls == "decoder" and n.div != 1:
            raise GenError(f"{m.name}.{n.name}: div on a decoder node")
    for g in set(x for x in group if x is not None):
        divs = {m.nodes[i].div for i in range(len(m.nodes)) if group[i] == g}
        if len(divs) != 1:
            raise GenError(f"{m.name}: loop group {g} has mixed div {divs}")
    has_loops = any(x is not None for x in group)
    if has_loops and not m.seq2seq:
        raise GenError(f"{m.name}: encoder/decoder loops need a [seq2seq] table")

    def one_pass(prev_out, strict):
        out, info = {}, {}
        for i, n in enumerate(m.nodes):
            g = group[i]
            seq_ok = set()
            if n.op == "attention":
                mode = m.get(n, "mode")
                # (a decoder self-attention's second input: the prompt's packed Q|K|V)
                seq_ok = {1, 2} if mode in ("additive", "dot") else ({1} if mode in ("cross", "self") else set())
            views = []
            for pos, ref in enumerate(n.inputs):
                ref, _, init = ref.partition("|")
                atprev = ref.endswith("@prev")
                src = ref[:-5] if atprev else ref
                if init:
                    if not atprev or init not in byname or byname[init] >= i or group[byname[init]] is not None:
                        raise GenError(f"{m.name}.{n.name}: {ref}|{init}: step 0 reads an earlier static node")
                if src not in byname:
                    raise GenError(f"{m.name}.{n.name}: unknown input {ref}")
                j = byname[src]
                pg = group[j]
                if atprev:
                    if g is None or pg != g:
                        raise GenError(f"{m.name}.{n.name}: {ref} is not in the same loop")
                    t = prev_out.get(src)
                    y = out.get(init) if init else None
                    if t is not None and y is not None and (y.rows, y.shape, y.tokens) != ("one", t.shape, t.tokens):
                        raise GenError(f"{m.name}.{n.name}: step 0 reads {init} ({y}), not like {src} ({t})")
                    views.append(None if t is None else T("one", t.shape, None, t.tokens))
                    continue
                if j >= i:
                    raise GenError(f"{m.name}.{n.name}: input {src} is not an earlier node")
                t = out[src]
                if t is None:
                    views.append(None)
                    continue
                if pg is not None and pg == g:
                    views.append(t)                # same loop, same step: one row
                    continue
                if pg is not None:                 # collected sequence of another loop
                    pn = m.nodes[j]
                    t = (T("src", t.shape, pn.div, t.tokens) if pn.cls == "encoder"
                         else T("dec", t.shape, None, t.tokens))
                if g is None:
                    views.append(t)
                elif n.cls == "encoder":
                    if t.rows == "src":
                        r = n.div // t.res
                        if r < 1 or r * t.res != n.div:
                            raise GenError(f"{m.name}.{n.name}: div {n.div} vs input res {t.res}")
                        if len(t.shape) != 1:
                            raise GenError(f"{m.name}.{n.name}: sequence input must be 1-D")
                        views.append(T("one", (r * t.shape[0],), None, t.tokens))
                    elif t.rows == "one":
                        views.append(t)
                    else:
                        raise GenError(f"{m.name}.{n.name}: encoder node reads {t.rows} rows")
                else:  # decoder
                    if t.rows == "one":
                        views.append(t)
                    elif pos in seq_ok:
                        views.append(t)
                    else:
                        raise GenError(f"{m.name}.{n.name}: decoder node reads a sequence "
                                       f"({src}) other than as attention keys/values")
            try:
                o, params, macs, note = op_eval(m, n, views, strict)
            except GenError as e:
                raise GenError(f"{m.name}.{n.name}: {e}")
            if n.shares:
                # another node's parameters: the same op, sizes and (own) parameter count
                if n.shares not in byname or byname[n.shares] >= i:
                    raise GenError(f"{m.name}.{n.name}: shares {n.shares}, not an earlier node")
                owner = m.nodes[byname[n.shares]]
                if owner.op != n.op or owner.shares or (strict and info[owner.name][1] != params):
                    raise GenError(f"{m.name}.{n.name}: cannot share {n.shares}'s parameters")
                params = 0
            if o is not None and g is not None and o.rows != "one":
                raise GenError(f"{m.name}.{n.name}: loop node must produce one row, got {o}")
            out[n.name] = o
            info[n.name] = (o, params, macs, note)
        return out, info

    out0, _ = one_pass({}, strict=False)
    out1, info = one_pass(out0, strict=True)
    out2, _ = one_pass(out1, strict=True)
    if {k: v.key() for k, v in out1.items()} != {k: v.key() for k, v in out2.items()}:
        raise GenError(f"{m.name}: shapes do not converge")

    # totals
    tot = {"params": 0, "fixed_macs": 0, "src_row_macs": {}, "step_macs": {}, "loop_steps": {}}
    for i, n in enumerate(m.nodes):
        o, params, macs, _ = info[n.name]
        tot["params"] += params
        if group[i] is not None:
            key = (n.cls, n.loop, n.div)
            tot["step_macs"][key] = tot["step_macs"].get(key, 0) + macs
        elif isinstance(macs, tuple):       # ('src', res, per-row macs)
            _, res, mr = macs
            tot["src_row_macs"][res] = tot["src_row_macs"].get(res, 0) + mr
        else:
            tot["fixed_macs"] += macs
    return info, tot


def op_eval(m, n, views, strict):
    """(output T, params, macs, note).  macs: per batch-1 request for static
    one-row / fixed-row nodes, per step for loop nodes, ('src', res, per row)
    for static nodes over a source sequence."""
    get = lambda f: m.get(n, f)
    op = n.op
    known = all(v is not None for v in views)
    if strict and not known:
        raise GenError("unresolved input")

    def rows_count(t):
        return 1 if t.rows == "one" else (t.rows if isinstance(t.rows, int) else None)

    def macs_for(t, per_row):
        if t.rows == "src" and n.cls == "static":
            return ("src", t.res, per_row)
        if t.rows == "dec":
            raise GenError("static GEMM over a decoder sequence is not counted")
        return per_row * rows_count(t)

    def need(cnt):
        if len(views) != cnt:
            raise GenError(f"{op} takes {cnt} input(s), got {len(views)}")

    if op == "input":
        if n.inputs:
            raise GenError("input node has inputs")
        seq = get("seq")
        rows = {"one": "one", "src": "src"}.get(seq, seq)
        if not (rows in ("one", "src") or (isinstance(rows, int) and rows > 0)):
            raise GenError(f"bad seq {seq!r}")
        if n.cls != "static":
            raise GenError("input must be static")
        tokens = get("tokens")
        shape = get("shape")
        if tokens and list(shape) != [1]:
            raise GenError("token input must have shape [1]")
        return T(rows, shape, 1 if rows == "src" else None, tokens), 0, 0, ""

    if op == "conv2d":
        need(1)
        x = views[0]
        if len(x.shape) != 3:
            raise GenError(f"conv2d needs [C,H,W], got {x}")
        c, h, w = x.shape
        k = get("kernel")
        kh, kw = (k, k) if isinstance(k, int) else tuple(k)
        s, p, g = get("stride"), get("padding"), get("groups")
        cout = get("out_channels")
        if c % g or cout % g:
            raise GenError("channels not divisible by groups")
        if get("act") not in ACTS:
            raise GenError("bad act")
        ho, wo = conv_out(h, kh, s, p), conv_out(w, kw, s, p)
        params = kh * kw * (c // g) * cout + (cout if get("bias") else 0) + (2 * cout if get("bn") else 0)
        macs = ho * wo * cout * (c // g) * kh * kw
        return (T(x.rows, (cout, ho, wo), x.res), params, macs_for(x, macs),
                f"{c}->{cout} {kh}x{kw}/{s} {h}x{w}->{ho}x{wo}")

    if op == "pool":
        need(1)
        x = views[0]
        c, h, w = x.shape
        kind = get("kind")
        if kind == "global_avg":
            return T(x.rows, (c, 1, 1), x.res), 0, 0, f"{h}x{w}->1x1"
        if kind not in ("max", "avg"):
            raise GenError(f"bad pool kind {kind}")
        k, s, p = get("kernel"), get("stride"), get("padding")
        ho, wo = conv_out(h, k, s, p), conv_out(w, k, s, p)
        return T(x.rows, (c, ho, wo), x.res), 0, 0, f"{h}x{w}->{ho}x{wo}"

    if op == "flatten":
        need(1)
        x = views[0]
        return T(x.rows, (math.prod(x.shape),), x.res), 0, 0, ""

    if op == "linear":
        if not views:
            raise GenError("linear needs inputs")
        N = get("out_features")
        if get("act") not in ACTS:
            raise GenError("bad act")
        kv = [v for v in views if v is not None]
        rows = {(v.rows, v.res) for v in kv}
        if len(rows) > 1:
            raise GenError(f"linear inputs have different rows {rows}")
        if any(len(v.shape) != 1 for v in kv):
            raise GenError("linear inputs must be 1-D")
        if not kv:
            return None, 0, 0, ""
        x = kv[0]
        o = T(x.rows, (N,), x.res)
        if not known:
            return o, 0, 0, ""
        K = sum(v.shape[0] for v in views)
        tied = get("tied")
        if tied:
            e = find(m, tied)
            if e is None or e.op != "embedding":
                raise GenError(f"tied {tied} is not an embedding")
            if m.get(e, "vocab") != N or m.get(e, "dim") != K or get("bias"):
                raise GenError("tied linear must be dim -> vocab, no bias")
            params = 0
        else:
            params = K * N + (N if get("bias") else 0)
        return o, params, macs_for(x, K * N), f"K={K} N={N}"

    if op in ("add",):
        if len(views) < 2:
            raise GenError("add needs >= 2 inputs")
        kv = [v for v in views if v is not None]
        if len({v.key() for v in kv}) > 1:
            raise GenError(f"add of unequal tensors {kv}")
        return (kv[0] if kv else None), 0, 0, ""

    if op == "concat":
        if not known:
            return None, 0, 0, ""
        if len({(v.rows, v.res) for v in views}) > 1 or any(len(v.shape) != 1 for v in views):
            raise GenError("concat of unequal rows")
        x = views[0]
        return T(x.rows, (sum(v.shape[0] for v in views),), x.res), 0, 0, ""

    if op in ("act", "softmax", "batchnorm", "layernorm"):
        need(1)
        x = views[0]
        if x is None:
            return None, 0, 0, ""
        if op == "act" and get("kind") not in ACTS - {"none"}:
            raise GenError("bad act kind")
        params = 2 * x.shape[0] if op == "batchnorm" else (2 * x.shape[-1] if op == "layernorm" else 0)
        return T(x.rows, x.shape, x.res), params, 0, ""

    if op == "embedding":
        need(1)
        x = views[0]
        V, D = get("vocab"), get("dim")
        if get("positional") not in ("none", "sinusoidal", "learned"):
            raise GenError("bad positional")
        if (get("positional") == "learned") != (get("positions") > 0):
            raise GenError("positions goes with positional = learned")
        if x is not None and not x.tokens:
            raise GenError(f"embedding input is not tokens: {x}")
        if get("after_src") and n.cls != "decoder":
            raise GenError("after_src is for a decoder-loop embedding")
        rows = ("one", None) if x is None else (x.rows, x.res)
        tied = get("tied")
        if tied:
            e = find(m, tied)
            if e is None or e.op != "embedding" or e.fields.get("tied"):
                raise GenError(f"tied {tied} is not an untied embedding")
            if m.get(e, "vocab") != V or m.get(e, "dim") != D:
                raise GenError("tied embedding must have the same vocab and dim")
            if m.nodes.index(e) > m.nodes.index(n):
                raise GenError("tied embedding must come earlier")
            params = 0
        else:
            params = V * D + get("positions") * D + get("token_types") * D
        return T(rows[0], (D,), rows[1]), params, 0, f"{V}x{D}"

    if op == "lstm":
        H = get("hidden")
        if n.cls == "static":
            raise GenError("lstm must be in a loop")
        if not views:
            raise GenError("lstm needs inputs")
        o = T("one", (H,))
        if not known:
            return o, 0, 0, ""
        if any(v.rows != "one" or len(v.shape) != 1 for v in views):
            raise GenError("lstm inputs must be one row of [D]")
        K = sum(v.shape[0] for v in views)
        return o, 4 * H * (K + H) + 4 * H, 4 * H * (K + H), f"K={K} H={H}"

    if op == "attention":
        mode, heads = get("mode"), get("heads")
        if mode in ("self", "causal"):
            prefix = mode == "self" and n.cls == "decoder" and len(views) == 2
            need(2 if prefix else 1)
            x = views[0]
            if x is None:
                return None, 0, 0, ""
            if x.shape[0] % 3:
                raise GenError("self attention input is not packed Q|K|V")
            D = x.shape[0] // 3
            if D % heads:
                raise GenError("heads do not divide D")
            if mode == "causal" and (n.cls != "static" or x.rows == "one"):
                raise GenError("causal attention masks a static sequence")
            if prefix and views[1] is not None and (views[1].shape != x.shape or views[1].rows == "one"):
                raise GenError(f"the prompt's Q|K|V {views[1]} is not a sequence like {x}")
            return T(x.rows, (D,), x.res), 0, 0, f"D={D}"
        if mode == "cross":
            need(2)
            q, kv = views
            if q is None or kv is None:
                return None, 0, 0, ""
            D = q.shape[0]
            if kv.shape[0] != 2 * D or kv.rows in ("one",) or D % heads:
                raise GenError(f"cross attention q {q} kv {kv}")
            return T(q.rows, (D,), q.res), 0, 0, f"D={D}"
        if mode in ("additive", "dot"):
            need(3)
            q, k, v = views
            if v is None:
                return None, 0, 0, ""
            if q is not None and (q.rows != "one" or k.rows == "one" or v.rows == "one"
                                  or (k.rows, k.res) != (v.rows, v.res) or q.shape != k.shape):
                raise GenError(f"{mode} attention q {q} k {k} v {v}")
            o = T("one", v.shape)
            if q is None:
                return o, 0, 0, ""
            D = q.shape[0]
            return o, (2 * D + 1 if mode == "additive" else 0), 0, f"D={D}"
        raise GenError(f"bad attention mode {mode}")

    if op == "argmax":
        need(1)
        x = views[0]
        if x is None:
            return None, 0, 0, ""
        return T(x.rows, (1,), x.res, True), 0, 0, ""

    if op == "take":
        need(1)
        x = views[0]
        if x.rows == "one":
            raise GenError("take needs a sequence")
        row = get("row")
        if isinstance(x.rows, int) and not -x.rows <= row < x.rows:
            raise GenError("take row out of range")
        if x.rows == "src" and row not in (0, -1):
            raise GenError("take from a source sequence reads its first or last row")
        return T("one", x.shape), 0, 0, ""

    raise GenError(f"no evaluator for {op}")


def find(m, name):
    for n in m.nodes:
        if n.name == name:
            return n
    return None


# --------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------

def resnet50():
    m = Model(
        "resnet50",
        "ResNet-50 v1.5, 224x224, 1000 classes (torchvision)",
        "torchvision/models/resnet.py; MLPerf Inference resnet50-v1.5",
        [
            "ResNet-50 v1.5: 224x224 RGB image -> 1000-class logits.",
            "",
            "Sources:",
            "  - pytorch/vision torchvision/models/resnet.py (Bottleneck: stride on the 3x3 conv2,",
            "    which is what makes it 'v1.5'); tensorflow/models official/resnet/resnet_model.py.",
            "  - mlcommons/inference vision/classification_and_detection (resnet50-v1.5).",
            "  - shared/reference/models.md section 1 (per-layer table).",
            "",
            "Assumptions:",
            "  - 1000 classes as in torchvision; the MLPerf TF/ONNX checkpoint has 1001",
            "    (+2,049 params, +2,048 MACs).",
            "  - BatchNorm is folded into the conv node (bn = true): it counts gamma/beta (2*Cout)",
            "    params; running statistics are not parameters. Convs followed by BN have no bias.",
            "  - Every node is STATIC; the shortcut add carries the block's ReLU.",
        ],
    )
    x = m.add("image", "input", shape=[3, 224, 224], seq="one")
    x = m.add("conv1", "conv2d", x, out_channels=64, kernel=7, stride=2, padding=3, bn=True, act="relu")
    x = m.add("maxpool", "pool", x, kind="max", kernel=3, stride=2, padding=1)
    for li, (mid, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], 1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            p = f"layer{li}.{b}"
            m.comment(f"---- {p}: bottleneck {mid}-{mid}-{4 * mid}" + (f", stride {s}" if s != 1 else ""))
            c1 = m.add(f"{p}.conv1", "conv2d", x, out_channels=mid, kernel=1, bn=True, act="relu")
            c2 = m.add(f"{p}.conv2", "conv2d", c1, out_channels=mid, kernel=3, stride=s, padding=1,
                       bn=True, act="relu")
            c3 = m.add(f"{p}.conv3", "conv2d", c2, out_channels=4 * mid, kernel=1, bn=True)
            sc = x
            if b == 0:
                sc = m.add(f"{p}.downsample", "conv2d", x, out_channels=4 * mid, kernel=1, stride=s, bn=True)
            x = m.add(f"{p}.add", "add", [c3, sc], act="relu")
    m.comment("---- head")
    x = m.add("avgpool", "pool", x, kind="global_avg")
    x = m.add("flatten", "flatten", x)
    m.add("fc", "linear", x, out_features=1000, bias=True)
    return m


def vgg16():
    m = Model(
        "vgg16",
        "VGG-16 (configuration D), 224x224, 1000 classes (torchvision)",
        "torchvision/models/vgg.py cfgs['D']; Simonyan & Zisserman 2014",
        [
            "VGG-16 (configuration D): 224x224 RGB image -> 1000-class logits.",
            "",
            "Sources:",
            "  - pytorch/vision torchvision/models/vgg.py: cfgs['D'] = [64,64,M,128,128,M,256,256,256,M,",
            "    512,512,512,M,512,512,512,M]; 3x3 convs pad 1 with bias + ReLU; 2x2/2 max pools;",
            "    classifier 25088 -> 4096 -> 4096 -> 1000.",
            "  - Simonyan & Zisserman 2014, configuration D.",
            "  - shared/reference/models.md section 4.",
            "",
            "Assumptions:",
            "  - No BatchNorm (plain vgg16, not vgg16_bn). Dropout is omitted (inference).",
            "  - torchvision's AdaptiveAvgPool2d((7,7)) is the identity at 224x224 and is omitted.",
            "  - Layer names follow the paper (conv<block>_<n>, pool<block>, fc6..fc8).",
            "  - Every node is STATIC.",
        ],
    )
    x = m.add("image", "input", shape=[3, 224, 224], seq="one")
    for blk, (c, reps) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], 1):
        m.comment(f"---- block {blk}")
        for r in range(1, reps + 1):
            x = m.add(f"conv{blk}_{r}", "conv2d", x, out_channels=c, kernel=3, padding=1, bias=True, act="relu")
        x = m.add(f"pool{blk}", "pool", x, kind="max", kernel=2, stride=2)
    m.comment("---- classifier")
    x = m.add("flatten", "flatten", x)
    x = m.add("fc6", "linear", x, out_features=4096, bias=True, act="relu")
    x = m.add("fc7", "linear", x, out_features=4096, bias=True, act="relu")
    m.add("fc8", "linear", x, out_features=1000, bias=True)
    return m


def mobilenet_v1():
    m = Model(
        "mobilenet_v1",
        "MobileNet-v1 1.0-224, 1000 classes (TF-slim)",
        "tensorflow/models research/slim/nets/mobilenet_v1.py; Howard et al. 2017",
        [
            "MobileNet-v1, width 1.0, 224x224 RGB image -> 1000-class logits (the MLPerf",
            "Inference v0.5 mobilenet).",
            "",
            "Sources:",
            "  - tensorflow/models research/slim/nets/mobilenet_v1.py, MOBILENETV1_CONV_DEFS:",
            "    conv 3x3/2 (32 ch), then 13 depthwise-separable blocks with pointwise depths",
            "    64, 128/s2, 128, 256/s2, 256, 512/s2, 5x512, 1024/s2, 1024; BN + ReLU6 after each.",
            "  - Howard et al. 2017, Table 1 (its last 's2' depthwise is stride 1 in TF-slim, as here).",
            "  - shared/reference/models.md section 5.",
            "",
            "Assumptions:",
            "  - 1000 classes; the TF-slim checkpoint MLPerf uses has 1001 (+1,025 params).",
            "  - The TF-slim classifier is a 1x1 conv with bias on the pooled 1x1 map; it is written",
            "    here as flatten + linear (same params and MACs).",
            "  - Depthwise convs are conv2d with groups = channels; stride sits on the depthwise conv.",
            "  - BN folded into the conv node (gamma/beta counted); convs with BN have no bias.",
            "  - Every node is STATIC.",
        ],
    )
    x = m.add("image", "input", shape=[3, 224, 224], seq="one")
    x = m.add("conv0", "conv2d", x, out_channels=32, kernel=3, stride=2, padding=1, bn=True, act="relu6")
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    cin = 32
    for i, (c, s) in enumerate(cfg, 1):
        m.comment(f"---- block {i}: depthwise {cin}" + (f"/s{s}" if s != 1 else "") + f", pointwise -> {c}")
        x = m.add(f"dw{i}", "conv2d", x, out_channels=cin, kernel=3, stride=s, padding=1, groups=cin,
                  bn=True, act="relu6")
        x = m.add(f"pw{i}", "conv2d", x, out_channels=c, kernel=1, bn=True, act="relu6")
        cin = c
    m.comment("---- head")
    x = m.add("avgpool", "pool", x, kind="global_avg")
    x = m.add("flatten", "flatten", x)
    m.add("fc", "linear", x, out_features=1000, bias=True)
    return m


def bert_base():
    m = Model(
        "bert_base",
        "BERT-base uncased (L=12, H=768, A=12), sequence length 128",
        "google-research/bert modeling.py + BERT-Base bert_config.json; Devlin et al. 2018",
        [
            "BERT-base (uncased): 12 post-LN encoder layers, hidden 768, 12 heads, FFN 3072,",
            "vocab 30,522, run on a padded sequence of 128 tokens; output the pooled [CLS] vector.",
            "",
            "Sources:",
            "  - google-research/bert modeling.py (BertConfig) and the released BERT-Base",
            "    bert_config.json: hidden_size 768, num_hidden_layers 12, num_attention_heads 12,",
            "    intermediate_size 3072, hidden_act gelu, max_position_embeddings 512,",
            "    type_vocab_size 2, vocab_size 30522.",
            "  - Devlin et al. 2018 (110 M params); shared/reference/models.md section 6.",
            "",
            "Assumptions:",
            "  - Fixed (padded) sequence length S = 128; the whole sequence runs in one pass, so every",
            "    node is STATIC (encoder-only, no autoregressive decoder).",
            "  - Q, K and V are one packed linear (768 -> 2304, bias): same params and MACs as three.",
            "  - Word + position + token-type embeddings are one embedding node, followed by its LN.",
            "  - No task head: the model ends at the pooler (tanh over [CLS] = row 0).",
            "    A SQuAD QA head would add 768*2+2 params. MLPerf Inference uses BERT-Large instead.",
            "  - Dropout omitted (inference).",
        ],
    )
    x = m.add("tokens", "input", shape=[1], seq=128, tokens=True)
    x = m.add("embeddings", "embedding", x, vocab=30522, dim=768, positional="learned", positions=512,
              token_types=2)
    x = m.add("embeddings.ln", "layernorm", x)
    for i in range(12):
        p = f"layer{i}"
        m.comment(f"---- encoder layer {i}")
        qkv = m.add(f"{p}.qkv", "linear", x, out_features=2304, bias=True)
        a = m.add(f"{p}.attn", "attention", qkv, mode="self", heads=12)
        o = m.add(f"{p}.out", "linear", a, out_features=768, bias=True)
        r1 = m.add(f"{p}.res1", "add", [o, x])
        l1 = m.add(f"{p}.ln1", "layernorm", r1)
        f1 = m.add(f"{p}.ffn1", "linear", l1, out_features=3072, bias=True, act="gelu")
        f2 = m.add(f"{p}.ffn2", "linear", f1, out_features=768, bias=True)
        r2 = m.add(f"{p}.res2", "add", [f2, l1])
        x = m.add(f"{p}.ln2", "layernorm", r2)
    m.comment("---- pooler: tanh(W * hidden[CLS] + b)")
    t = m.add("pooler.take", "take", x, row=0)
    m.add("pooler", "linear", t, out_features=768, bias=True, act="tanh")
    return m


WMT_S2S = dict(lengths="wmt-ende", enc_scale=1.0, dec_scale=1.0, ref_enc=30, ref_dec=30, max_enc=80, max_dec=80)


def transformer_base():
    V, d, ff = 33708, 512, 2048
    m = Model(
        "transformer_base",
        "Transformer-base (d=512, 6+6 layers, 8 heads, d_ff=2048), WMT En-De, shared vocab 33,708",
        "mlcommons/training translation/tensorflow/transformer (TransformerBaseParams); Vaswani et al. 2017",
        [
            "Transformer-base for WMT English->German translation: 6 pre-LN encoder layers, 6 pre-LN",
            "decoder layers, d_model 512, 8 heads, d_ff 2048, one 33,708-entry embedding shared by",
            "the source, the target and the pre-softmax projection.",
            "",
            "Sources:",
            "  - mlcommons/training translation/tensorflow/transformer/model/model_params.py",
            "    (TransformerBaseParams), transformer.py (EmbeddingSharedWeights, pre-LN, final LN",
            "    per stack, cached decoder self-attention), attention_layer.py (Q/K/V/output",
            "    projections without bias), ffn_layer.py (FFN with bias, ReLU).",
            "  - Vaswani et al. 2017; shared/reference/models.md section 3.",
            "",
            "Assumptions:",
            "  - Vocabulary 33,708 (tensorflow/models official/transformer; the latest stored MLPerf",
            "    version has 33,945, +121,344 params).",
            "  - The encoder is STATIC: one parallel pass over the whole source (GEMM M = batch*S),",
            "    the physically faithful choice, not a per-token ENCODER loop.",
            "  - Cross-attention K/V (decN.cross_kv) are projected once per sentence after the encoder",
            "    (STATIC); the MLPerf TF reference recomputes them every decode step.",
            "  - Q|K|V are one packed linear (512 -> 1536, no bias); same params/MACs as three.",
            "  - Greedy decoding (argmax, beam 1); beam search would multiply the decoder's M.",
            "  - Lengths: one model step per word (enc_scale = dec_scale = 1.0), i.e. BPE tokens are",
            "    counted as words, matching the paper's word-based lengths (real BPE is ~1.2-1.5",
            "    tokens per word).",
            "  - Dropout omitted (inference).",
        ],
        seq2seq=dict(WMT_S2S),
    )
    x = m.add("src", "input", shape=[1], seq="src", tokens=True)
    x = m.add("src_emb", "embedding", x, vocab=V, dim=d, scale=True, positional="sinusoidal")
    for i in range(6):
        p = f"enc{i}"
        m.comment(f"---- encoder layer {i} (static: all source positions at once)")
        l1 = m.add(f"{p}.ln1", "layernorm", x)
        qkv = m.add(f"{p}.qkv", "linear", l1, out_features=3 * d)
        a = m.add(f"{p}.attn", "attention", qkv, mode="self", heads=8)
        o = m.add(f"{p}.out", "linear", a, out_features=d)
        r1 = m.add(f"{p}.res1", "add", [o, x])
        l2 = m.add(f"{p}.ln2", "layernorm", r1)
        f1 = m.add(f"{p}.ffn1", "linear", l2, out_features=ff, bias=True, act="relu")
        f2 = m.add(f"{p}.ffn2", "linear", f1, out_features=d, bias=True)
        x = m.add(f"{p}.res2", "add", [f2, r1])
    m.comment("---- final encoder LayerNorm")
    enc = m.add("enc.ln", "layernorm", x)
    m.comment("---- cross-attention K|V of the encoder output, once per sentence")
    for i in range(6):
        m.add(f"dec{i}.cross_kv", "linear", enc, out_features=2 * d)

    m.enter("decoder")
    m.comment("==== decoder loop: one step per target token")
    x = m.add("tgt_emb", "embedding", "next_token@prev", vocab=V, dim=d, scale=True,
              positional="sinusoidal", tied="src_emb")
    for i in range(6):
        p = f"dec{i}"
        m.comment(f"---- decoder layer {i}")
        l1 = m.add(f"{p}.ln1", "layernorm", x)
        qkv = m.add(f"{p}.qkv", "linear", l1, out_features=3 * d)
        a = m.add(f"{p}.self_attn", "attention", qkv, mode="self", heads=8)
        o = m.add(f"{p}.self_out", "linear", a, out_features=d)
        r1 = m.add(f"{p}.res1", "add", [o, x])
        l2 = m.add(f"{p}.ln2", "layernorm", r1)
        q = m.add(f"{p}.q", "linear", l2, out_features=d)
        c = m.add(f"{p}.cross_attn", "attention", [q, f"{p}.cross_kv"], mode="cross", heads=8)
        co = m.add(f"{p}.cross_out", "linear", c, out_features=d)
        r2 = m.add(f"{p}.res2", "add", [co, r1])
        l3 = m.add(f"{p}.ln3", "layernorm", r2)
        f1 = m.add(f"{p}.ffn1", "linear", l3, out_features=ff, bias=True, act="relu")
        f2 = m.add(f"{p}.ffn2", "linear", f1, out_features=d, bias=True)
        x = m.add(f"{p}.res3", "add", [f2, r2])
    m.comment("---- output: final LN, logits through the shared embedding, greedy choice")
    x = m.add("dec.ln", "layernorm", x)
    x = m.add("logits", "linear", x, out_features=V, tied="src_emb")
    m.add("next_token", "argmax", x)
    return m


def gnmt():
    V, H = 36548, 1024
    m = Model(
        "gnmt",
        "GNMT v2, 4+4 LSTM-1024, normed Bahdanau attention, WMT16 En-De (MLPerf Inference v0.5)",
        "mlcommons/inference v0.5/translation/gnmt; tensorflow/nmt wmt16_gnmt_4_layer.json, gnmt_model.py",
        [
            "GNMT (MLPerf Inference v0.5, English->German): 4-layer LSTM-1024 encoder (the first",
            "layer bidirectional, residuals on the top 2), 4-layer LSTM-1024 decoder with",
            "normalized Bahdanau attention in the gnmt_v2 arrangement (the bottom layer drives the",
            "attention, the current context is concatenated into every upper layer's input),",
            "residuals on the top 2 decoder layers, unshared embeddings, no-bias output projection.",
            "",
            "Sources:",
            "  - mlcommons/inference v0.5/translation/gnmt/tensorflow (run_task.py, loadgen_gnmt.py:",
            "    checkpoint ende_gnmt_model_4_layer, hparams wmt16_gnmt_4_layer.json, vocab.bpe.32000).",
            "  - tensorflow/nmt: nmt/standard_hparams/wmt16_gnmt_4_layer.json (4+4 layers,",
            "    num_units 1024, lstm, encoder_type gnmt, attention normed_bahdanau,",
            "    attention_architecture gnmt_v2, residual, share_vocab false), nmt/gnmt_model.py,",
            "    nmt/model.py (Dense(tgt_vocab_size, use_bias=False)), nmt/nmt.py (2 residual layers).",
            "  - shared/reference/models.md section 2.",
            "",
            "Assumptions:",
            "  - Vocabulary V = 36,548 for source and target (vocab.bpe.32000 is ~36.5k entries; the",
            "    exact file was not available). This gives 210.9 M params, matching MLPerf's ~210 M.",
            "  - The source embedding is STATIC (the backward LSTM needs the whole source).",
            "  - Attention memory keys (memory_layer, no bias) are one STATIC GEMM after the encoder;",
            "    the attention op holds v, b (1024 each) and g (1).",
            "  - Greedy decoding (argmax, beam 1); MLPerf uses beam 10, which multiplies the decoder's M.",
            "  - Lengths: one model step per word (enc_scale = dec_scale = 1.0), BPE tokens counted as",
            "    words, matching the paper's word-based lengths.",
        ],
        seq2seq=dict(WMT_S2S),
    )
    m.add("src", "input", shape=[1], seq="src", tokens=True)
    m.add("src_emb", "embedding", "src", vocab=V, dim=H)
    m.enter("encoder", "enc0")
    m.comment("==== encoder layer 0: bidirectional (forward and backward run in one loop)")
    m.add("enc0_fw", "lstm", "src_emb", hidden=H)
    m.add("enc0_bw", "lstm", "src_emb", hidden=H, reverse=True)
    m.enter("encoder", "enc1")
    m.comment("==== encoder layers 1-3 (residual on 2 and 3)")
    m.add("enc1", "lstm", ["enc0_fw", "enc0_bw"], hidden=H)
    m.add("enc2", "lstm", "enc1", hidden=H)
    m.add("enc2_res", "add", ["enc2", "enc1"])
    m.add("enc3", "lstm", "enc2_res", hidden=H)
    m.add("enc3_res", "add", ["enc3", "enc2_res"])
    m.static()
    m.comment("---- attention memory keys (memory_layer), once per sentence")
    m.add("memory", "linear", "enc3_res", out_features=H)
    m.enter("decoder")
    m.comment("==== decoder loop: one step per target token")
    m.add("tgt_emb", "embedding", "next_token@prev", vocab=V, dim=H)
    m.add("dec0", "lstm", ["tgt_emb", "attn@prev"], hidden=H)
    m.add("query", "linear", "dec0", out_features=H)
    m.add("attn", "attention", ["query", "memory", "enc3_res"], mode="additive")
    m.add("dec1", "lstm", ["dec0", "attn"], hidden=H)
    m.add("dec2", "lstm", ["dec1", "attn"], hidden=H)
    m.add("dec2_res", "add", ["dec2", "dec1"])
    m.add("dec3", "lstm", ["dec2_res", "attn"], hidden=H)
    m.add("dec3_res", "add", ["dec3", "dec2_res"])
    m.add("proj", "linear", "dec3_res", out_features=V)
    m.add("next_token", "argmax", "proj")
    return m


def las():
    m = Model(
        "las",
        "Listen, Attend and Spell: BLSTM + 3 pBLSTM listener (256/dir), 2-layer LSTM-512 speller, 45 chars",
        "Chan, Jaitly, Le, Vinyals, ICASSP 2016 (arXiv:1508.01211); dims assumed (models.md section 7)",
        [
            "LAS (Listen, Attend and Spell) speech recognizer: 40-d log-mel filterbank frames ->",
            "characters. Listener: one BLSTM layer on the frames, then 3 pyramidal BLSTM layers",
            "(256 units per direction), each reading 2 consecutive outputs of the layer below, so",
            "the listener runs at 1/8 of the frame rate. Speller: 2-layer LSTM-512 with content",
            "(dot) attention <phi(s), psi(h)> and a CharacterDistribution MLP over 45 characters.",
            "",
            "Sources:",
            "  - Chan, Jaitly, Le, Vinyals, 'Listen, Attend and Spell', ICASSP 2016,",
            "    arXiv:1508.01211, section 4 (as recalled; there is no official reference code).",
            "  - shared/reference/models.md section 7.",
            "",
            "Assumptions:",
            "  - THE DIMENSIONS ARE ASSUMED (models.md section 7; the paper leaves them open):",
            "    character embedding 256; phi and psi are single 512-output linear+tanh layers;",
            "    the CharacterDistribution MLP is [s;c] 1024 -> 512 (ReLU) -> 45.",
            "  - 45 output characters: a-z, 0-9, space, comma, period, apostrophe, unk, sos, eos.",
            "  - Lengths are drawn from the WMT En-De word-length distribution and scaled:",
            "    ASSUMPTION enc_scale = 40 frames per word (speech at 2.5 words/s, 100 frames/s);",
            "    ASSUMPTION dec_scale = 6 characters per word (including the space).",
            "    ref_enc 800 frames / ref_dec 120 chars = a 20-word utterance; max 3200 / 480 = 80 words.",
            "  - Encoder steps are frames; pyramid loop pN runs ceil(frames / 2^N) times.",
            "  - Greedy decoding (argmax); the paper decodes with beam 32.",
        ],
        seq2seq=dict(lengths="wmt-ende", enc_scale=40.0, dec_scale=6.0, ref_enc=800, ref_dec=120,
                     max_enc=3200, max_dec=480),
    )
    U, Hs, E, A, C = 256, 512, 256, 512, 45
    m.add("frames", "input", shape=[40], seq="src")
    m.enter("encoder", "l0")
    m.comment("==== listener layer 0: BLSTM over the input frames")
    m.add("l0_fw", "lstm", "frames", hidden=U)
    m.add("l0_bw", "lstm", "frames", hidden=U, reverse=True)
    prev = "l0"
    for k in (1, 2, 3):
        name = f"p{k}"
        m.enter("encoder", name, div=2 ** k)
        m.comment(f"==== pyramid BLSTM {k}: reads 2 consecutive rows of {prev} (1/{2 ** k} frame rate)")
        m.add(f"{name}_fw", "lstm", [f"{prev}_fw", f"{prev}_bw"], hidden=U)
        m.add(f"{name}_bw", "lstm", [f"{prev}_fw", f"{prev}_bw"], hidden=U, reverse=True)
        prev = name
    m.static()
    m.comment("---- listener features h_u and attention keys psi(h_u), once per utterance")
    m.add("listener", "concat", ["p3_fw", "p3_bw"])
    m.add("psi", "linear", "listener", out_features=A, bias=True, act="tanh")
    m.enter("decoder")
    m.comment("==== speller loop: one step per output character")
    m.add("char_emb", "embedding", "next_char@prev", vocab=C, dim=E)
    m.add("sp0", "lstm", ["char_emb", "attn@prev"], hidden=Hs)
    m.add("sp1", "lstm", "sp0", hidden=Hs)
    m.add("phi", "linear", "sp1", out_features=A, bias=True, act="tanh")
    m.add("attn", "attention", ["phi", "psi", "listener"], mode="dot")
    m.add("mlp1", "linear", ["sp1", "attn"], out_features=Hs, bias=True, act="relu")
    m.add("mlp2", "linear", "mlp1", out_features=C, bias=True)
    m.add("next_char", "argmax", "mlp2")
    return m


# GPT-2's context: requests draw (prompt, output) pairs of the Azure conversation trace that fit
# it (data/llm/README.md); the reference lengths are the median prompt and the median output of
# the trace's profiling half hour among those, 388 and 95 tokens (94 decode steps: the prefill
# chooses the first token).
GPT2_S2S = dict(lengths="azure-conv-2023", enc_scale=1.0, dec_scale=1.0, ref_enc=388, ref_dec=94,
                max_enc=1022, max_dec=1022, max_context=1024)


def gpt2(name="gpt2", layers=12, d=768, heads=12, size="small (124 M)",
         config="openai-community/gpt2 config.json (revision 26b7c7a)", V=50257, P=1024,
         s2s=GPT2_S2S):
    m = Model(
        name,
        f"GPT-2 {size.split()[0]} (L={layers}, d={d}, {heads} heads), decoder-only, prefill + KV-cached decode",
        f"huggingface.co/{config.split()[0]}; transformers modeling_gpt2.py; Radford et al. 2019",
        [
            f"GPT-2 {size}: a decoder-only language model served as a prompt's prefill, then one",
            "decode step per further output token over a key/value cache.",
            "",
            "Sources:",
            f"  - huggingface.co/{config}: n_layer {layers}, n_embd {d}, n_head {heads},",
            "    vocab_size 50257, n_positions 1024, activation_function gelu_new (the tanh GELU),",
            "    layer_norm_epsilon 1e-5; transformers models/gpt2/modeling_gpt2.py: pre-LN blocks",
            "    (ln_1, attn.c_attn packing Q|K|V with bias, attn.c_proj, ln_2, mlp.c_fc 4d with",
            "    bias, mlp.c_proj), a final ln_f, lm_head tied to wte, no bias.",
            "  - Radford et al. 2019, 'Language models are unsupervised multitask learners'.",
            "",
            "Structure:",
            "  - Prefill (STATIC): the prompt's rows in one pass, causal self-attention; its last",
            "    row through ln_f and the logits chooses the first output token (greedy), as",
            "    Hugging Face's generate() and vLLM do. Each layer's packed Q|K|V rows stay as the",
            "    prompt's keys and values.",
            "  - Decode (DECODER loop): step s embeds the previous token (step 0: the prefill's)",
            "    at position prompt + s; each layer's self-attention attends over the prompt's keys",
            "    and values, then its own cache of every step so far. The decode layers share the",
            "    prefill's parameters (`shares`): they count once.",
            "  - Lengths (data/llm): the Azure LLM inference trace 2023 (conversation), only the",
            "    requests with prompt + output <= 1024 tokens (the context): a request of N output",
            "    tokens runs its prefill and N - 1 decode steps.",
            "  - Greedy decoding (argmax); no sampling, no beam.",
            "  - Dropout omitted (inference).",
        ],
        max_batch=64,
        seq2seq=s2s,
    )
    x = m.add("prompt", "input", shape=[1], seq="src", tokens=True)
    x = m.add("wte", "embedding", x, vocab=V, dim=d, positional="learned", positions=P)
    for i in range(layers):
        p = f"p{i}"
        m.comment(f"---- prefill layer {i} (static: every prompt row at once, masked)")
        l1 = m.add(f"{p}.ln1", "layernorm", x)
        qkv = m.add(f"{p}.qkv", "linear", l1, out_features=3 * d, bias=True)
        a = m.add(f"{p}.attn", "attention", qkv, mode="causal", heads=heads)
        o = m.add(f"{p}.proj", "linear", a, out_features=d, bias=True)
        r1 = m.add(f"{p}.res1", "add", [o, x])
        l2 = m.add(f"{p}.ln2", "layernorm", r1)
        f1 = m.add(f"{p}.fc", "linear", l2, out_features=4 * d, bias=True, act="gelu")
        f2 = m.add(f"{p}.fc_proj", "linear", f1, out_features=d, bias=True)
        x = m.add(f"{p}.res2", "add", [f2, r1])
    m.comment("---- the prompt's last row chooses the first output token")
    t = m.add("last", "take", x, row=-1)
    t = m.add("ln_f", "layernorm", t)
    t = m.add("first_logits", "linear", t, out_features=V, tied="wte")
    m.add("first_token", "argmax", t)
    m.enter("decoder")
    m.comment("==== decode loop: one step per further output token")
    x = m.add("tok", "embedding", "next_token@prev|first_token", shares="wte", vocab=V, dim=d,
              positional="learned", positions=P, after_src=True)
    for i in range(layers):
        p, q = f"d{i}", f"p{i}"
        m.comment(f"---- decode layer {i} (the prefill's layer {i} parameters)")
        l1 = m.add(f"{p}.ln1", "layernorm", x, shares=f"{q}.ln1")
        qkv = m.add(f"{p}.qkv", "linear", l1, shares=f"{q}.qkv", out_features=3 * d, bias=True)
        a = m.add(f"{p}.attn", "attention", [qkv, f"{q}.qkv"], mode="self", heads=heads)
        o = m.add(f"{p}.proj", "linear", a, shares=f"{q}.proj", out_features=d, bias=True)
        r1 = m.add(f"{p}.res1", "add", [o, x])
        l2 = m.add(f"{p}.ln2", "layernorm", r1, shares=f"{q}.ln2")
        f1 = m.add(f"{p}.fc", "linear", l2, shares=f"{q}.fc", out_features=4 * d, bias=True,
                   act="gelu")
        f2 = m.add(f"{p}.fc_proj", "linear", f1, shares=f"{q}.fc_proj", out_features=d, bias=True)
        x = m.add(f"{p}.res2", "add", [f2, r1])
    m.comment("---- output: final LN, logits through wte, greedy choice")
    t = m.add("dec_ln_f", "layernorm", x, shares="ln_f")
    t = m.add("logits", "linear", t, out_features=V, tied="wte")
    m.add("next_token", "argmax", t)
    return m


def gpt2_medium():
    return gpt2("gpt2_medium", 24, 1024, 16, "medium (355 M)",
                "openai-community/gpt2-medium config.json")


def tiny_gpt():
    """A test fixture: GPT-2's graph at two layers, d = 32, four heads, a vocabulary of 97 and
    a context of 128 tokens (the Azure trace's 53 requests that fit it), so that a software
    CUDA stand-in serves it in seconds."""
    s2s = dict(GPT2_S2S, ref_enc=60, ref_dec=40, max_enc=126, max_dec=126, max_context=128)
    m = gpt2("tiny_gpt", 2, 32, 4, "test fixture", "openai-community/gpt2 config.json (shapes scaled down)",
             V=97, P=128, s2s=s2s)
    m.header = ["A test fixture (tests/fixtures/): GPT-2's graph at 2 layers, d = 32, 4 heads,",
                "a vocabulary of 97 and a 128-token context; see models/gpt2.toml for the model."]
    return m


# --------------------------------------------------------------------------
# Targets (shared/reference/models.md and models_calc_*.py)
# --------------------------------------------------------------------------

MODELS = [resnet50, vgg16, mobilenet_v1, bert_base, transformer_base, gnmt, las, gpt2, gpt2_medium]
# written to tests/fixtures/ instead of models/
FIXTURES = [tiny_gpt]


def gpt2_params(V, P, layers, d):
    """wte + wpe + per layer (two LNs 4d, Q|K|V 3d^2 + 3d, proj d^2 + d, fc 4d^2 + 4d,
    fc_proj 4d^2 + d) + ln_f; the lm_head is tied."""
    return V * d + P * d + layers * (12 * d * d + 13 * d) + 2 * d

TARGET_PARAMS = {
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "mobilenet_v1": 4_231_976,
    "bert_base": 109_482_240,
    "transformer_base": 61_362_176,
    "gnmt": 210_880_513,
    "las": 14_286_125,
    # openai-community/gpt2 and gpt2-medium (their published counts), and the formula
    "gpt2": 124_439_808,
    "gpt2_medium": 354_823_168,
    "tiny_gpt": gpt2_params(97, 128, 2, 32),
}
assert TARGET_PARAMS["gpt2"] == gpt2_params(50257, 1024, 12, 768)
assert TARGET_PARAMS["gpt2_medium"] == gpt2_params(50257, 1024, 24, 1024)


def mac_checks(name, tot):
    """(label, computed, target) rows: weight-GEMM MACs at batch 1 (attention score/context
    MACs, which depend on lengths, are excluded)."""
    fixed, src, step = tot["fixed_macs"], tot["src_row_macs"], tot["step_macs"]
    enc_steps = {k: v for k, v in step.items() if k[0] == "encoder"}
    dec = sum(v for k, v in step.items() if k[0] == "decoder")
    if name == "resnet50":
        return [("conv+fc MACs", fixed, 4_089_184_256)]
    if name == "vgg16":
        return [("conv+fc MACs", fixed, 15_470_264_320)]
    if name == "mobilenet_v1":
        return [("conv+fc MACs", fixed, 568_740_352)]
    if name == "bert_base":
        # models_calc_seq.py: GEMM-only 10,871,635,968 at S=128, plus the pooler 768x768
        return [("linear MACs, S=128", fixed, 10_871_635_968 + 768 * 768)]
    if name == "transformer_base":
        return [("static MACs per src token", src.get(1, 0), 18_874_368 + 3_145_728),
                ("decoder MACs per step", dec, 39_278_592)]
    if name == "gnmt":
        enc = sum(enc_steps.values()) + src.get(1, 0)
        return [("encoder MACs per src token", enc, 47_185_920),
                ("decoder MACs per step", dec, 88_805_376)]
    if name in ("gpt2", "gpt2_medium", "tiny_gpt"):
        # per layer, d -> 3d, d -> d, d -> 4d, 4d -> d: 12 d^2; the logits d x vocabulary
        layers, d, V = {"gpt2": (12, 768, 50257), "gpt2_medium": (24, 1024, 50257),
                        "tiny_gpt": (2, 32, 97)}[name]
        return [("prefill MACs per prompt token", src.get(1, 0), layers * 12 * d * d),
                ("decode MACs per step", dec, layers * 12 * d * d + d * V)]
    if name == "las":
        per_frame = sum(v / k[2] for k, v in enc_steps.items())
        return [("listener MACs per frame", per_frame, 2_899_968),
                ("psi MACs per listener step", src.get(8, 0), 262_144),
                ("speller MACs per step", dec, 5_528_064)]
    return []


def fmt(x):
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


def summary_lines(m, info, tot, checks):
    L = [f"Parameters: {tot['params']:,}  (recomputed by scripts/gen_models.py from this node list)"]
    for label, got, _ in checks:
        L.append(f"{label[0].upper() + label[1:]}: {fmt(got)}  (weight GEMMs, batch 1)")
    if m.seq2seq:
        loops = []
        for n in m.nodes:
            if n.cls != "static":
                k = f"{n.cls} loop '{n.loop}'" + (f" (div {n.div})" if n.div != 1 else "")
                if k not in loops:
                    loops.append(k)
        L.append("Loops: " + ", ".join(loops))
    return L


try:
    import tomllib  # noqa: F401  (Python >= 3.11)
    HAVE_TOMLLIB = True
except ImportError:  # older Python: check the in-memory node list instead
    HAVE_TOMLLIB = False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
    ap.add_argument("--check", action="store_true", help="check only; write nothing")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every node's shape and params")
    args = ap.parse_args()

    ok = True
    rows = []
    texts = []
    for build in MODELS + FIXTURES:
        built = build()
        body = emit_body(built)
        try:
            # everything below is computed from the emitted text, read back
            m = parse_back(body) if HAVE_TOMLLIB else built
            info, tot = analyze(m)
        except GenError as e:
            print(f"error: {e}", file=sys.stderr)
            ok = False
            continue
        if args.verbose:
            print(f"== {m.name}")
            for n in m.nodes:
                o, p, mc, note = info[n.name]
                print(f"  {n.name:28s} {n.op:10s} {str(o):24s} params={p:<12,} {note}")
        checks = mac_checks(m.name, tot)
        rows.append((m.name, "params", tot["params"], TARGET_PARAMS[m.name]))
        for label, got, want in checks:
            rows.append((m.name, label, got, want))
        where = "fixtures" if build in FIXTURES else "models"
        texts.append((m.name, where, emit_header(built, summary_lines(m, info, tot, checks)) + body))

    w = max(len(r[1]) for r in rows) if rows else 10
    print(f"{'model':18s} {'quantity':{w}s} {'computed':>16s} {'target':>16s}  ")
    print("-" * (18 + w + 16 + 16 + 8))
    for name, label, got, want in rows:
        same = got == want
        ok &= same
        print(f"{name:18s} {label:{w}s} {fmt(got):>16s} {fmt(want):>16s}  {'ok' if same else 'DIFF'}")
    if not ok:
        print("MISMATCH or error: nothing written", file=sys.stderr)
        return 1
    if not args.check:
        fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
        for name, where, text in texts:
            out = args.out if where == "models" else fixtures
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, f"{name}.toml"), "w") as f:
                f.write(text)
        print(f"wrote {len(texts)} files to {os.path.normpath(args.out)} and tests/fixtures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
