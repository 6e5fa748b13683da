#!/usr/bin/env bash
# The NPU model against the paper's Table II and Fig. 2 (docs/calibration.md): the two shipped
# configurations, then the four fold-timing candidates that the "paper" configuration was
# chosen from (weights one PE row per cycle or at DRAM bandwidth; TPU double-buffered folds or
# SCALE-Sim's exact fold count).
# Usage: scripts/calibrate.sh   (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
echo "## Shipped configurations"
echo
"$bin" calibrate --npu-config default,paper
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'base = "default"\noverlap_weight_load = true\n' > "$tmp/tpu-row.toml"
printf 'base = "default"\noverlap_weight_load = true\nweight_fill_gbps = 360\n' > "$tmp/tpu-dram.toml"
printf 'base = "default"\noverlap_weight_load = false\n' > "$tmp/scalesim-row.toml"
printf 'base = "default"\noverlap_weight_load = false\nweight_fill_gbps = 360\n' > "$tmp/scalesim-dram.toml"
echo
echo "## Candidates (columns: fold timing - weight fill)"
echo
( cd "$tmp" && "$OLDPWD/$bin" calibrate --npu-config tpu-row.toml,tpu-dram.toml,scalesim-row.toml,scalesim-dram.toml )
