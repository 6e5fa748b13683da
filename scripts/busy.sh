#!/usr/bin/env bash
# Runs a command beside a bounded busy load: BUSY_PER_CORE busy loops (default 2) on every core
# of this machine, each stopped when the command ends or after BUSY_MAX_S seconds (default 900),
# whichever comes first. The command's exit status is the script's.
#
#   scripts/busy.sh cargo test --release --features check --test it -- cpu::
#
# This is how CI checks that no test depends on how busy the machine is (.ci/run, "busy"):
# a test that passes alone and fails here measures the machine, not the program.
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: scripts/busy.sh COMMAND [ARGS...]" >&2
  exit 2
fi
per_core=${BUSY_PER_CORE:-2}
max_s=${BUSY_MAX_S:-900}
case "$per_core$max_s" in
  *[!0-9]*) echo "busy.sh: BUSY_PER_CORE and BUSY_MAX_S are whole numbers" >&2; exit 2 ;;
esac
cores=$(nproc)
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait "${pids[@]}" 2>/dev/null
}
trap stop EXIT INT TERM
for _ in $(seq 1 $((cores * per_core))); do
  timeout "$max_s" bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "busy.sh: $((cores * per_core)) busy loops on $cores cores (at most ${max_s} s) beside: $*" >&2
"$@"
