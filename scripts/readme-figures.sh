#!/usr/bin/env bash
# Renders every figure the README shows to PNG at the width a README shows it (830 px, or the
# figure's own width when narrower), into DIR (default out/readme-figures), to look at as a
# newcomer sees them. Needs rsvg-convert (Debian: apt-get install librsvg2-bin).
# tests/it/figures.rs checks the same figures' text size and LazyB's colour without rendering.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/readme-figures}
command -v rsvg-convert >/dev/null || {
  echo "readme-figures: rsvg-convert not found (apt-get install librsvg2-bin)" >&2
  exit 2
}
mkdir -p "$out"
grep -o '](docs/figures/[A-Za-z0-9_.-]*\.svg)' README.md | sed 's/^](//; s/)$//' | while read -r f; do
  w=$(grep -o '<svg[^>]*width="[0-9]*"' "$f" | head -1 | grep -o 'width="[0-9]*"' | tr -dc 0-9)
  shown=$(( w < 830 ? w : 830 ))
  png="$out/$(basename "$f" .svg).png"
  rsvg-convert -w "$shown" "$f" -o "$png"
  echo "$f: $w px wide, shown at $shown px -> $png"
done
