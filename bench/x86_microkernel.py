"""x86-64 microkernel benchmark: FMA peak vs. the BRGEMM microkernel (single thread).

    python bench/x86_microkernel.py [--isa avx512|avx2] [--dtype fp32|fp64] [--seconds 1.0]

The peak is measured with a JIT'd loop of 24 independent ``vfmadd231`` chains
(register operands only). The BRGEMM microkernel is one ``m x n`` block
(64x6 fp32 / 32x6 fp64 on AVX-512, 16x6 / 8x6 on AVX2) with ``k`` = 256,
run over ``br_size`` = 256 batch-reduce steps that all read the same in-cache
A and B (``br_stride = 0``), so one call does ``2*m*n*k*br`` flops. numpy's
matmul of the same shape runs in the same process as a peer.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asm.x86_64 import YMM, ZMM, Assembler  # noqa: E402
from asm.x86_64.registers import rdi  # noqa: E402
from minijit.kernels.x86_64 import brgemm  # noqa: E402
from minijit.kernels.x86_64.common import Target  # noqa: E402
from minijit.runtime.features import cpu_name  # noqa: E402
from minijit.runtime.kernel import Kernel  # noqa: E402

CHAINS = 24


def peak_kernel(t: Target) -> Kernel:
    """``void(int64_t iters)``: iters x 24 independent vfmadd231 (acc_i += x * y)."""
    regs = list(ZMM) if t.isa == "avx512" else list(YMM[:16])
    chains = CHAINS if t.isa == "avx512" else 12
    acc, x, y = regs[:chains], regs[chains], regs[chains + 1]
    a = Assembler()
    for r in acc + [x, y]:
        getattr(a, t.v("vxor"))(r, r, r)
    top = a.label("loop")
    for r in acc:
        getattr(a, t.v("vfmadd231"))(r, x, y)
    a.dec(rdi)
    a.jnz(top)
    a.vzeroupper()
    a.ret()
    k = Kernel(a.code(), "void(int64_t)", name="fma_peak", listing=a.listing())
    k.chains = chains  # type: ignore[attr-defined]
    return k


def best_rate(fn, flops: float, seconds: float) -> float:
    """Best GFLOPS over repeated calls for about ``seconds``."""
    fn()
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = max(best, flops / dt / 1e9)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--isa", default="avx512", choices=["avx512", "avx2"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "fp64"])
    p.add_argument("--k", type=int, default=256)
    p.add_argument("--br", type=int, default=256)
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args()
    t = Target.of(args.dtype, args.isa)
    dt = np.float32 if t.es == 4 else np.float64

    peak = peak_kernel(t)
    iters = 2_000_000
    lanes = t.vl
    peak_gflops = best_rate(lambda: peak(iters), iters * peak.chains * lanes * 2, args.seconds)

    _, mv, nb, _ = brgemm.blocking(max(brgemm.NB[t.isa]) * t.vl, t.isa, t.dtype)[0]
    m, n, k, br = mv * t.vl, nb, args.k, args.br
    kern = brgemm.generate(m, n, k, br, dtype=t.dtype, isa=t.isa)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(m * k).astype(dt), rng.standard_normal(k * n).astype(dt)
    c = np.zeros(m * n, dt)
    flops = 2.0 * m * n * k * br
    kern_gflops = best_rate(lambda: kern(a, b, c, m, k, m, 0, 0), flops, args.seconds)

    # what a packed GEMM runs: A and B in micro-panels (4 M panels x 8 N panels, in L2), as
    # `TensorOperation` packs them (`minijit.packing`): one sequential stream each
    rows, width = brgemm.panel_rows(t.isa, t.dtype), brgemm.panel_width(t.isa)
    pm, pn = 4 * rows, 8 * width
    packed = brgemm.generate(
        pm, pn, k, br, trans_b=True, dtype=t.dtype, isa=t.isa, a_panel=rows * k, b_panel=width * k, br_outer=False
    )
    pa, pb, pc = rng.standard_normal(pm * k).astype(dt), rng.standard_normal(k * pn).astype(dt), np.zeros(pm * pn, dt)
    packed_gflops = best_rate(lambda: packed(pa, pb, pc, rows, width, pm, 0, 0), 2.0 * pm * pn * k * br, args.seconds)

    am, bm = a.reshape(k, m).T.copy(), b.reshape(n, k).T.copy()
    reps = 64
    np_gflops = best_rate(lambda: [am @ bm for _ in range(reps)], 2.0 * m * n * k * reps, args.seconds)

    print(f"CPU: {cpu_name() or 'unknown'}   date: {datetime.date.today()}   command: python {' '.join(sys.argv)}")
    print(f"FMA peak ({peak.chains} chains, {t.isa} {t.dtype}):      {peak_gflops:8.1f} GFLOPS")
    print(
        f"BRGEMM {m}x{n}x{k} br={br} ({t.isa} {t.dtype}): {kern_gflops:8.1f} GFLOPS"
        f" = {100 * kern_gflops / peak_gflops:5.1f} % of peak"
    )
    print(
        f"BRGEMM {pm}x{pn}x{k} br={br}, A and B packed: {packed_gflops:8.1f} GFLOPS"
        f" = {100 * packed_gflops / peak_gflops:5.1f} % of peak"
    )
    print(f"numpy matmul {m}x{k} @ {k}x{n}:           {np_gflops:8.1f} GFLOPS (peer, per call)")


if __name__ == "__main__":
    main()
