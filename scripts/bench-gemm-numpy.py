#!/usr/bin/env python3
"""OpenBLAS (through numpy) GFLOP/s on the zoo's GEMM shapes, the reference for
`cargo bench --bench cpu -- gemm`. Needs numpy (pip install numpy threadpoolctl).
Same method as the Rust bench: median of repeated calls after a warm-up, both cores."""
import time
import numpy as np

SHAPES = [
    ("resnet conv 3x3 (layer1)", 3136, 64, 576),
    ("resnet conv 1x1 (layer3)", 196, 1024, 256),
    ("mobilenet pw1 (112x112, 32 in)", 12544, 64, 32),
    ("mobilenet pw2 (56x56, 64 in)", 3136, 128, 64),
    ("mobilenet pw7 (14x14, 512 in)", 196, 512, 512),
    ("resnet conv 3x3 (layer4)", 49, 512, 4608),
    ("resnet fc, batch 64", 64, 1000, 2048),
    ("gnmt lstm, batch 1", 1, 4096, 3072),
    ("gnmt lstm, batch 64", 64, 4096, 3072),
    ("transformer ffn1, 30 tokens", 30, 2048, 512),
    ("transformer logits, batch 64", 64, 33708, 512),
    ("bert qkv, 128 tokens", 128, 2304, 768),
    ("bert ffn2, 128 tokens", 128, 768, 3072),
    ("bert ffn1, 8 x 128 tokens", 1024, 3072, 768),
]

try:
    from threadpoolctl import threadpool_info
    info = threadpool_info()
    print("# " + ", ".join(f"{i['internal_api']} {i.get('version')} {i.get('architecture')} x{i['num_threads']}" for i in info))
except ImportError:
    pass
print(f"{'GEMM':<32} {'M':>6} {'N':>6} {'K':>6} {'ms':>10} {'GFLOP/s':>10}")
rng = np.random.default_rng(1)
for label, m, n, k in SHAPES:
    a = rng.random((m, k), dtype=np.float32) - 0.5
    b = rng.random((k, n), dtype=np.float32) - 0.5
    c = np.empty((m, n), dtype=np.float32)
    np.matmul(a, b, out=c)
    iters = max(3, min(2000, int(2e9 / (2 * m * n * k))))
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        np.matmul(a, b, out=c)
        ts.append(time.perf_counter() - t)
    ts.sort()
    t = ts[len(ts) // 2]
    print(f"{label:<32} {m:>6} {n:>6} {k:>6} {t * 1e3:>10.3f} {2 * m * n * k / t / 1e9:>10.1f}")
