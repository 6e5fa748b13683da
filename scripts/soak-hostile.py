#!/usr/bin/env python3
"""Hostile clients against `lazybatch serve`, on loopback, bounded in time and count.

Replays the reliability probe's scenarios (../shared/reference/reliability-probe.md, copied in
spirit: slowloris, a stalled body, a flood of large bodies, SIGTERM under load) against the
release binary and asserts what docs/serve.md and docs/limits.md promise:

  slowloris  headers sent a byte at a time: every such connection is closed by the server within
             --header-timeout-s (plus a margin) while a well-behaved client is answered 200;
  stalled    bodies that stop arriving: each is answered 408 within --body-timeout-s (plus a
             margin) and counted `timed_out`;
  flood      many concurrent ResNet-50 requests (JSON bodies of ~1.5 MB): the server's peak
             resident memory (VmHWM) stays under --max-inflight-mib plus a base, its memory after
             the flood falls back, and every answer the clients saw is in the server's counts,
             outcome by outcome (a connection refused without a word, beyond the 64 told at once,
             is counted `too_many_connections` there);
  sigterm    SIGTERM while a flood, half-sent headers and stalled bodies are open: the process
             exits 0 within --shutdown-timeout-s (plus a margin), prints its summary on stdout,
             and completed there equals the 200s the clients received;
  declared   four connections that send headers declaring 64 MiB bodies and nothing more hold
             none of --max-inflight-mib: inferences sent meanwhile are answered 200; a body
             declared over --max-body-mib is answered 413 at once;
  slow node  a server on a latency table that prices every node at 60 s, three requests in:
             SIGTERM ends it within --shutdown-timeout-s (plus a margin), the three counted
             `abandoned`, and a second SIGTERM at once ends a second such server at once.

Usage: scripts/soak-hostile.py [--bin target/release/lazybatch] [--flood N] [--concurrency C]
                              [--max-inflight-mib M] [--max-connections K]
Exit 0 when every assertion holds; 1 with the failed ones listed. Standard library only.
"""
import argparse
import asyncio
import json
import re
import signal
import subprocess
import sys
import time

MODEL = "resnet50"
PATH = f"/v2/models/{MODEL}/infer"
HEADER_S, BODY_S, SHUTDOWN_S = 2.0, 2.0, 5.0
INFLIGHT_MIB, MAX_CONNECTIONS, MAX_QUEUE = 256, 256, 128
# the server's own memory before any request (measured here: ~60 MiB on the NPU model with
# ResNet-50's profile) with room to spare; the bodies in flight add at most INFLIGHT_MIB
BASE_MIB = 192
MARGIN_S = 3.0
failures = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)


