#!/usr/bin/env bash
# Regenerates every figure the README and docs/ show (docs/figures/) and prints the README's
# headline table: the full `reproduce` with every experiment (both NPU configurations, 20 seeds,
# `--figures all`: the default run and the `beyond` experiments) and `compare --out`
# for ResNet-50 and the Transformer on the paper-calibrated configuration.
# Usage: scripts/figures.sh [OUT]   (OUT defaults to out/reproduce; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
out=${1:-out/reproduce}
"$bin" reproduce --figures all --out "$out"
for f in eval_latency sla cdf lifo capacity; do
  cp "$out/paper/$f.svg" "docs/figures/$f.svg"
done
cp "$out/default/eval_latency.svg" docs/figures/eval_latency_default.svg
cp "$out/paper/adaptive_heat.svg" docs/figures/adaptive_heat.svg
cp "$out/paper/dominance_heat.svg" docs/figures/dominance_heat.svg
cp "$out/default/bursts.svg" docs/figures/bursts.svg
cp "$out/default/goodput_cdf.svg" docs/figures/goodput_cdf.svg
cp "$out/default/goodput.svg" docs/figures/goodput.svg
cp "$out/paper/tokens.svg" docs/figures/tokens.svg
cp "$out/default/llm.svg" docs/figures/llm.svg
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in resnet50 transformer; do
  "$bin" compare --device npu --npu-config paper --model "$m" --rates 16,250,1000 --out "$tmp/$m" > /dev/null
done
cp "$tmp/resnet50/resnet50_1000rps_spectrum.svg" docs/figures/spectrum_resnet50_1000rps.svg
cp "$tmp/transformer/transformer_base_1000rps_spectrum.svg" docs/figures/spectrum_transformer_1000rps.svg
echo "figures written to docs/figures; the headline table:"
sed -n '/^## Headline claims/,/^\*\*Definitions/p' "$out/report.md" | sed '1,2d;$d'
