"""SpMM benchmark: TCA-SpMM (fp16 tensor cores) vs cuSPARSE on a GPU; the native CPU kernel vs scipy.

    python bench/spmm.py [--n 128 256 512] [--repeats 5] [--threads T] [--no-write]

Matrices are synthetic, shaped like the DLMC (deep-learning pruned weights:
uniform random sparsity 70-98 %) and SuiteSparse (power-law, banded, web-graph
row-length distributions) sets; each row of the table states rows, cols,
nnz and the distribution. GFLOPS = 2 * nnz * N / time.

With a CUDA device (``ptx.driver.available()``) the GPU section times
``SpMM(..., target="cuda")`` kernels with CUDA events against cuSPARSE via
torch.sparse (CSR, fp16 in / fp32 result is not offered by torch, so the
peer runs fp16 CSR x fp16 dense) or cupy when torch is missing, and reports
speedups and their geometric mean. Without a GPU it says the GPU rows are
pending and runs only the CPU section: the JIT'd native kernel (fp32) vs
``scipy.sparse`` (single-threaded), written to
``bench/results/spmm_cpu_<date>.md``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minijit.runtime.features import cpu_name  # noqa: E402
from minijit.sparse import SpMM  # noqa: E402
from minijit.sparse.plan import make_plan  # noqa: E402


def _csr(m: int, k: int, lengths: np.ndarray, rng: np.random.Generator, band: int | None = None) -> sp.csr_matrix:
    lengths = np.minimum(lengths.astype(np.int64), k)
    indptr = np.zeros(m + 1, np.int64)
    indptr[1:] = np.cumsum(lengths)
    cols = []
    for r, n in enumerate(lengths):
        if band is not None:
            lo = max(0, min(k - n, r * k // m - n // 2))
            cols.append(np.arange(lo, lo + n))
        else:
            cols.append(
                np.sort(rng.choice(k, int(n), replace=False)) if n < k // 4 else np.sort(rng.permutation(k)[:n])
            )
    idx = np.concatenate(cols).astype(np.int32)
    data = rng.standard_normal(idx.size).astype(np.float32)
    return sp.csr_matrix((data, idx, indptr.astype(np.int32)), shape=(m, k))


def matrices(rng: np.random.Generator) -> list[tuple[str, str, sp.csr_matrix]]:
    """(name, distribution, matrix) of the benchmark set."""
    out = []
    for name, m, k, density in (
        ("dlmc_rn50_s70", 2048, 1024, 0.30),
        ("dlmc_transformer_s90", 2048, 512, 0.10),
        ("dlmc_rn50_s98", 4096, 2048, 0.02),
    ):
        lengths = rng.binomial(k, density, m)
        out.append((name, f"DLMC-like uniform, density {density}", _csr(m, k, lengths, rng)))
    m = 20000
    lengths = np.minimum(np.floor(rng.pareto(1.3, m) * 4 + 1), 4000)
    out.append(
        (
            "ss_powerlaw",
            f"SuiteSparse-like power law (Pareto 1.3), mean ~{lengths.mean():.0f}",
            _csr(m, m, lengths, rng),
        )
    )
    m = 30000
    out.append(
        ("ss_banded_fem", "SuiteSparse-like banded, 7-27 per row", _csr(m, m, rng.integers(7, 28, m), rng, band=64))
    )
    m = 40000
    lengths = np.where(rng.random(m) < 0.002, rng.integers(1000, 8000, m), rng.poisson(3, m))
    out.append(("ss_webgraph", "SuiteSparse-like web graph: Poisson(3) + 0.2 % hubs 1k-8k", _csr(m, m, lengths, rng)))
    return out


def _best(fn, repeats: int) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cpu_section(mats, ns, repeats: int, threads: int | None) -> tuple[list[str], float]:
    rows = [
        "| matrix | distribution | rows x cols | nnz | N | minijit native (ms) | GFLOPS"
        " | scipy (ms) | GFLOPS | speedup |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for name, dist, s in mats:
        for n in ns:
            b = np.random.default_rng(n).standard_normal((s.shape[1], n)).astype(np.float32)
            c = np.empty((s.shape[0], n), np.float32)
            op = SpMM(s, n, target="native", threads=threads)
            op.execute(b, c)
            ref = s @ b
            assert np.allclose(c, ref, rtol=1e-4, atol=1e-3), name
            t_jit = _best(lambda op=op, b=b, c=c: op.execute(b, c), repeats)
            t_sp = _best(lambda s=s, b=b: s @ b, repeats)
            fl = 2.0 * s.nnz * n
            ratios.append(t_sp / t_jit)
            rows.append(
                f"| {name} | {dist} | {s.shape[0]} x {s.shape[1]} | {s.nnz} | {n} | {t_jit * 1e3:.2f} |"
                f" {fl / t_jit / 1e9:.1f} | {t_sp * 1e3:.2f} | {fl / t_sp / 1e9:.1f} | {t_sp / t_jit:.2f}x |"
            )
            print(rows[-1], flush=True)
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return rows, gm


def gpu_section(mats, ns, repeats: int) -> list[str] | None:
    from ptx import driver

    if not driver.available():
        return None
    try:
        import torch

        peer = "torch.sparse (cuSPARSE)"
    except ImportError:
        torch = None
        import cupyx.scipy.sparse as cps  # noqa: F401

        peer = "cupy (cuSPARSE)"
    rows = [
        f"| matrix | rows x cols | nnz | N | TCA-SpMM (ms) | TFLOPS | {peer} (ms) | TFLOPS | speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for name, _, s in mats:
        for n in ns:
            b = np.random.default_rng(n).standard_normal((s.shape[1], n)).astype(np.float16)
            op = SpMM(s, n, target="cuda")
            c = np.empty((s.shape[0], n), np.float32)
            op.execute(b, c)
            op.upload_b(b)
            t0, t1 = driver.Event(), driver.Event()
            op.launch()
            t0.record()
            for _ in range(repeats):
                op.launch()
            t1.record()
            t_tca = t1.elapsed_ms(t0) / repeats
            if torch is not None:
                st = torch.sparse_csr_tensor(
                    torch.from_numpy(s.indptr.astype(np.int64)),
                    torch.from_numpy(s.indices.astype(np.int64)),
                    torch.from_numpy(s.data.astype(np.float16)),
                    size=s.shape,
                    device="cuda",
                )
                bt = torch.from_numpy(b).cuda()
                torch.cuda.synchronize()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                st @ bt
                e0.record()
                for _ in range(repeats):
                    st @ bt
                e1.record()
                torch.cuda.synchronize()
                t_peer = e0.elapsed_time(e1) / repeats
            else:
                import cupy as cp
                import cupyx.scipy.sparse as cps

                sc = cps.csr_matrix(s.astype(np.float32))
                bc = cp.asarray(b.astype(np.float32))
                sc @ bc
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                for _ in range(repeats):
                    sc @ bc
                e1.record()
                e1.synchronize()
                t_peer = cp.cuda.get_elapsed_time(e0, e1) / repeats
            fl = 2.0 * s.nnz * n
            ratios.append(t_peer / t_tca)
            rows.append(
                f"| {name} | {s.shape[0]} x {s.shape[1]} | {s.nnz} | {n} | {t_tca:.3f} | {fl / t_tca / 1e9:.2f} |"
                f" {t_peer:.3f} | {fl / t_peer / 1e9:.2f} | {t_peer / t_tca:.2f}x |"
            )
            print(rows[-1], flush=True)
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    rows.append(f"\nGeometric-mean speedup of TCA-SpMM over {peer}: {gm:.2f}x")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    mats = matrices(np.random.default_rng(2026))
    for name, _dist, s in mats:
        print(f"{name}: {make_plan(s.indptr, args.n[0]).summary()}")
    gpu = gpu_section(mats, args.n, args.repeats)
    if gpu is None:
        print("GPU rows pending: no CUDA device here (ptx.driver.available() is False); CPU section only.")
    rows, gm = cpu_section(mats, args.n, args.repeats, args.threads)
    from minijit.parallel import default_threads

    threads = args.threads or default_threads()
    date = datetime.date.today().isoformat()
    cmd = "python bench/spmm.py " + " ".join(sys.argv[1:])
    cpu = cpu_name() or platform.machine()
    text = [
        f"# SpMM on the CPU: minijit native kernel vs scipy ({date})",
        "",
        f"- CPU: {cpu} ({platform.machine()}), minijit threads: {threads}; scipy is single-threaded",
        f"- Date: {date}; command: `{cmd.strip()}`",
        "- fp32 S (CSR) x fp32 B (row-major) -> fp32 C; best of "
        f"{args.repeats} runs after a warm-up; GFLOPS = 2 nnz N / time",
        "",
        *rows,
        "",
        f"Geometric-mean speedup over scipy: {gm:.2f}x",
        "",
        "GPU rows (TCA-SpMM fp16 vs cuSPARSE): pending — no GPU on this machine."
        if gpu is None
        else "\n".join(["## GPU", "", *gpu]),
        "",
    ]
    print(f"geometric-mean speedup over scipy: {gm:.2f}x")
    if not args.no_write:
        out = Path(__file__).resolve().parent / "results" / f"spmm_cpu_{date}.md"
        out.write_text("\n".join(text))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
