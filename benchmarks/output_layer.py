"""The output layer alone: the file's Q8_0 blocks on our 8-bit kernel against oneDNN's packed bfloat16 weight.

SmolLM2's embedding (tied to its output layer, 49152 x 576) as the GGUF stores it, x in bfloat16 for 1, 3, 4
and 8 rows (one token, speculative verifications): the median time of each, interleaved, and each one's
largest error against the file's weights in float32, relative to the largest logit. AVX-512 VNNI only.

    python benchmarks/output_layer.py [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from gguf import GGUFReader

from lossless.engine.weights import block_kernels
from lossless.engine.weights.gguf import q8_weight
from lossless.engine.weights.packed import PackedLinear, can_pack
from lossless.engine.weights.quant import Q8Linear
from lossless.models import resolve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    opts = ap.parse_args()
    torch.set_num_threads(opts.threads)
    if (why_not := block_kernels.load_kernels("avx512")) is not None or not can_pack():
        raise SystemExit(f"needs AVX-512 VNNI and oneDNN's bfloat16: {why_not or 'no packed bfloat16 here'}")
    found = next(t for t in GGUFReader(str(resolve(None))).tensors if t.name == "token_embd.weight")
    cols, rows = (int(d) for d in found.shape.tolist())
    codes, d = q8_weight(np.asarray(found.data, dtype=np.uint8).reshape(-1, 34), (rows, cols))
    exact = (codes.float().view(rows, cols // 32, 32) * d[..., None]).view(rows, cols)
    layers = {
        "packed bfloat16": PackedLinear(exact.to(torch.bfloat16)),
        "Q8_0, ours": Q8Linear(exact, codes, d),
    }
    print(f"{'rows':>4}" + "".join(f"{name + ' ms':>20}{'error':>9}" for name in layers))
    for m in (1, 3, 4, 8):
        x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
        want = x.float() @ exact.T
        times: dict[str, list[float]] = {name: [] for name in layers}
        for _ in range(opts.repeats):
            for name, layer in layers.items():
                start = time.perf_counter()
                layer(x)
                times[name].append(time.perf_counter() - start)
        cells = ""
        for name, layer in layers.items():
            error = float((layer(x).float() - want).abs().max() / want.abs().max())
            cells += f"{statistics.median(times[name]) * 1e3:>20.2f}{error:>8.2%} "
        print(f"{m:>4}{cells}")


if __name__ == "__main__":
    main()
