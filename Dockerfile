# lazybatch serve in a container (docs/deploy.md). Two targets:
#   docker build -t lazybatch .                          # the slim runtime: NPU model and CPU device
#   docker build --target cuda -t lazybatch:cuda .       # plus cuBLAS, cuBLASLt, NVRTC and cuDNN from their wheels
# The entrypoint is `lazybatch serve` on 0.0.0.0, HTTP on 8080 and gRPC on 8081 (the ports KServe
# expects); arguments after the image name choose the model, device and policy, e.g.
#   docker run -p 8080:8080 lazybatch --model resnet50 --device npu --policy lazy
# scripts/check-deploy.py stages the runtime's files and runs its entrypoint without a container
# engine, and checks the manifests in deploy/ against it.

# 1. build: the toolchain rust-toolchain.toml names, the locked dependencies
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked && strip target/release/lazybatch

# 2. the runtime: the binary, the model zoo and the NPU configurations (both are also built into
# the binary; the files are there to read and copy), nothing else
FROM debian:bookworm-slim AS runtime
RUN useradd --system --uid 10001 lazybatch
COPY --from=build /src/target/release/lazybatch /usr/local/bin/lazybatch
COPY models /opt/lazybatch/models
COPY configs /opt/lazybatch/configs
USER 10001
EXPOSE 8080 8081
ENTRYPOINT ["lazybatch", "serve", "--listen", "0.0.0.0:8080", "--grpc-listen", "0.0.0.0:8081"]
CMD ["--model", "resnet50", "--device", "npu", "--policy", "lazy"]

# 3. the CUDA variant: the libraries the CUDA device loads at run time, from PyPI's wheels (the
# NVIDIA driver comes from the node, through the NVIDIA container toolkit)
FROM runtime AS cuda
USER root
# (the wheels' library folders go to the loader's cache, whatever their layout: CUDA 13's
# wheels put theirs under nvidia/cu13/lib, cuDNN's under nvidia/cudnn/lib)
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \
    && pip3 install --no-cache-dir --break-system-packages --target /opt/nvidia \
       'nvidia-cublas==13.*' 'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cudnn-cu13==9.*' \
    && find /opt/nvidia -name 'lib*.so*' -printf '%h\n' | sort -u > /etc/ld.so.conf.d/nvidia-wheels.conf \
    && ldconfig \
    && apt-get purge -y python3-pip && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
USER 10001
CMD ["--model", "resnet50", "--device", "cuda", "--policy", "lazy"]
