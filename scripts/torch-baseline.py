#!/usr/bin/env python3
"""PyTorch eager on the same card, the peer of `lazybatch profile --device cuda`: the latency of
one forward pass of ResNet-50, VGG-16 (torchvision, random weights, 224x224), MobileNet-v1
(written here as TF-slim's, which lazybatch's zoo model follows: torchvision has none; BN and
ReLU6 after each convolution) and BERT-base (transformers, random weights, 128 tokens) at batch
1, 8, 32 and 64, f32 and f16, as the median of CUDA event timings after a warm-up. The input is
on the card before the clock starts (lazybatch reports its input nodes apart for that reason).
TF32 is off for f32 (in cuDNN too, where PyTorch allows it by default), so f32 here is the
arithmetic lazybatch's f32 uses. Prints one table; `--json FILE` also writes its rows
(`scripts/speed-vs-torch.py` sets them beside lazybatch's tables).

Usage: python3 scripts/torch-baseline.py [--batches 1,8,32,64] [--reps 20] [--models a,b]
       [--json FILE]"""
import argparse
import json

import torch


def mobilenet_v1():
    """MobileNet-v1 1.0-224 as TF-slim defines it (models/mobilenet_v1.toml's sources): a 3x3/2
    convolution to 32 channels, 13 depthwise-separable blocks, average pool, 1000 classes."""
    from torch import nn

    def conv(cin, cout, k, stride, groups):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU6(inplace=True)]

    layers = conv(3, 32, 3, 2, 1)
    cin = 32
    for cout, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                         (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]:
        layers += conv(cin, cin, 3, stride, cin) + conv(cin, cout, 1, 1, 1)
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000))


def models():
    import torchvision

    yield "resnet50", lambda: torchvision.models.resnet50(weights=None), "image"
    yield "vgg16", lambda: torchvision.models.vgg16(weights=None), "image"
    yield "mobilenet_v1", mobilenet_v1, "image"
    try:
        import transformers

        cfg = transformers.BertConfig()  # BERT-base: L=12, H=768, A=12, vocab 30,522
        yield "bert_base", lambda: transformers.BertModel(cfg), "tokens"
    except ImportError:
        print("(transformers missing: BERT skipped)")


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--models", default="", help="only these (comma-separated; default: all)")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    a = ap.parse_args()
    only = set(filter(None, a.models.split(",")))
    rows = []
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    print(f"PyTorch {torch.__version__} eager on {torch.cuda.get_device_name(0)}, TF32 off")
    print(f"{'model':<10} {'precision':<9} {'batch':>5} {'ms':>10} {'per input (ms)':>15}")
    for name, build, kind in models():
        if only and name not in only:
            continue
        for dtype in (torch.float32, torch.float16):
            torch.manual_seed(1)
            m = build().to(dev, dtype).eval()
            for b in (int(x) for x in a.batches.split(",")):
                if kind == "image":
                    x = torch.randn(b, 3, 224, 224, device=dev, dtype=dtype)
                    args = (x,)
                else:
                    ids = torch.randint(0, 30522, (b, 128), device=dev)
                    args = (ids,)
                with torch.no_grad():
                    ms = time_ms(lambda: m(*args), a.reps)
                prec = "f32" if dtype == torch.float32 else "f16"
                print(f"{name:<10} {prec:<9} {b:>5} {ms:>10.3f} {ms / b:>15.4f}", flush=True)
                rows.append({"model": name, "precision": prec, "batch": b, "ms": ms})
            del m
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "card": torch.cuda.get_device_name(0), "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
