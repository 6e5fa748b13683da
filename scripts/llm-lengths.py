#!/usr/bin/env python3
"""Build data/llm/ from the Azure LLM inference trace 2023 (conversation service).

    python3 scripts/llm-lengths.py AzureLLMInferenceTrace_conv.csv [--out data/llm]

The input is `data/AzureLLMInferenceTrace_conv.csv` of github.com/Azure/AzurePublicDataset
(snapshot b469a11; CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024): one row per request,
TIMESTAMP,ContextTokens,GeneratedTokens, 19,366 requests over one hour of 2023-11-16.

Writes, like data/wmt/ (aggregate counts, no content -- the trace has none):
  azure-conv-2023-profile.csv  prompt_tokens,generated_tokens,count  the first 30 minutes
  azure-conv-2023-joint.csv    prompt_tokens,generated_tokens,count  the rest
  azure-conv-2023-first1000.trace  the first 1,000 requests of the rest that fit a
                               1,024-token context, as a lazybatch trace (TIME_MS PROMPT OUTPUT)

Python 3 standard library only.
"""

import argparse
import collections
import csv
import datetime
import os
import sys

SPLIT_MINUTES = 30      # profile: the trace's first half hour; requests: the rest
CONTEXT = 1024          # GPT-2's n_positions: the trace file keeps requests that fit it
TRACE_REQUESTS = 1000


def read(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            t = datetime.datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
            rows.append((t, int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    rows.sort(key=lambda x: x[0])
    return rows


def write_joint(path, rows, head):
    c = collections.Counter((p, g) for _, p, g in rows)
    with open(path, "w") as f:
        f.write(head + "\n")
        for (p, g), n in sorted(c.items()):
            f.write(f"{p},{g},{n}\n")
    return len(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data", "llm"))
    a = ap.parse_args()
    rows = read(a.csv)
    t0 = rows[0][0]
    cut = t0 + datetime.timedelta(minutes=SPLIT_MINUTES)
    first = [r for r in rows if r[0] < cut]
    rest = [r for r in rows if r[0] >= cut]
    os.makedirs(a.out, exist_ok=True)
    head = "prompt_tokens,generated_tokens,count"
    n1 = write_joint(os.path.join(a.out, "azure-conv-2023-profile.csv"), first, head)
    n2 = write_joint(os.path.join(a.out, "azure-conv-2023-joint.csv"), rest, head)
    fit = [r for r in rest if r[1] + r[2] <= CONTEXT][:TRACE_REQUESTS]
    with open(os.path.join(a.out, "azure-conv-2023-first1000.trace"), "w") as f:
        f.write(f"# Azure LLM inference trace 2023 (conversation), from {fit[0][0]:%H:%M:%S} on: the first\n")
        f.write(f"# {len(fit)} requests whose prompt + output fit {CONTEXT} tokens, at their own times.\n")
        f.write("# TIME_MS PROMPT_TOKENS OUTPUT_TOKENS (scripts/llm-lengths.py; data/llm/README.md)\n")
        s = fit[0][0]
        for t, p, g in fit:
            ms = (t - s).total_seconds() * 1e3
            f.write(f"{ms:.3f} {p} {g}\n")
    print(f"profile: {len(first)} requests, {n1} pairs; joint: {len(rest)} requests, {n2} pairs; "
          f"trace: {len(fit)} requests over {(fit[-1][0] - fit[0][0]).total_seconds():.1f} s")


if __name__ == "__main__":
    sys.exit(main())
