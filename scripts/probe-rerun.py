#!/usr/bin/env python3
"""The reliability probe's reproductions, rerun as a whole against the release binary.

The second hostile probe (`../shared/reference/reliability-2026-12.md`, 2026-12-07; its findings
numbered T1-T18 there and in issue 73) gave one reproduction per finding. This script replays each
one, in a scratch folder, and classifies what the binary does:

  writes outside   a file appeared anywhere under the scratch folder but inside the folder the case
                   gave (`--out`, or none);
  abort            killed by a signal, or "memory allocation of N bytes failed" (exit 134);
  panic            "panicked" on stderr;
  hang             still running at the case's limit (a few seconds to a minute);
  silently wrong   it ran, but what it said or did is what the probe called wrong;
  ok               a clear refusal naming the problem, or the right answer.

Exit 0 when every case is `ok`, 1 otherwise, with a table of every case. CLI cases run under the
address-space limit the probe used (4 GiB) unless the case sets its own. The server cases run one
`serve` (ResNet-50 on the NPU model, HTTP and gRPC) and one on the CPU device (GNMT at quarter
width). What `scripts/soak-hostile.py` already replays (T1's minute-long node, T4's four
declarations, T18's immediate 413, the floods' accounting) is not repeated here.

Needs the Python packages `onnx` (T3, T14's ONNX cases) and `grpcio` (T9): CI's virtual
environment has both (`.ci/run`). Usage: scripts/probe-rerun.py [--bin target/release/lazybatch]
[--keep]
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

GIB = 1 << 30
rows = []  # (finding, case, verdict, detail)


class Case:
    """One CLI run: its exit code, stdout, stderr, peak RSS (MiB), seconds, and whether it hung."""

    def __init__(self, argv, timeout=60, limit_as=4 * GIB, cwd=None):
        def limits():
            if limit_as:
                resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
            # (as many descriptors as allowed: a flood's client holds thousands)
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            os.setpgrp()

        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                             preexec_fn=limits)
        got = {}
        readers = [threading.Thread(target=lambda k, f: got.update({k: f.read()}), args=(k, f))
                   for k, f in (("out", p.stdout), ("err", p.stderr))]
        for r in readers:
            r.start()
        # reaped here, not by Popen, so that the peak RSS is this child's own (wait4)
        self.hung, status, usage = False, None, None
        while status is None:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status, usage = st, ru
            elif time.monotonic() - t0 > timeout:
                self.hung = True
                os.killpg(p.pid, signal.SIGKILL)
            else:
                time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        for r in readers:
            r.join()
        self.secs = time.monotonic() - t0
        self.rc = p.returncode
        self.out = got.get("out", b"").decode(errors="replace")
        self.err = got.get("err", b"").decode(errors="replace")
        self.rss_mib = usage.ru_maxrss / 1024


def files_under(root):
    found = set()
    for d, _, names in os.walk(root):
        for n in names:
            found.add(os.path.join(d, n))
    return found


def record(finding, case, verdict, detail):
    rows.append((finding, case, verdict, detail))
    print(f"  {verdict:<16} {finding:<4} {case}: {detail}", flush=True)


def cli(finding, name, argv, judge, scratch, out=None, **kw):
    """Runs one CLI case and records its verdict: the failure classes first, then `judge(case)`,
    which returns (ok, detail)."""
    before = files_under(scratch)
    c = Case(argv, **kw)
    stray = sorted(f for f in files_under(scratch) - before
                   if not (out and os.path.abspath(f).startswith(os.path.abspath(out) + os.sep)))
    tail = (c.err.strip().splitlines() or [""])[-1][:160]
    if stray:
        record(finding, name, "writes outside", ", ".join(stray[:3]))
    elif c.hung:
        record(finding, name, "hang", f"still running after {c.secs:.0f} s")
    elif c.rc is not None and (c.rc < 0 or c.rc == 134 or "memory allocation of" in c.err):
        record(finding, name, "abort", f"exit {c.rc}: {tail}")
    elif "panicked" in c.err:
        record(finding, name, "panic", tail)
    else:
        ok, detail = judge(c)
        record(finding, name, "ok" if ok else "silently wrong", detail)
    return c


def refused(*words, secs=None, rss_mib=None):
    """A judge: exit 2 with each of `words` in the message (case-insensitive), within `secs` and
    `rss_mib` when given."""

    def judge(c):
        msg = (c.err.strip().splitlines() or [""])[-1][:200]
        missing = [w for w in words if w.lower() not in c.err.lower()]
        slow = secs is not None and c.secs > secs
        big = rss_mib is not None and c.rss_mib > rss_mib
        ok = c.rc == 2 and not missing and not slow and not big
        why = [f"exit {c.rc}", f"{c.secs:.1f} s", f"{c.rss_mib:.0f} MiB"]
        if missing:
            why.append(f"message lacks {missing}")
        return ok, "; ".join(why) + f": {msg}"

    return judge


# ---- inputs ----

def model_named(scratch, name):
    with open("models/resnet50.toml") as f:
        text = f.read()
    path = os.path.join(scratch, "in", f"named{len(os.listdir(os.path.join(scratch, 'in')))}.toml")
    with open(path, "w") as f:
        f.write(re.sub(r'(?m)^name = "resnet50"', f"name = {json.dumps(name)}", text, count=1))
    return path


def onnx_external(folder, tensors, data_file, data_size, relu_inputs=1, matmul=None):
    """An ONNX model in `folder` whose initializers, each of `tensors` floats, all name
    `data_file` (made sparse, `data_size` bytes) for their data, and a Relu (with `relu_inputs`
    inputs) on the input; or, with `matmul` = (k, n), one initializer of k x n floats that the
    input [1, k] is multiplied by."""
    import onnx
    from onnx import TensorProto, helper
    os.makedirs(folder, exist_ok=True)
    if data_size is not None:
        with open(os.path.join(folder, data_file), "wb") as f:
            f.truncate(data_size)
    inits = []
    for i, n in enumerate(tensors):
        t = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=list(matmul or [n]))
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=data_file)
        inits.append(t)
    k, n = matmul or (tensors[0], tensors[0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])
    node = (helper.make_node("MatMul", ["x", "w0"], ["y"]) if matmul
            else helper.make_node("Relu", ["x"] * relu_inputs, ["y"]))
    g = helper.make_graph([node], "g", [x], [y], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def shards(binary, scratch, tag):
    """A compare sweep in 3 shards: their folders."""
    dirs = []
    for i in range(3):
        d = os.path.join(scratch, f"{tag}{i}")
        subprocess.run([binary, "compare", "--model", "resnet50", "--device", "npu", "--requests", "100",
                        "--rates", "100,200,300", "--policies", "lazy", "--shard", f"{i}/3", "--out", d,
                        "--progress", "off"], check=True, capture_output=True)
        dirs.append(d)
    return dirs


def edit_shard(d, fn):
    path = os.path.join(d, "shard.json")
    with open(path) as f:
        s = json.load(f)
    fn(s)
    with open(path, "w") as f:
        json.dump(s, f)


# ---- CLI and file findings ----

def cli_findings(b, scratch):
    os.makedirs(os.path.join(scratch, "in"))
    run_dir = os.path.join(scratch, "run", "a", "b")
    os.makedirs(run_dir)
    print("T2: names that reach file paths")
    for label, name in [("relative ../../ESCAPED", "../../ESCAPED"),
                        ("absolute", os.path.join(scratch, "abs", "ABSOLUTE"))]:
        os.makedirs(os.path.join(scratch, "abs"), exist_ok=True)
        m = model_named(scratch, name)
        out = os.path.join(run_dir, "out", "x")
        cli("T2", f"compare, a model named {label}",
            [b, "compare", "--model", m, "--device", "npu", "--requests", "100", "--rates", "100",
             "--policies", "lazy", "--out", out, "--progress", "off"],
            refused("name"), scratch, out=out, cwd=run_dir)
    for label, value in [("../escaped", "../escaped"), ("absolute", os.path.join(scratch, "abs", "M"))]:
        ds = shards(b, scratch, f"t2{label.strip('./')[:3]}")
        for d in ds:
            edit_shard(d, lambda s: s.update(model=value))
        out = os.path.join(scratch, "merged", label.strip("./")[:3], "m")
        cli("T2", f"merge, shards whose model is {label}", [b, "merge", *ds, "--out", out],
            refused(), scratch, out=out)

    print("T3: ONNX external data")
    amp = onnx_external(os.path.join(scratch, "in", "amp"), [4] * 40, "blob.bin", 100 << 20)
    cli("T3", "40 initializers on one 100 MB file", [b, "models", "--model", amp],
        refused("external data", secs=20, rss_mib=600), scratch)
    big = onnx_external(os.path.join(scratch, "in", "big"), [4], "blob.bin", 5 * GIB // 2)
    cli("T3", "a 2.5 GiB file for a 4-float tensor", [b, "models", "--model", big],
        refused("external data", secs=20, rss_mib=600), scratch)
    huge = onnx_external(os.path.join(scratch, "in", "huge"), [5 * GIB // 8], "blob.bin", 5 * GIB // 2)
    cli("T3", "a 2.5 GiB tensor under a 2 GiB address-space limit", [b, "models", "--model", huge],
        refused("limit", secs=20, rss_mib=600), scratch, limit_as=2 * GIB)

    def once(c):
        ok = c.rc == 0 and c.rss_mib < 1024 + 400
        return ok, f"exit {c.rc}, {c.secs:.1f} s, peak {c.rss_mib:.0f} MiB for 1,024 MiB of data"

    one = onnx_external(os.path.join(scratch, "in", "one"), [GIB // 4], "blob.bin", GIB,
                        matmul=(16384, 16384))
    cli("T3", "a 1 GiB tensor costs its size once", [b, "models", "--model", one], once, scratch,
        limit_as=None)

    print("T5: the process's own memory limit")
    big31 = os.path.join(scratch, "in", "big31.toml")
    with open(big31, "w") as f:
        f.write('name = "big31"\nmax_batch = 8\n\n[[node]]\nname = "x"\nop = "input"\nshape = [32768]\n\n'
                '[[node]]\nname = "fc"\nop = "linear"\ninputs = ["x"]\nout_features = 65536\n')
    for label, argv in [
            ("a 2^31-weight linear", ["run", "--device", "cpu", "--model", big31, "--policy", "lazy",
                                      "--rate", "50", "--requests", "5", "--max-batch", "2", "--reps", "1",
                                      "--profile-variation", "off"]),
            ("profile at batch 4096", ["profile", "--device", "cpu", "--model", "resnet50", "--width", "0.25",
                                       "--max-batch", "4096", "--reps", "1"]),
            ("run at batch 512", ["run", "--device", "cpu", "--model", "resnet50", "--policy", "lazy", "--rate",
                                  "10", "--requests", "5", "--max-batch", "512", "--force-max-batch", "--reps",
                                  "1"])]:
        cli("T5", f"{label} under RLIMIT_AS 4 GiB", [b, *argv], refused("RLIMIT_AS", secs=60), scratch)

    print("T6: capacity's precision")
    cli("T6", "--search-precision 1e-15",
        [b, "capacity", "--model", "resnet50", "--device", "npu", "--requests", "200", "--policies", "lazy",
         "--seeds", "1", "--p99-ms", "20", "--search-precision", "1e-15"],
        refused("--search-precision", secs=10), scratch, timeout=30)

    print("T7, T16: special files")
    ds = shards(b, scratch, "t7_")
    fifo = os.path.join(scratch, "fifo")
    os.makedirs(fifo)
    os.mkfifo(os.path.join(fifo, "shard.json"))
    zero = os.path.join(scratch, "zero")
    os.makedirs(zero)
    os.symlink("/dev/zero", os.path.join(zero, "shard.json"))
    pagemap = os.path.join(scratch, "pagemap")
    os.makedirs(pagemap)
    os.symlink("/proc/self/pagemap", os.path.join(pagemap, "shard.json"))
    for label, d in [("a FIFO", fifo), ("/dev/zero", zero), ("/proc/self/pagemap", pagemap)]:
        out = os.path.join(scratch, "merged", "t7", label.strip("/").replace("/", "_"))
        cli("T7", f"merge, shard.json is {label}", [b, "merge", d, ds[1], ds[2], "--out", out],
            refused("shard.json", secs=10, rss_mib=200), scratch, out=out, timeout=30)
    lazy = ["--policy", "lazy"]
    for label, argv in [("--trace", ["run", *lazy, "--model", "resnet50", "--device", "npu", "--trace"]),
                        ("--device profile:", ["run", *lazy, "--model", "resnet50", "--rate", "10", "--device"]),
                        ("a model file", ["run", *lazy, "--device", "npu", "--rate", "10", "--model"]),
                        ("validate --measured", ["validate", "--model", "resnet50", "--measured"])]:
        path = "/proc/self/pagemap"
        arg = f"profile:{path}" if label.startswith("--device") else path
        cli("T16", f"{label} /proc/self/pagemap", [b, *argv, arg],
            refused("pagemap", secs=10, rss_mib=200), scratch, timeout=30)

    print("T11, T12: traces")
    t = os.path.join(scratch, "in", "same.trace")
    with open(t, "w") as f:
        f.write("0\n0\n0\n0\n")

    def no_zero_rate(c):
        rate = json.loads(c.out).get("rate_rps", "missing") if c.rc == 0 else "not run"
        return c.rc == 0 and rate != 0.0 and rate != "missing", f"exit {c.rc}, rate_rps {rate}"

    cli("T11", "four arrivals at one instant", [b, "run", "--device", "npu", "--model", "resnet50", "--policy",
                                                "lazy", "--trace", t, "--json"], no_zero_rate, scratch)
    for value in ["3.1558e12", "3.15576e12"]:
        t = os.path.join(scratch, "in", f"edge{value}.trace")
        with open(t, "w") as f:
            f.write(f"0\n{value}\n")

        def consistent(c):
            m = re.search(r"must be in \[0, ([0-9.e+]+)\] ms.*got ([0-9.e+]+)", c.err)
            contradicts = bool(m) and float(m.group(2)) <= float(m.group(1))
            # an arrival inside the horizon may still end past it: the parser's bound says so,
            # and the run refuses it by name (the probe's T12 was the contradiction only)
            ok = c.rc in (0, 2) and not contradicts
            return ok, f"exit {c.rc}: {(c.err.strip().splitlines() or [''])[-1][:160]}"

        cli("T12", f"an arrival at {value} ms", [b, "run", "--device", "npu", "--model", "resnet50", "--policy",
                                                 "lazy", "--trace", t], consistent, scratch)

    print("T13: co-located SLAs")

    def names_slas(c):
        named = [f"{m} (SLA {sla} ms)" in c.out for m, sla in (("resnet50", 50), ("gnmt", 200))]
        ok = c.rc == 0 and all(named) and "SLA 100 ms" not in c.out
        return ok, f"exit {c.rc}; each model's line names its SLA: {named}"

    cli("T13", "--slas 50,200", [b, "run", "--device", "npu", "--model", "resnet50,gnmt", "--slas", "50,200",
                                 "--policy", "lazy", "--rate", "100", "--requests", "200"], names_slas, scratch)

    print("T14: lenient inputs")

    def short_label(c):
        longest = max((len(line) for line in (c.out + c.err).splitlines()), default=0)
        return (c.rc == 2 or (c.rc == 0 and longest < 200)), f"exit {c.rc}, longest line {longest}"

    cli("T14", "--width 1e-308", [b, "run", "--device", "npu", "--model", "resnet50", "--width", "1e-308",
                                  "--rate", "10", "--requests", "10"], short_label, scratch)
    wide = onnx_external(os.path.join(scratch, "in", "relu"), [4], "blob.bin", 16, relu_inputs=200_001)
    cli("T14", "a Relu with 200,001 inputs", [b, "models", "--model", wide], refused("Relu"), scratch)
    outside = os.path.join(scratch, "outside.bin")
    with open(outside, "wb") as f:
        f.write(b"\0" * 16)
    linked = onnx_external(os.path.join(scratch, "in", "hard"), [4], "blob.bin", None)
    os.link(outside, os.path.join(scratch, "in", "hard", "blob.bin"))
    cli("T14", "external data hard-linked from outside its folder", [b, "models", "--model", linked],
        refused("blob.bin", "link"), scratch)


# ---- server findings ----

class Serve:
    def __init__(self, b, args):
        self.p = subprocess.Popen([b, "serve", *args, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()
        while line and "serving" not in line:
            line = self.p.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)(?:.*gRPC at 127\.0\.0\.1:(\d+))?", line)
        if not m:
            raise SystemExit(f"serve did not start: {line}{self.p.stderr.read()}")
        self.port = int(m.group(1))
        self.grpc = int(m.group(2)) if m.group(2) else None

    def metric(self, outcome):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(float(v) for v in re.findall(
            rf'lazybatch_requests_total{{[^}}]*outcome="{outcome}"[^}}]*}} (\S+)', text))

    def stop(self):
        t0 = time.monotonic()
        self.p.send_signal(signal.SIGTERM)
        try:
            out, _ = self.p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, _ = self.p.communicate()
        return time.monotonic() - t0, self.p.returncode, out


def post(port, path, body, headers=None, timeout=30):
    """(status, body text)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = f"POST {path} HTTP/1.1\r\nHost: probe\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    for k, v in (headers or []):
        head += f"{k}: {v}\r\n"
    s.sendall(head.encode() + b"\r\n" + body)
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest.decode(errors="replace")


