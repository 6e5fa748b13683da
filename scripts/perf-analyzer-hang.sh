#!/usr/bin/env bash
# perf_analyzer 2.60's HTTP sync mode at concurrency 64 against `lazybatch serve`, bounded:
# RUNS runs of `-i http --concurrency-range 64 --request-count 5000` against the ResNet-50 NPU
# server, each watched; a run still alive 15 s after the server answered its 5,000th request is
# called hung, its state is printed (threads and where they sleep, its sockets and the server's,
# its threads' stacks with perf_analyzer's symbols) and it is killed. Prints one line a run and
# a tally; exit 0 whatever it finds (a hang is a finding, docs/serve.md).
#
# perf_analyzer 2.60 (PyPI `perf-analyzer`) needs glibc 2.38 and GCC 14's libstdc++; this VM has
# glibc 2.36, so they come from Debian 13 (trixie) packages, unpacked (not installed) under
# target/perf-analyzer-2.60, and perf_analyzer runs under trixie's loader. Needs gdb for the
# stacks (optional).
#
# Usage: scripts/perf-analyzer-hang.sh [RUNS]   (default 10; about 15 s a run that ends)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
cache=target/perf-analyzer-2.60
if [ ! -x "$cache/pa/perf_analyzer/bin/perf_analyzer" ]; then
  mkdir -p "$cache/pa" "$cache/apt/lists/partial" "$cache/debs" "$cache/root"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_38_x86_64 "perf-analyzer==2.60.0" -d "$cache/pa" >&2
  (cd "$cache/pa" && unzip -q -o ./*.whl && chmod +x perf_analyzer/bin/perf_analyzer)
  echo "deb http://deb.debian.org/debian trixie main" > "$cache/sources.list"
  apt=(-q -o "Dir::Etc::SourceList=$PWD/$cache/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o "Dir::State::Lists=$PWD/$cache/apt/lists")
  apt-get "${apt[@]}" update >&2
  (cd "$cache/debs" && apt-get "${apt[@]}" download libc6 libstdc++6 libgcc-s1 >&2)
  for d in "$cache"/debs/*.deb; do dpkg-deb -x "$d" "$cache/root"; done
fi
L=$PWD/$cache/root/usr/lib/x86_64-linux-gnu
PA=$PWD/$cache/pa/perf_analyzer/bin/perf_analyzer
pa() { "$L/ld-linux-x86-64.so.2" --library-path "$L:/lib/x86_64-linux-gnu" "$PA" "$@"; }
echo "perf_analyzer: PyPI perf-analyzer 2.60.0 ($(pa --version 2>&1 | head -1)), under Debian 13's loader"
cargo build --release --quiet
TMP=$(mktemp -d)
target/release/lazybatch serve --model resnet50 --device npu --policy lazy \
  --listen 127.0.0.1:0 2>"$TMP/serve.err" >"$TMP/serve.out" &
SPID=$!
trap 'kill $SPID 2>/dev/null || true; rm -rf "$TMP"' EXIT
for _ in $(seq 300); do grep -q "serving" "$TMP/serve.err" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o 'http://[0-9.:]*' "$TMP/serve.err" | head -1 | sed 's|http://||')
completed() { curl -s "http://$addr/metrics" | awk '/outcome="completed"/ {print $2}' | head -1; }
ended=0 hung=0
for run in $(seq "$RUNS"); do
  before=$(completed); before=${before:-0}
  pa -m resnet50 -u "$addr" -i http --concurrency-range 64 --request-count 5000 >"$TMP/pa.txt" 2>&1 &
  P=$! t0=$(date +%s) answered=""
  verdict=""
  while kill -0 $P 2>/dev/null; do
    sleep 1
    now=$(completed); now=${now:-0}
    [ -z "$answered" ] && [ $((now - before)) -ge 5000 ] && answered=$(date +%s)
    if [ -n "$answered" ] && [ $(( $(date +%s) - answered )) -ge 15 ]; then
      verdict="HUNG: the server answered $((now - before)) by +$((answered - t0)) s; perf_analyzer still running at +$(( $(date +%s) - t0 )) s"
      echo "run $run: $verdict"
      echo "  its threads:"; for t in /proc/$P/task/*; do echo "    $(cat "$t/comm") asleep in $(cat "$t/wchan")"; done
      echo "  its sockets: $(ss -tanp | grep "pid=$P," | awk '{print $1}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
      echo "  the server's side: $(ss -tan | grep "$addr " | awk '{print $1}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
      if command -v gdb >/dev/null; then
        base=$(grep perf_analyzer "/proc/$P/maps" | head -1 | cut -d- -f1)
        gdb -p $P -batch -ex "add-symbol-file $PA -o 0x$base" -ex "thread apply all bt 12" 2>/dev/null \
          | grep '^#' | sed 's/^/    /' | head -14
      fi
      kill $P; wait $P 2>/dev/null || true
      hung=$((hung + 1))
      break
    fi
    if [ $(( $(date +%s) - t0 )) -ge 180 ]; then
      verdict="did not get its 5,000 answers in 180 s"; echo "run $run: $verdict"; kill $P; break
    fi
  done
  if [ -z "$verdict" ]; then
    wait $P && rc=0 || rc=$?
    echo "run $run: ended in $(( $(date +%s) - t0 )) s (exit $rc), $(awk '/Throughput:/ {print $2, $3; exit}' "$TMP/pa.txt")"
    ended=$((ended + 1))
  fi
done
echo "tally: $ended ended, $hung hung of $RUNS; the server counted $(completed) completed, $(curl -s "http://$addr/metrics" | awk '/^lazybatch_requests_in_server / {print $2}') in the server"
