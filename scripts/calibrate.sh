#!/usr/bin/env bash
# Calibration of the NPU model against the paper's Table II (single-batch latency), in both
# array modes: the default (TPU-like double-buffered weights) and SCALE-Sim v2's exact fold count.
# Usage: scripts/calibrate.sh   (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'overlap_weight_load = false\n' > "$tmp/scalesim.toml"
lat() { "$bin" profile --model "$1" --max-batch 1 --json "${@:2}" | python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["single_input_latency_us"]/1e3))'; }
printf '%-18s %-10s %14s %16s %10s %10s\n' model lengths "default (ms)" "SCALE-Sim (ms)" "paper (ms)" "ratio"
for row in "resnet50 - 1.1" "gnmt 30/30 7.2" "transformer 30/30 2.4"; do
  set -- $row
  d=$(lat "$1"); s=$(lat "$1" --npu-config "$tmp/scalesim.toml")
  r=$(python3 -c "print('%.2f' % ($d/$3))")
  printf '%-18s %-10s %14s %16s %10s %10s\n' "$1" "$2" "$d" "$s" "$3" "${r}x"
done
echo
echo "DRAM floor (weights streamed once per step at 360 GB/s, int8):"
python3 - <<'PY'
for name, static_w, enc_w, dec_w in [("gnmt", 0, 47.2e6, 88.8e6), ("transformer", 22.0e6, 0, 39.3e6)]:
    t = (static_w + 30 * enc_w + 30 * dec_w) / 360e9 * 1e3
    print(f"  {name:<12} S=T=30: {t:.2f} ms")
PY