def server_findings(b, scratch):
    import struct
    print("T9, T14: the HTTP and gRPC front ends (ResNet-50, NPU model)")
    srv = Serve(b, ["--model", "resnet50", "--device", "npu", "--grpc-listen", "127.0.0.1:0"])
    path = "/v2/models/resnet50/infer"
    n = 3 * 224 * 224
    image = {"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224]}

    def http_case(finding, name, body, headers=None, want=400):
        try:
            status, text = post(srv.port, path, body, headers)
        except OSError as e:
            record(finding, name, "hang" if isinstance(e, socket.timeout) else "silently wrong", str(e))
            return
        record(finding, name, "ok" if status == want else "silently wrong", f"{status}: {text[:120]}")

    http_case("T14", "an unknown output name", json.dumps(
        {"inputs": [{**image, "data": [0.0] * n}], "outputs": [{"name": "nope"}]}).encode())
    http_case("T14", "ragged nested data", json.dumps(
        {"inputs": [{**image, "data": [[0.0, 0.0], [0.0] * (n - 2)]}]}).encode())
    header = json.dumps({"inputs": [{**image, "parameters": {"binary_data_size": 4 * n}}]}).encode()
    raw = header + struct.pack(f"<{n}f", *([0.0] * n))
    http_case("T14", "Inference-Header-Content-Length twice", raw,
              [("Inference-Header-Content-Length", len(header))] * 2)
    # a simulated device computes on no value, so it takes what clients such as perf_analyzer send
    # by default (random bytes, NaNs among them); a device that computes refuses them (below)
    nan = header + struct.pack(f"<{n}f", *([float("nan")] + [0.0] * (n - 1)))
    http_case("T14", "a NaN in binary FP32 data, simulated device: taken (docs/serve.md)", nan,
              [("Inference-Header-Content-Length", len(header))], want=200)
    http_case("T14", "a well-formed binary request is answered", raw,
              [("Inference-Header-Content-Length", len(header))], want=200)

    import grpc
    ch = grpc.insecure_channel(f"127.0.0.1:{srv.grpc}", options=[("grpc.max_receive_message_length", 64 << 20)])
    infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=None,
                           response_deserializer=None)
    before = srv.metric("malformed")
    for label, payload in [("garbage", b"\xff" * 64), ("a truncated field", b"\x0a\x80"),
                           ("a huge length prefix", b"\x0a\xff\xff\xff\xff\x0f")]:
        try:
            infer(payload, timeout=10)
            record("T9", f"malformed protobuf: {label}", "silently wrong", "answered OK")
        except grpc.RpcError as e:
            code = e.code()
            record("T9", f"malformed protobuf: {label}",
                   "ok" if code == grpc.StatusCode.INVALID_ARGUMENT else "silently wrong", f"{code.name}")
    counted = srv.metric("malformed") - before
    record("T9", "each malformed message counted", "ok" if counted == 3 else "silently wrong",
           f"`malformed` +{counted:.0f} of 3")

    def varint(v):
        out = b""
        while True:
            byte = v & 0x7F
            v >>= 7
            if v:
                out += bytes([byte | 0x80])
            else:
                return out + bytes([byte])

    def field(num, payload):
        return varint(num << 3 | 2) + varint(len(payload)) + payload

    shape = b"".join(varint(1) for _ in range(1_000_000))
    tensor = field(1, b"image") + field(2, b"FP32") + field(3, shape)
    message = field(1, b"resnet50") + field(5, tensor)
    try:
        infer(message, timeout=30)
        record("T9", "a 1,000,000-dimension shape", "silently wrong", "answered OK")
    except grpc.RpcError as e:
        size = len(e.details() or "")
        record("T9", "a 1,000,000-dimension shape",
               "ok" if e.code() == grpc.StatusCode.INVALID_ARGUMENT and size <= 2048 else "silently wrong",
               f"{e.code().name}, message of {size} bytes")
    ch.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/v2/models/resnet50", timeout=10) as r:
        metadata = r.read()
    secs, code, _ = srv.stop()
    record("T9", "the server stops cleanly", "ok" if code == 0 else "silently wrong", f"exit {code} in {secs:.1f} s")

    print("T10: a flood beyond --max-connections, client and server reconciled")
    srv = Serve(b, ["--model", "resnet50", "--device", "npu", "--max-connections", "256"])
    flood = Case([b, "load", "--url", f"http://127.0.0.1:{srv.port}", "--model", "resnet50", "--rate", "1e9",
                  "--requests", "8000", "--concurrency", "2000", "--timeout-s", "30", "--progress", "off",
                  "--json"], timeout=120, limit_as=None)
    _, code, out = srv.stop()
    told = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", out.split(";")[0].removeprefix("stopped:"))}
    if flood.hung or flood.rc != 0:
        record("T10", "the flood's client", "hang" if flood.hung else "silently wrong",
               f"exit {flood.rc}: {flood.err[-160:]}")
    else:
        c = json.loads(flood.out)
        sent = 8000 - c["not_sent"]
        failed = c["failed"]["http_5xx"] + c["failed"]["transport"]
        refused = told.get("too_many_connections", 0) + told.get("overloaded", 0) + told.get("queue_full", 0)
        # every request sent is the server's; the server's refusals count connections, some of
        # which the client's pool opened without a request (docs/serve.md)
        ok = (c["completed"] == told.get("completed") and c["completed"] + failed == sent
              and failed <= refused and c["failed"]["timed_out"] == 0)
        record("T10", "completed equal; every refusal the client saw is the server's",
               "ok" if ok else "silently wrong",
               f"client: {sent} sent, {c['completed']} completed, {failed} refused or closed; server: "
               f"{told.get('completed')} completed, {refused} refused ({refused - failed} connections without a "
               f"request)")

    print("T14: a NaN in binary FP32 data on the CPU device (MobileNet, quarter size)")
    srv = Serve(b, ["--model", "mobilenet_v1", "--width", "0.25", "--res", "0.25", "--device", "cpu"])
    name = "mobilenet_v1@w0.25r0.25"
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/v2/models/{name}", timeout=10) as r:
        meta = json.load(r)["inputs"][0]
    shape = [1 if d < 0 else d for d in meta["shape"]]
    m = 1
    for d in shape:
        m *= d
    header = json.dumps({"inputs": [{"name": meta["name"], "datatype": "FP32", "shape": shape,
                                     "parameters": {"binary_data_size": 4 * m}}]}).encode()
    for label, first, want in [("NaN", float("nan"), 400), ("inf", float("inf"), 400), ("0.5", 0.5, 200)]:
        body = header + struct.pack(f"<{m}f", *([first] + [0.0] * (m - 1)))
        try:
            status, text = post(srv.port, f"/v2/models/{name}/infer", body,
                                [("Inference-Header-Content-Length", len(header))])
            record("T14", f"a binary value {label} on the CPU device", "ok" if status == want else "silently wrong",
                   f"{status}: {text[:100]}")
        except OSError as e:
            record("T14", f"a binary value {label} on the CPU device", "silently wrong", str(e))
    srv.stop()

    print("T17: `load` against a server that never answers")
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    held = []

    def accept():
        while True:
            try:
                held.append(lsock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = lsock.getsockname()[1]
    cli("T17", "nothing answered", [b, "load", "--url", f"http://127.0.0.1:{port}", "--model", "resnet50",
                                    "--rate", "100", "--requests", "3", "--timeout-s", "1", "--progress", "off"],
        lambda c: (c.rc not in (0, None), f"exit {c.rc}: {(c.err.strip().splitlines() or [''])[-1][:120]}"),
        scratch, timeout=60)
    lsock.close()
    for s in held:
        s.close()
    # a server that answers the model's metadata, then never an inference
    import http.server

    class Mute(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(metadata)))
            self.end_headers()
            self.wfile.write(metadata)

        def do_POST(self):
            time.sleep(10)

        def log_message(self, *_):
            pass

    mute = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mute)
    mute.daemon_threads = True
    threading.Thread(target=mute.serve_forever, daemon=True).start()
    cli("T17", "metadata answered, no inference",
        [b, "load", "--url", f"http://127.0.0.1:{mute.server_address[1]}", "--model", "resnet50", "--rate", "100",
         "--requests", "3", "--timeout-s", "1", "--progress", "off"],
        lambda c: (c.rc not in (0, None), f"exit {c.rc}: {(c.err.strip().splitlines() or [''])[-1][:120]}"),
        scratch, timeout=60)
    mute.shutdown()

    print("T1: SIGTERM with the engine's queue full (GNMT, quarter width, CPU device)")
    srv = Serve(b, ["--model", "gnmt", "--width", "0.25", "--device", "cpu", "--max-batch", "16", "--max-queue",
                    "1024", "--shutdown-timeout-s", "2"])
    load = subprocess.Popen([b, "load", "--url", f"http://127.0.0.1:{srv.port}", "--model", "gnmt", "--width",
                             "0.25", "--rate", "400", "--requests", "4000", "--concurrency", "1000", "--progress",
                             "off", "--timeout-s", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(5)
    secs, code, out = srv.stop()
    load.wait(timeout=120)
    head = next((line for line in out.splitlines() if line.startswith("stopped:")), "")
    ok = code == 0 and secs < 2 + 3 and head
    record("T1", "exit within --shutdown-timeout-s 2 (+3 s margin)", "ok" if ok else "hang",
           f"exit {code} after {secs:.1f} s; {head[:140]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/lazybatch")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    a = ap.parse_args()
    b = os.path.abspath(a.bin)
    scratch = tempfile.mkdtemp(prefix="probe-rerun-")
    t0 = time.monotonic()
    try:
        cli_findings(b, scratch)
        server_findings(b, scratch)
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    bad = [r for r in rows if r[2] != "ok"]
    print(f"\n| finding | case | verdict | detail |\n|---|---|---|---|")
    for f, c, v, d in rows:
        print(f"| {f} | {c} | {v} | {d.replace('|', '/')} |")
    counts = {v: sum(1 for r in rows if r[2] == v) for v in
              ("ok", "writes outside", "abort", "panic", "hang", "silently wrong")}
    print(f"\nprobe rerun: {len(rows)} cases in {time.monotonic() - t0:.0f} s: " +
          ", ".join(f"{v} {n}" for v, n in counts.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
