#!/usr/bin/env bash
# Memory against run length: the maximum resident set size of `lazybatch run` (NPU model,
# ResNet-50 under LazyB at 1,000 req/s; GNMT at 200 req/s) for 10^5 .. 10^8 requests, with the
# wall time. Flat memory is the goal (within 10% from 10^6 to 10^8).
# With BASE=path/to/an/older/lazybatch the same runs of that binary print beside (up to 10^7:
# an unbounded build needs ~125 bytes a request).
# Usage: scripts/bench-memory.sh [MAX_EXPONENT (default 8)]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
max=${1:-8}
measure() { # binary model rate n -> "maxrss_kB wall_s"
  /usr/bin/time -f '%M %e' "$1" run --device npu --model "$2" --policy lazy --rate "$3" --requests "$4" 2>&1 >/dev/null | tail -1
}
printf '%-10s %12s %14s %10s' model requests "max RSS (MB)" "wall (s)"
[ -n "${BASE:-}" ] && printf ' %18s %10s' "BASE max RSS (MB)" "wall (s)"
printf '\n'
for spec in "resnet50 1000 $max" "gnmt 200 $(( max < 7 ? max : 7 ))"; do
  set -- $spec
  for e in $(seq 5 "$3"); do
    n=$((10**e))
    read -r rss wall <<<"$(measure "$bin" "$1" "$2" "$n")"
    printf '%-10s %12s %14.1f %10.2f' "$1" "1e$e" "$(echo "$rss/1024" | bc -l)" "$wall"
    if [ -n "${BASE:-}" ] && [ "$e" -le 7 ]; then
      read -r rss wall <<<"$(measure "$BASE" "$1" "$2" "$n")"
      printf ' %18.1f %10.2f' "$(echo "$rss/1024" | bc -l)" "$wall"
    fi
    printf '\n'
  done
done
