#!/usr/bin/env bash
# Runs scripts/gpu-check.sh on a GPU machine without a Rust toolchain, with the binaries that
# scripts/gpu-prebuild.sh made elsewhere in DIR (BIN_DIR, default .gpu): points the path the
# test binary was compiled with at this checkout, puts cuBLAS, cuBLASLt, NVRTC 13 and cuDNN 9
# (the CUDA toolkit's, or the nvidia-cublas / nvidia-cuda-nvrtc / nvidia-cudnn-cu13 Python
# packages') on LD_LIBRARY_PATH, and passes every other setting (OUT, PARTS, STEP_TIMEOUT, SMOKE,
# MODELS) through. cuDNN is optional: without it convolutions run as im2col (the check says so).
set -euo pipefail
cd "$(dirname "$0")/.."
export BIN_DIR="${BIN_DIR:-.gpu}"
BIN_DIR=$(cd "$BIN_DIR" && pwd)
# the test binary reads its fixtures and runs the binary under its build checkout's path
built_in=$(cat "$BIN_DIR/manifest-dir")
if [ "$built_in" != "$PWD" ] && [ ! -e "$built_in" ]; then
  mkdir -p "$(dirname "$built_in")"
  ln -s "$PWD" "$built_in"
fi
mkdir -p target/release
cp "$BIN_DIR/lazybatch" target/release/lazybatch
libs=""
roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64)
py=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
[ -z "$py" ] || roots+=("$py")
roots+=(/usr/lib/x86_64-linux-gnu)
for name in libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libcudnn.so.9; do
  f=$(find "${roots[@]}" -name "$name" 2>/dev/null | head -1 || true)
  if [ -n "$f" ]; then
    case ":$libs:" in *":$(dirname "$f"):"*) ;; *) libs="$libs:$(dirname "$f")" ;; esac
  else
    echo "gpu-prebuilt: $name not found under ${roots[*]}" >&2
  fi
done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "gpu-prebuilt: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
exec scripts/gpu-check.sh
