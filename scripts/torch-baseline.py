#!/usr/bin/env python3
"""PyTorch eager on the same card, the peer of `lazybatch profile --device cuda`: the latency of
one forward pass of ResNet-50, VGG-16 (torchvision, random weights, 224x224) and BERT-base
(transformers, random weights, 128 tokens) at batch 1, 8, 32 and 64, f32 and f16, as the median of CUDA
event timings after a warm-up. TF32 is off for f32 (in cuDNN too, where PyTorch allows it by
default), so f32 here is the arithmetic lazybatch's f32 uses. Prints one table.

Usage: python3 scripts/torch-baseline.py [--batches 1,8,32,64] [--reps 20]"""
import argparse

import torch


def models():
    import torchvision

    yield "resnet50", lambda: torchvision.models.resnet50(weights=None), "image"
    yield "vgg16", lambda: torchvision.models.vgg16(weights=None), "image"
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
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    print(f"PyTorch {torch.__version__} eager on {torch.cuda.get_device_name(0)}, TF32 off")
    print(f"{'model':<10} {'precision':<9} {'batch':>5} {'ms':>10} {'per input (ms)':>15}")
    for name, build, kind in models():
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
            del m
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