class Server:
    """`lazybatch serve` on a free loopback port, NPU model (or `device`), its limits set
    small."""

    def __init__(self, binary, device="npu", extra=()):
        args = [binary, "serve", "--model", MODEL, "--device", device, *extra, "--listen", "127.0.0.1:0",
                "--header-timeout-s", str(HEADER_S), "--body-timeout-s", str(BODY_S),
                "--shutdown-timeout-s", str(SHUTDOWN_S), "--max-inflight-mib", str(INFLIGHT_MIB),
                "--max-connections", str(MAX_CONNECTIONS), "--max-queue", str(MAX_QUEUE)]
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []
        line = self.p.stderr.readline()
        while line and "serving" not in line:
            seen.append(line)
            line = self.p.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise SystemExit(f"serve did not start: {''.join(seen)}{line}{self.p.stderr.read()}")
        self.port = int(m.group(1))

    def kib(self, field):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM):
        """Signals the server; returns (seconds to exit, exit code, stdout)."""
        t0 = time.monotonic()
        self.p.send_signal(sig)
        try:
            out, _ = self.p.communicate(timeout=SHUTDOWN_S + 60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, _ = self.p.communicate()
        return time.monotonic() - t0, self.p.returncode, out


def summary(text):
    """The exit summary's outcome counts: {'completed': n, ...}."""
    line = next((l for l in text.splitlines() if l.startswith("stopped:")), "")
    head = line.split(";")[0].removeprefix("stopped:")
    return {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", head)}


async def exchange(port, raw, timeout=60.0):
    """Sends `raw`, reads one response: (status or None, body, seconds). None: closed or reset
    without an answer."""
    t0 = time.monotonic()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    except (OSError, asyncio.TimeoutError):
        return None, b"", time.monotonic() - t0

    async def talk():
        try:
            w.write(raw)
            await w.drain()
        except OSError:
            pass  # the server may answer (and close) before the body is sent: read on
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        n = re.search(rb"(?i)content-length:\s*(\d+)", head)
        body = await r.readexactly(int(n.group(1))) if n else b""
        return status, body

    try:
        status, body = await asyncio.wait_for(talk(), timeout)
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, IndexError):
        status, body = None, b""
    w.close()
    return status, body, time.monotonic() - t0


def infer_request(body):
    return (f"POST {PATH} HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def why(status, body):
    """A client's name for what it saw, in the server's outcome words."""
    if status == 200:
        return "completed"
    if status is None:
        return "no_answer"
    text = body.decode(errors="replace")
    for key, outcome in [("queue full", "queue_full"), ("overloaded", "overloaded"),
                         ("too many connections", "too_many_connections"),
                         ("shutting down", "shutting_down"), ("did not arrive", "timed_out")]:
        if key in text:
            return outcome
    return f"status_{status}"


async def slowloris(srv, n=100):
    print(f"slowloris: {n} connections sending headers a byte every 0.3 s, header timeout {HEADER_S} s")
    closed_after = []

    async def loris():
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        t0 = time.monotonic()
        head = f"POST {PATH} HTTP/1.1\r\nHost: soak\r\nX-Slow: " + "a" * 1000
        for ch in head:
            try:
                w.write(ch.encode())
                await w.drain()
                if await asyncio.wait_for(r.read(1), 0.3) == b"":
                    break
            except asyncio.TimeoutError:
                continue
            except OSError:
                break
        closed_after.append(time.monotonic() - t0)
        w.close()

    lorises = [asyncio.create_task(loris()) for _ in range(n)]
    await asyncio.sleep(0.5)
    good = await exchange(srv.port, infer_request(BODY), timeout=30)
    await asyncio.wait_for(asyncio.gather(*lorises), HEADER_S + 30)
    check(good[0] == 200, f"a well-behaved request among them is answered 200 (got {good[0]})")
    worst = max(closed_after)
    check(worst < HEADER_S + MARGIN_S,
          f"every slow connection closed by the server within {HEADER_S + MARGIN_S:.0f} s (last: {worst:.1f} s)")
    return 1 if good[0] == 200 else 0


async def stalled(srv, n=50):
    print(f"stalled: {n} bodies that declare 1,000 bytes and send 10, body timeout {BODY_S} s")
    raw = (f"POST {PATH} HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n" + "{" * 10).encode()
    got = await asyncio.gather(*[exchange(srv.port, raw, timeout=BODY_S + 30) for _ in range(n)])
    statuses = [s for s, _, _ in got]
    check(statuses.count(408) == n, f"each answered 408 ({statuses.count(408)} of {n})")
    worst = max(t for _, _, t in got)
    check(worst < BODY_S + MARGIN_S, f"within {BODY_S + MARGIN_S:.0f} s (last: {worst:.1f} s)")
    return n


async def flood(srv, n, concurrency, samples):
    print(f"flood: {n} ResNet-50 requests of {len(BODY) / 1e6:.2f} MB, {concurrency} at once "
          f"(--max-inflight-mib {INFLIGHT_MIB}, --max-connections {MAX_CONNECTIONS}, --max-queue {MAX_QUEUE})")
    gate = asyncio.Semaphore(concurrency)
    raw = infer_request(BODY)

    async def one():
        async with gate:
            s, b, _ = await exchange(srv.port, raw)
            return why(s, b)

    async def watch():
        while True:
            samples.append(srv.kib("VmRSS"))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    seen = await asyncio.gather(*[one() for _ in range(n)])
    watcher.cancel()
    counts = {}
    for s in seen:
        counts[s] = counts.get(s, 0) + 1
    return counts


async def declared(srv, n=8):
    print(f"declared: 4 connections declaring 64 MiB bodies and sending none; {n} inferences meanwhile")
    head = (f"POST {PATH} HTTP/1.1\r\nHost: soak\r\nContent-Length: {64 << 20}\r\n\r\n").encode()
    holders = []
    for _ in range(4):
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(head)
        await w.drain()
        holders.append(w)
    await asyncio.sleep(0.5)
    seen = [why(*(await exchange(srv.port, infer_request(BODY)))[:2]) for _ in range(n)]
    check(seen.count("completed") == n, f"{n} inferences beside the declarations answered 200 ({seen})")
    big = (f"POST {PATH} HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000000000\r\n"
           "Connection: close\r\n\r\n").encode()
    status, body, secs = await exchange(srv.port, big, timeout=30)
    check(status == 413 and secs < 1.0 + MARGIN_S,
          f"a body declared over --max-body-mib answered 413 at once ({status} after {secs:.1f} s)")
    for w in holders:
        w.close()
    return n


def slow_table(binary):
    """A latency table for ResNet-50 that prices every node at 60 s at every batch, from the NPU
    model's own (its shapes and keys kept)."""
    import os
    import tempfile
    d = tempfile.mkdtemp(prefix="soak-slow-")
    path = os.path.join(d, "r50.json")
    subprocess.run([binary, "profile", "--device", "npu", "--model", MODEL, "--max-batch", "8",
                    "--save", path], check=True, capture_output=True)
    with open(path) as f:
        t = json.load(f)
    for n in t["nodes"]:
        n["latency_ns"] = [60_000_000_000] * len(n["latency_ns"])
    slow = os.path.join(d, "slow.json")
    with open(slow, "w") as f:
        json.dump(t, f)
    return slow


async def slow_node(binary):
    print(f"slow node: a table of 60 s a node, 3 requests in, SIGTERM (shutdown timeout {SHUTDOWN_S} s)")
    slow = slow_table(binary)
    srv = Server(binary, device=f"profile:{slow}", extra=("--max-batch", "8"))
    clients = [asyncio.create_task(exchange(srv.port, infer_request(BODY), timeout=SHUTDOWN_S + 30))
               for _ in range(3)]
    await asyncio.sleep(1.0)
    stopping = asyncio.get_running_loop().run_in_executor(None, srv.stop)
    secs, code, out = await stopping
    await asyncio.gather(*clients)
    told = summary(out)
    check(code == 0 and secs < SHUTDOWN_S + MARGIN_S,
          f"exit 0 within {SHUTDOWN_S + MARGIN_S:.0f} s of SIGTERM with a minute-long node running ({secs:.1f} s, code {code})")
    check(told.get("abandoned", 0) == 3, f"the 3 requests counted abandoned ({told})")
    # a second signal does not wait even for the connections' share
    srv = Server(binary, device=f"profile:{slow}", extra=("--max-batch", "8"))
    held = [asyncio.create_task(exchange(srv.port, infer_request(BODY), timeout=SHUTDOWN_S + 30))
            for _ in range(2)]
    await asyncio.sleep(1.0)
    t0 = time.monotonic()
    srv.p.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    srv.p.send_signal(signal.SIGTERM)
    try:
        srv.p.communicate(timeout=SHUTDOWN_S + 60)
    except subprocess.TimeoutExpired:
        srv.p.kill()
        srv.p.communicate()
    secs = time.monotonic() - t0
    await asyncio.gather(*held)
    check(srv.p.returncode == 130 and secs < 0.3 + MARGIN_S,
          f"a second SIGTERM exits at once, status 130 ({secs:.1f} s, code {srv.p.returncode})")


async def main():
    global BODY, INFLIGHT_MIB, MAX_CONNECTIONS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/lazybatch")
    ap.add_argument("--flood", type=int, default=3000, help="requests in the flood (default 3000)")
    ap.add_argument("--concurrency", type=int, default=600, help="flood clients at once (default 600)")
    ap.add_argument("--max-inflight-mib", type=int, default=INFLIGHT_MIB,
                    help=f"the server's --max-inflight-mib (default {INFLIGHT_MIB})")
    ap.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                    help=f"the server's --max-connections (default {MAX_CONNECTIONS})")
    a = ap.parse_args()
    INFLIGHT_MIB, MAX_CONNECTIONS = a.max_inflight_mib, a.max_connections
    BODY = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224],
                                   "data": [0.123456] * (3 * 224 * 224)}]}).encode()
    t_start = time.monotonic()

    srv = Server(a.bin)
    base = srv.kib("VmRSS")
    answered = await slowloris(srv)
    timed_out = await stalled(srv)
    samples = []
    counts = await flood(srv, a.flood, a.concurrency, samples)
    flooded = sum(counts.values())
    counts["completed"] = counts.get("completed", 0) + answered
    await asyncio.sleep(2)
    idle = srv.kib("VmRSS")
    peak = srv.kib("VmHWM")
    secs, code, out = srv.stop()
    told = summary(out)
    print(f"  clients saw: {counts}")
    print(f"  server counted: {told}")
    print(f"  resident memory: {base / 1024:.0f} MiB at start, peak {peak / 1024:.0f} MiB, "
          f"{idle / 1024:.0f} MiB 2 s after the flood")
    bound = INFLIGHT_MIB + BASE_MIB
    check(peak < bound * 1024, f"peak resident memory under {bound} MiB (--max-inflight-mib + {BASE_MIB})")
    check(idle < base + (INFLIGHT_MIB + 64) * 1024,
          "memory falls back after the flood (under start + the in-flight bound + 64 MiB)")
    check(code == 0 and "stopped:" in out, f"shutdown exit 0 with its summary on stdout (exit {code})")
    for outcome in ["completed", "queue_full", "overloaded"]:
        check(told.get(outcome, 0) == counts.get(outcome, 0),
              f"{outcome}: the server's {told.get(outcome, 0)} = the clients' {counts.get(outcome, 0)}")
    silent = counts.get("no_answer", 0)
    check(told.get("too_many_connections", 0) == counts.get("too_many_connections", 0) + silent,
          f"too_many_connections: the server's {told.get('too_many_connections', 0)} = the clients' "
          f"{counts.get('too_many_connections', 0)} told + {silent} closed without a word")
    check(told.get("timed_out", 0) == timed_out, f"timed_out: the server's {told.get('timed_out', 0)} = {timed_out} stalled")
    check(flooded == a.flood, "every flood request has exactly one outcome at the client")
    other = {k: v for k, v in counts.items() if k not in
             ("completed", "queue_full", "overloaded", "too_many_connections", "no_answer")}
    check(not other, f"no other answers ({other})")

    print(f"sigterm: SIGTERM after 1.5 s of a flood with 20 half-sent headers and 20 stalled bodies open "
          f"(shutdown timeout {SHUTDOWN_S} s)")
    srv = Server(a.bin)
    gate = asyncio.Semaphore(200)
    raw = infer_request(BODY)

    async def one():
        async with gate:
            s, b, _ = await exchange(srv.port, raw, timeout=SHUTDOWN_S + 30)
            return why(s, b)

    async def hold(raw):
        return await exchange(srv.port, raw, timeout=SHUTDOWN_S + 30)

    half = f"POST {PATH} HTTP/1.1\r\nHost: soak\r\n".encode()
    stall = f"POST {PATH} HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n{{".encode()
    holders = [asyncio.create_task(hold(half)) for _ in range(20)] + \
        [asyncio.create_task(hold(stall)) for _ in range(20)]
    flooders = asyncio.gather(*[one() for _ in range(1000)])
    await asyncio.sleep(1.5)
    stopping = asyncio.get_running_loop().run_in_executor(None, srv.stop)
    seen = await flooders
    await asyncio.gather(*holders)
    secs, code, out = await stopping
    told = summary(out)
    ok200 = seen.count("completed")
    print(f"  exited after {secs:.1f} s, code {code}; clients got {ok200} answers 200; server: {told}")
    check(code == 0 and secs < SHUTDOWN_S + MARGIN_S,
          f"exit 0 within {SHUTDOWN_S + MARGIN_S:.0f} s of SIGTERM ({secs:.1f} s)")
    check("stopped:" in out, "its summary on stdout")
    check(told.get("completed", -1) == ok200, f"completed: the server's {told.get('completed')} = the clients' {ok200}")
    srv = Server(a.bin)
    await declared(srv)
    srv.stop()
    await slow_node(a.bin)
    print(f"soak: {time.monotonic() - t_start:.0f} s, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
