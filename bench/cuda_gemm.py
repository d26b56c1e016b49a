"""Benchmark the generated tensor-core GEMM/BRGEMM kernels against torch (cuBLAS) on a GPU.

    python bench/cuda_gemm.py [--iters 20] [--size 8192]

Cases: an M = N = K = size GEMM for fp16, bf16 and fp32-as-tf32 inputs against ``torch.matmul``
(tf32 allowed for the fp32 peer), and the seed 004 BRGEMM configuration scaled up
(A[m0,k0,k1,m1], B[n0,k0,n1,k1], C[m0,n0,n1,m1]) against ``torch.einsum``. Prints a table and
writes ``bench/results/cuda_<date>.md`` (device, date, command). Needs an NVIDIA GPU, cuda-bindings,
ptxas and torch with CUDA; exits with a message otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def _fail(msg: str) -> None:
    sys.exit(f"bench/cuda_gemm.py: {msg}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--size", type=int, default=8192)
    args = ap.parse_args()

    import ptx
    from ptx import driver

    if not driver.available():
        _fail("no CUDA GPU available (ptx.driver.available() is False); nothing to measure")
    if ptx.find_ptxas() is None:
        _fail("ptxas not found (set MINIJIT_PTXAS or pip install nvidia-cuda-nvcc)")
    try:
        import torch
    except ImportError:
        _fail("torch is needed as the peer (torch.matmul / torch.einsum)")
    if not torch.cuda.is_available():
        _fail("torch has no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = True

    from minijit.cuda import CudaTensorOperation

    dev = driver.device()

    def timed(fn, iters):
        fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) / iters / 1e3

    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    rows = []
    n = args.size
    for dtype in ("fp16", "bf16", "fp32"):
        op = CudaTensorOperation()
        op.setup(dtype, "zero", "gemm", "none", "mnk", ("prim",) * 3, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0))
        at = torch.randn((n, n), device="cuda").to(tdt[dtype])  # at[k, m] = A[m, k] (column-major A)
        bt = torch.randn((n, n), device="cuda").to(tdt[dtype])  # bt[n, k] = B[k, n]
        c = torch.empty((n, n), device="cuda", dtype=torch.float32)
        t_ours = timed(lambda op=op, at=at, bt=bt, c=c: op.execute(at, bt, c, sync=False), args.iters)
        t_peer = timed(lambda at=at, bt=bt: torch.matmul(bt, at), args.iters)  # C^T = B^T A^T
        ref = torch.matmul(bt.float(), at.float())
        err = ((c - ref).abs().max() / ref.abs().max()).item()
        flops = 2.0 * n**3
        rows.append((f"gemm {n}^3", dtype, flops / t_ours / 1e12, flops / t_peer / 1e12, err, op.spec.name))

    m0, n0, k0, m1, n1, k1 = 64, 64, 8, 128, 128, 64
    sizes = (m0, n0, k0, m1, n1, k1)
    s0 = (k0 * k1 * m1, 0, k1 * m1, 1, 0, m1)
    s1 = (0, k0 * n1 * k1, n1 * k1, 0, k1, 1)
    so = (n0 * n1 * m1, n1 * m1, 0, 1, m1, 0)
    for dtype in ("fp16", "bf16", "fp32"):
        op = CudaTensorOperation()
        ex = ("shared", "shared", "prim", "prim", "prim", "prim")
        op.setup(dtype, "zero", "brgemm", "relu", ("m", "n", "k", "m", "n", "k"), ex, sizes, s0, s1, so)
        a = torch.randn((m0, k0, k1, m1), device="cuda").to(tdt[dtype])
        b = torch.randn((n0, k0, n1, k1), device="cuda").to(tdt[dtype])
        c = torch.empty((m0, n0, n1, m1), device="cuda", dtype=torch.float32)
        t_ours = timed(lambda op=op, a=a, b=b, c=c: op.execute(a, b, c, sync=False), args.iters)
        t_peer = timed(lambda a=a, b=b: torch.relu(torch.einsum("akcb,dkec->adeb", a, b)), args.iters)
        ref = torch.relu(torch.einsum("akcb,dkec->adeb", a.float(), b.float()))
        err = ((c - ref).abs().max() / ref.abs().max()).item()
        flops = 2.0 * m0 * n0 * k0 * m1 * n1 * k1
        rows.append((f"seed brgemm {sizes}", dtype, flops / t_ours / 1e12, flops / t_peer / 1e12, err, op.spec.name))

    head = ("case", "dtype", "minijit TFLOPS", "torch TFLOPS", "ratio", "max rel err", "kernel")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, dt, ours, peer, err, name in rows:
        lines.append(f"| {case} | {dt} | {ours:.1f} | {peer:.1f} | {ours / peer:.2f} | {err:.1e} | {name} |")
    table = "\n".join(lines)
    print(table)
    date = datetime.date.today().isoformat()
    out = pathlib.Path(__file__).resolve().parent / "results" / f"cuda_{date}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"# CUDA GEMM/BRGEMM: minijit vs torch\n\n- device: {dev.name} ({dev.arch})\n- date: {date}\n"
        f"- torch {torch.__version__}; ptxas: {ptx.toolchain.ptxas_version()}\n"
        f"- command: python {' '.join(sys.argv)}\n- fp32 rows: minijit tf32 (cvt.rna) vs torch with allow_tf32\n\n"
        + table
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
