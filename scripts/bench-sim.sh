#!/usr/bin/env bash
# Simulator speed: simulated requests per wall second (NPU model, 1000 req/s, 10,000 requests),
# the time of `compare` with its defaults, and of `profile` for the whole zoo.
# Usage: scripts/bench-sim.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
printf '%-18s %-10s %12s %16s\n' model policy "wall (s)" "sim req/s"
for m in resnet50 gnmt transformer; do
  for p in lazy graph:25; do
    w=$("$bin" run --model "$m" --policy "$p" --rate 1000 --requests 10000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["wall_s"])')
    python3 -c "print('%-18s %-10s %12.3f %16.0f' % ('$m', '$p', $w, 10000/$w))"
  done
done
s=$(date +%s.%N); "$bin" compare --model resnet50 > /dev/null; e=$(date +%s.%N)
python3 -c "print('compare --model resnet50 (8 policies x 3 rates x 10,000 requests): %.2f s' % ($e-$s))"
s=$(date +%s.%N)
for m in resnet50 gnmt transformer vgg16 mobilenet bert las; do "$bin" profile --model "$m" --json > /dev/null; done
e=$(date +%s.%N)
python3 -c "print('profile, all seven models, batch 1..64: %.3f s' % ($e-$s))"
