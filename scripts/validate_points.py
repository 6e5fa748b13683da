#!/usr/bin/env python3
"""Per point of one model's CPU validation (scripts/validate-cpu.sh): the measured mean and p99
(run1), the table's prediction and its error, and how far a second real run of the same arrivals
(run2) landed from run1, the device's own spread; a point whose prediction is off by no more
than that spread is marked as within it. Reads DIR/replay-table/validate.json and
DIR/run2/compare.json, prints a Markdown table."""
import json
import sys

d = sys.argv[1]
points = json.load(open(f"{d}/replay-table/validate.json"))
again = {(r["policy"], round(r["rate_rps"], 3)): r for r in json.load(open(f"{d}/run2/compare.json"))}


def rel(a, b):
    return b / a - 1 if a else float("nan")


print("| policy | rate/s | mean: measured | predicted | error | run2 | run2 − run1 | p99: measured | predicted | error | run2 − run1 | within the spread (mean, p99) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
within = [0, 0]
for p in points:
    m, q = p["measured"]["latency_ms"], p["predicted"]["latency_ms"]
    r = again[(p["policy"], round(p["rate_rps"], 3))]["latency_ms"]
    e_mean, e_p99 = rel(m["mean"], q["mean"]), rel(m["p99"], q["p99"])
    s_mean, s_p99 = rel(m["mean"], r["mean"]), rel(m["p99"], r["p99"])
    ok = (abs(e_mean) <= abs(s_mean), abs(e_p99) <= abs(s_p99))
    within = [w + int(o) for w, o in zip(within, ok)]
    print(f"| {p['policy']} | {p['rate_rps']:.1f} | {m['mean']:.2f} | {q['mean']:.2f} | {100 * e_mean:+.1f}% "
          f"| {r['mean']:.2f} | {100 * s_mean:+.1f}% | {m['p99']:.2f} | {q['p99']:.2f} | {100 * e_p99:+.1f}% "
          f"| {100 * s_p99:+.1f}% | {'yes' if ok[0] else 'no'}, {'yes' if ok[1] else 'no'} |")
print(f"\n{within[0]} of {len(points)} points' mean and {within[1]} of {len(points)} points' p99 "
      "are predicted within the distance between the two real runs.")
