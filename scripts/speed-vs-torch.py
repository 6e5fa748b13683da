#!/usr/bin/env python3
"""lazybatch's CUDA batching curve beside PyTorch eager's, like for like, from one card's run.

Reads the latency tables `lazybatch profile --device cuda --save` wrote (named as
scripts/gpu-check.sh's speed part names them: MODEL-PRECISION-CONV[-graphs].profile.json) and
PyTorch's rows from scripts/torch-baseline.py (its `--json` file, or its printed table in a
report), and prints, per model, precision and batch: lazybatch's whole pass, its input nodes'
share (making or copying the requests' values, which PyTorch's timing leaves out: its input is on
the card before the clock starts), the pass without them on each path, PyTorch's forward pass,
and the ratio of the best path's pass without inputs to PyTorch's (below 1: faster than PyTorch
eager). The models are static (every node once a request), so a pass is its nodes' sum.

Usage: scripts/speed-vs-torch.py TABLES_DIR TORCH [--batches 1,8,32,64]
  TORCH: torch-baseline.py's --json file, or a file holding its printed table (a gpu-check
  report)."""
import argparse
import glob
import json
import os
import re
import sys


def torch_rows(path):
    """{(model, precision, batch): ms} from torch-baseline.py's JSON or printed table."""
    text = open(path).read()
    try:
        return {(r["model"], r["precision"], r["batch"]): r["ms"] for r in json.loads(text)["rows"]}
    except (ValueError, KeyError, TypeError):
        pass
    rows = {}
    for m in re.finditer(r"(?m)^(\w+)\s+(f32|f16)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s*$", text):
        rows[(m.group(1), m.group(2), int(m.group(3)))] = float(m.group(4))
    return rows


def tables(folder):
    """{(model, precision): {path: (total_ms by batch, inputs_ms by batch)}}."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.profile.json"))):
        stem = os.path.basename(f)[: -len(".profile.json")]
        m = re.fullmatch(r"(.+)-(f32|f16)-(cudnn-legacy|cudnn|im2col)(-graphs)?", stem)
        if not m:
            continue
        t = json.load(open(f))
        n = len(t["nodes"][0]["latency_ns"])
        total = [sum(x["latency_ns"][b] for x in t["nodes"]) / 1e6 for b in range(n)]
        inputs = [sum(x["latency_ns"][b] for x in t["nodes"] if x["op"] == "input") / 1e6 for b in range(n)]
        path = m.group(3) + (" graphs" if m.group(4) else "")
        out.setdefault((m.group(1), m.group(2)), {})[path] = (total, inputs)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables")
    ap.add_argument("torch")
    ap.add_argument("--batches", default="1,8,32,64")
    a = ap.parse_args()
    peer = torch_rows(a.torch)
    ours = tables(a.tables)
    if not ours or not peer:
        sys.exit(f"nothing to compare: {len(ours)} tables in {a.tables}, {len(peer)} PyTorch rows in {a.torch}")
    batches = [int(b) for b in a.batches.split(",")]
    paths = sorted({p for v in ours.values() for p in v})
    head = ["model", "prec", "batch", "ours (ms)", "inputs (ms)"] + [f"{p} w/o inputs" for p in paths] + \
        ["PyTorch (ms)", "best / PyTorch"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (model, prec), by_path in sorted(ours.items()):
        for b in batches:
            if (model, prec, b) not in peer or any(b > len(t) for t, _ in by_path.values()):
                continue
            torch_ms = peer[(model, prec, b)]
            # the default path's whole pass and its input share
            first = by_path.get("cudnn") or next(iter(by_path.values()))
            cells = [model, prec, str(b), f"{first[0][b - 1]:.3f}", f"{first[1][b - 1]:.3f}"]
            best = None
            for p in paths:
                if p not in by_path:
                    cells.append("-")
                    continue
                t, i = by_path[p]
                net = t[b - 1] - i[b - 1]
                best = net if best is None else min(best, net)
                cells.append(f"{net:.3f}")
            cells += [f"{torch_ms:.3f}", f"{best / torch_ms:.2f}x"]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
