#!/usr/bin/env bash
# Checks every CUDA kernel without a GPU: installs NVRTC 13.0 and ptxas from PyPI wheels (cached
# in ~/.cache/lazybatch-cuda), compiles kernels/*.cu through lazybatch's own NVRTC path for sm_80
# and sm_90, and assembles the PTX with ptxas (register and shared-memory limits).
# Prints `export LD_LIBRARY_PATH=...` for the NVRTC library as its last line when asked with
# --print-env. Usage: scripts/check-kernels.sh [--print-env]
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${LAZYBATCH_CUDA_CACHE:-$HOME/.cache/lazybatch-cuda}"
mkdir -p "$cache"
fetch() { # wheel-spec dir
  if [ ! -d "$cache/$2/nvidia" ]; then
    rm -rf "$cache/$2.tmp" && mkdir -p "$cache/$2.tmp"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cache/$2.tmp" "$1" >&2
    python3 -c "import zipfile,glob,sys; zipfile.ZipFile(glob.glob(sys.argv[1]+'/*.whl')[0]).extractall(sys.argv[2])" "$cache/$2.tmp" "$cache/$2"
    rm -rf "$cache/$2.tmp"
  fi
}
fetch "nvidia-cuda-nvrtc==13.0.*" nvrtc
fetch "nvidia-cuda-nvcc==13.0.*" nvcc
lib="$cache/nvrtc/nvidia/cu13/lib"
ptxas="$cache/nvcc/nvidia/cu13/bin/ptxas"
chmod +x "$ptxas"
if [ "${1:-}" = "--print-env" ]; then
  echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  exit 0
fi
cargo build --release --quiet
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for arch in sm_80 sm_90; do
  LD_LIBRARY_PATH="$lib" target/release/lazybatch kernels --arch "$arch" --out "$tmp/$arch" >&2
  for f in "$tmp/$arch"/*.ptx; do
    "$ptxas" -arch="$arch" -v "$f" -o /dev/null 2> "$tmp/ptxas.log" || { cat "$tmp/ptxas.log" >&2; echo "ptxas failed on $f" >&2; exit 1; }
    echo "$arch $(basename "$f"): $(grep -c 'Used' "$tmp/ptxas.log") functions assembled, max $(grep -o 'Used [0-9]* registers' "$tmp/ptxas.log" | awk '{print $2}' | sort -n | tail -1) registers" >&2
  done
done
echo "kernels: NVRTC compile and ptxas assembly OK for sm_80 and sm_90" >&2
