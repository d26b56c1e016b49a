"""SpMM benchmark rows for ``minijit bench spmm``: TCA-SpMM vs cuSPARSE on a GPU, the CPU kernel vs scipy.

Matrices are synthetic, shaped like the DLMC (deep-learning pruned weights: uniform random
sparsity 70-98 %) and SuiteSparse (power-law, banded, web-graph row-length distributions) sets;
each row states rows, cols, nnz and the distribution. GFLOPS = 2 * nnz * N / time; a time is the
best of ``reps`` runs after a warm-up.

- GPU section (when ``ptx.driver.available()``): ``SpMM(..., target="cuda")`` in two precisions,
  fp32 C in both, timed with CUDA events against cuSPARSE through ``torch.sparse`` (or cupy,
  fp32 only, when torch has no CUDA): ``fp16`` (fp16 S and B) against fp16 CSR x fp16 dense (fp32
  when torch refuses fp16), and ``tf32`` (fp32 S and B rounded to tf32) against fp32 cuSPARSE.
  The table has one column group per precision.
- CPU section: ``SpMM(..., target="native")`` (fp32) against ``scipy.sparse`` at the same thread
  count: ``S @ B`` split into row blocks of equal nnz, one per thread (scipy releases the GIL in
  its sparse products, so the blocks run in parallel); one thread is plain ``S @ B``.

- Plan section (CPU-side, no GPU needed): per matrix, the mma instructions per 64 output columns
  of each strategy's plan (`minijit.sparse.window_plan`): seed 003, row windows in the given row
  order and on the rows reordered by `minijit.sparse.reorder` (with the 16 x 8 tile density),
  and the strategy ``SpMM(..., target="cuda", dtype="fp16")`` picks from them.

Every row is checked against scipy once before it is timed (``check``: max |C - S B| within
``tol * max(1, max |S B|)``). ``quick=True`` uses small matrices (a few seconds on 2 cores).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from minijit.bench import UserError, report

__all__ = [
    "GPU_DTYPES",
    "bench",
    "cpu_rows",
    "fem_blocks",
    "geomean",
    "gpu_peer",
    "gpu_rows",
    "gpu_table",
    "matrices",
    "plan_rows",
    "plan_table",
    "sections",
    "strategy_table",
    "strategy_times",
    "table",
]

#: ``check`` tolerances relative to max(1, max |S B|): fp32 kernel vs scipy, fp16 TCA-SpMM vs fp32 scipy
#: on the same fp16-rounded values
CPU_TOL = 1e-4
GPU_TOL = 1e-3
#: GPU precisions and the cuSPARSE type each is compared with
GPU_DTYPES = {"fp16": "fp16", "tf32": "fp32"}
Progress = report.Progress


def _csr(m: int, k: int, lengths: np.ndarray, rng: np.random.Generator, band: int | None = None):
    import scipy.sparse as sp

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


def matrices(rng: np.random.Generator, quick: bool = False) -> list[tuple[str, str, Any]]:
    """(name, distribution, scipy CSR matrix) of the benchmark set; ``quick``: 1/4 the rows and cols."""
    q = 4 if quick else 1
    out = []
    for name, m, k, density in (
        ("dlmc_rn50_s70", 2048, 1024, 0.30),
        ("dlmc_transformer_s90", 2048, 512, 0.10),
        ("dlmc_rn50_s98", 4096, 2048, 0.02),
    ):
        m, k = m // q, k // q
        lengths = rng.binomial(k, density, m)
        out.append((name, f"DLMC-like uniform, density {density}", _csr(m, k, lengths, rng)))
    m = 20000 // q
    lengths = np.minimum(np.floor(rng.pareto(1.3, m) * 4 + 1), 4000 // q)
    dist = f"SuiteSparse-like power law (Pareto 1.3), mean ~{lengths.mean():.0f}"
    out.append(("ss_powerlaw", dist, _csr(m, m, lengths, rng)))
    m = 30000 // q
    out.append(
        ("ss_banded_fem", "SuiteSparse-like banded, 7-27 per row", _csr(m, m, rng.integers(7, 28, m), rng, band=64))
    )
    m = 40000 // q
    lo, hi = 1000 // q, 8000 // q
    lengths = np.where(rng.random(m) < 0.002, rng.integers(lo, hi, m), rng.poisson(3, m))
    dist = f"SuiteSparse-like web graph: Poisson(3) + 0.2 % hubs {lo}-{hi}"
    out.append(("ss_webgraph", dist, _csr(m, m, lengths, rng)))
    m = 40000 // q
    lengths = np.minimum(np.floor(rng.pareto(1.1, m)), 2000 // q)
    lengths[rng.random(m) < 0.6] = 0
    dist = f"very sparse power law (Pareto 1.1), {np.mean(lengths == 0):.0%} empty rows, mean {lengths.mean():.1f}"
    out.append(("ss_powerlaw_sparse", dist, _csr(m, m, lengths, rng)))
    grid = 20 if not quick else 12
    s = fem_blocks(grid, 3, rng)
    dist = f"FEM-like: 3-D 7-point stencil on {grid}^3 nodes, dense 3x3 blocks (3 dof per node)"
    out.append(("ss_fem_blocks", dist, s))
    return out


def fem_blocks(grid: int, dof: int, rng: np.random.Generator):
    """Block-structured FEM-like CSR: the 7-point stencil graph of a ``grid``^3 mesh, each node
    coupling a dense ``dof`` x ``dof`` block (rows = grid^3 * dof, about 7 * dof nnz per row)."""
    import scipy.sparse as sp

    path = sp.diags_array([np.ones(grid - 1), np.ones(grid), np.ones(grid - 1)], offsets=[-1, 0, 1], dtype=np.float32)
    eye = sp.identity(grid, dtype=np.float32)
    nodes = sp.kron(sp.kron(path, eye), eye) + sp.kron(sp.kron(eye, path), eye) + sp.kron(sp.kron(eye, eye), path)
    s = sp.csr_matrix(sp.kron((nodes != 0).astype(np.float32), np.ones((dof, dof), np.float32)), dtype=np.float32)
    s.sort_indices()
    s.data = rng.standard_normal(s.nnz).astype(np.float32)
    return s


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def _best(fn: Callable[[], object], reps: int) -> float:
    fn()
    best = math.inf
    for _ in range(max(reps, 1)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _row(section: str, name: str, dist: str, s, n: int, t: float, peer: str, t_peer: float, chk) -> dict[str, Any]:
    flops = 2.0 * s.nnz * n
    return {
        "section": section,
        "matrix": name,
        "distribution": dist,
        "rows": s.shape[0],
        "cols": s.shape[1],
        "nnz": int(s.nnz),
        "n": n,
        "time_s": t,
        "gflops": flops / t / 1e9,
        "peer": {"name": peer, "time_s": t_peer, "gflops": flops / t_peer / 1e9},
        "speedup": t_peer / t,
        "check": chk,
    }


def scipy_split(s, threads: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """``c[:] = s @ b`` by scipy over ``threads`` row blocks of about equal nnz, in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    m = s.shape[0]
    cuts = np.searchsorted(s.indptr, np.linspace(0, s.nnz, threads + 1)[1:-1])
    bounds = [0, *sorted({int(x) for x in cuts if 0 < x < m}), m]
    blocks = [(r0, r1, s[r0:r1]) for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True)]
    pool = ThreadPoolExecutor(max(1, len(blocks) - 1), thread_name_prefix="scipy-peer")

    def run(b: np.ndarray, c: np.ndarray) -> None:
        def one(block) -> None:
            r0, r1, sb = block
            c[r0:r1] = sb @ b

        futures = [pool.submit(one, blk) for blk in blocks[1:]]
        one(blocks[0])
        for f in futures:
            f.result()

    return run


def cpu_rows(
    mats, ns, reps: int, threads: int | None = None, progress: Progress = report.quiet
) -> list[dict[str, Any]]:
    """The native fp32 kernel vs ``scipy.sparse`` at the same thread count for every matrix and N."""
    from minijit.parallel import default_threads
    from minijit.sparse import SpMM

    threads = threads or default_threads()
    rows = []
    for name, dist, s in mats:
        peer = scipy_split(s, threads)
        for n in ns:
            progress(f"cpu {name} {s.shape[0]}x{s.shape[1]} nnz {s.nnz} N={n} ...")
            b = np.random.default_rng(n).standard_normal((s.shape[1], n)).astype(np.float32)
            c = np.full((s.shape[0], n), np.nan, np.float32)
            op = SpMM(s, n, target="native", threads=threads)
            op.execute(b, c)
            chk = report.check_result(c, s @ b, CPU_TOL)
            c_peer = np.full_like(c, np.nan)
            peer(b, c_peer)
            chk_peer = report.check_result(c_peer, s @ b, CPU_TOL)
            if not chk_peer["ok"]:
                raise AssertionError(f"the split scipy peer is wrong on {name}: {chk_peer}")
            t_jit = _best(lambda op=op, b=b, c=c: op.execute(b, c), reps)
            t_sp = _best(lambda b=b, c=c_peer, peer=peer: peer(b, c), reps)
            rows.append(_row("cpu", name, dist, s, n, t_jit, "scipy", t_sp, chk))
            rows[-1]["peer"]["threads"] = threads
            progress(_summary(rows[-1]))
    return rows


def plan_rows(mats, n: int, progress: Progress = report.quiet) -> list[dict[str, Any]]:
    """The mma-count model of every matrix (no GPU): mma instructions per 64 output columns of seed
    003's plan (``tca_mmas``), of the row-window plan in the given row order (``window_mmas``,
    ``window_density``: non-zeros per 16 x 8 tile slot) and on reordered rows (``reordered_*``,
    ``reorder_method``, ``reorder_gain``: the fraction of window mmas saved, ``reorder_s``: seconds
    to find the order), of the swapped 8-row windows (``swapped_mmas``, in the better of the two
    orders), and the strategy that
    ``SpMM(..., target="cuda", dtype="fp16", strategy="auto", reorder="auto")`` runs
    (``strategy``: "tca", "window", "window_reordered" or "window_swapped").
    ``n``: the N the seed-003 plan is made for."""
    from minijit.sparse import make_plan
    from minijit.sparse import window_plan as wpm
    from minijit.sparse.reorder import reorder_rows

    rows = []
    for name, _dist, s in mats:
        progress(f"plan {name} {s.shape[0]}x{s.shape[1]} nnz {s.nnz} ...")
        indptr, indices = s.indptr, s.indices
        t0 = time.perf_counter()
        order = reorder_rows(indptr, indices)
        t_order = time.perf_counter() - t0
        plan = make_plan(indptr, n)
        wp = wpm.make_window_plan(indptr, indices, n)
        wpr = None
        if order.gain >= wpm.MIN_REORDER_GAIN:
            wpr = wpm.make_window_plan(indptr, indices, n, row_order=order.perm)
        ws = wpm.make_window_plan(indptr, indices, n, window=wpm.SWAP_WINDOW)
        if wpr is not None:  # the swapped windows in the better of the two row orders, as SpMM
            ws = wpm.pick_window(ws, wpm.make_window_plan(indptr, indices, n, row_order=order.perm, window=8))
        rows.append(
            {
                "section": "plan",
                "matrix": name,
                "rows": s.shape[0],
                "cols": s.shape[1],
                "nnz": int(s.nnz),
                "n": n,
                "tca_mmas": wpm.tca_mmas(plan, indptr),
                "window_mmas": order.mmas_before,
                "window_density": order.density_before,
                "reordered_mmas": order.mmas_after,
                "reordered_density": order.density_after,
                "reorder_method": order.method,
                "reorder_gain": order.gain,
                "reorder_s": t_order,
                "swapped_mmas": wpm.window_mmas(ws),
                "strategy": wpm.choose_strategy(plan, indptr, wp, wpr, swapped=ws),
            }
        )
        progress(f"    {order.summary()}; strategy {rows[-1]['strategy']}")
    return rows


def plan_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of `plan_rows`."""
    head = ["matrix", "rows x cols", "nnz", "seed-003 mmas", "window mmas", "tile density", "reordered mmas"]
    head += ["tile density", "saving", "order key", "order s", "swapped mmas", "strategy"]
    out = []
    for r in rows:
        cells = [r["matrix"], f"{r['rows']} x {r['cols']}", str(r["nnz"]), str(r["tca_mmas"])]
        cells += [str(r["window_mmas"]), f"{r['window_density']:.1%}", str(r["reordered_mmas"])]
        cells += [f"{r['reordered_density']:.1%}", f"{r['reorder_gain']:.1%}", r["reorder_method"]]
        cells += [f"{r['reorder_s']:.2f}", str(r["swapped_mmas"]), r["strategy"]]
        out.append(cells)
    return report.markdown_table(head, out)


def _summary(r: dict[str, Any]) -> str:
    status = "" if r["check"]["ok"] else f"  WRONG RESULT (max err {r['check']['max_abs_err']:.3g})"
    p = r["peer"]
    return f"    minijit {r['gflops']:.1f} GFLOPS; {p['name']} {p['gflops']:.1f} ({r['speedup']:.2f}x){status}"


def _torch_cuda():
    try:
        import torch  # type: ignore[import-not-found]
    except Exception:
        return None
    return torch if torch.cuda.is_available() else None


def _peer_torch(torch, s, b: np.ndarray, reps: int, dtype: str = "fp16") -> tuple[str, float]:
    """cuSPARSE through torch.sparse: fp16 CSR x fp16 dense for ``dtype`` "fp16" (fp32 when fp16
    is not supported), fp32 x fp32 for "tf32"."""
    tries = ((torch.float16, "fp16"), (torch.float32, "fp32")) if dtype == "fp16" else ((torch.float32, "fp32"),)
    for dt, label in tries:
        try:
            st = torch.sparse_csr_tensor(
                torch.from_numpy(s.indptr.astype(np.int64)),
                torch.from_numpy(s.indices.astype(np.int64)),
                torch.from_numpy(s.data.astype(np.float32)).to(dt),
                size=s.shape,
                device="cuda",
            )
            bt = torch.from_numpy(b.astype(np.float32)).to(device="cuda", dtype=dt)
            st @ bt
            torch.cuda.synchronize()
        except RuntimeError:
            continue
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            st @ bt
        e1.record()
        torch.cuda.synchronize()
        return f"torch.sparse {label} (cuSPARSE)", e0.elapsed_time(e1) / reps / 1e3
    raise RuntimeError(f"torch.sparse CSR @ dense failed in {' and '.join(x[1] for x in tries)}")


def _peer_cupy(s, b: np.ndarray, reps: int, dtype: str = "fp16") -> tuple[str, float]:
    import cupy as cp  # type: ignore[import-not-found]
    import cupyx.scipy.sparse as cps  # type: ignore[import-not-found]

    sc = cps.csr_matrix(s.astype(np.float32))
    bc = cp.asarray(b.astype(np.float32))
    sc @ bc
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record()
    for _ in range(reps):
        sc @ bc
    e1.record()
    e1.synchronize()
    return "cupy fp32 (cuSPARSE)", cp.cuda.get_elapsed_time(e0, e1) / reps / 1e3


def gpu_peer() -> str | None:
    """Which cuSPARSE peer the GPU section would use ("torch", "cupy"), or None."""
    if _torch_cuda() is not None:
        return "torch"
    try:
        import cupy  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        return None
    return "cupy"


#: kernels timed side by side in every GPU row (``strategies``): what ``strategy="auto"``
#: chooses from by its mma model, so a run on a GPU shows whether the model picks the fastest
STRATEGY_VARIANTS = {
    "tca": {"strategy": "tca"},
    "window16": {"strategy": "window", "window_rows": 16},
    "window8": {"strategy": "window", "window_rows": 8},
}


def _timed_launches(drv, op, reps: int) -> float:
    """Seconds per `SpMM.launch` on its uploaded B: events around ``reps`` launches after one."""
    t0, t1 = drv.Event(), drv.Event()
    op.launch()
    t0.record()
    for _ in range(reps):
        op.launch()
    t1.record()
    return t1.elapsed_ms(t0) / reps / 1e3


def strategy_times(
    s, n: int, b: np.ndarray, ref: np.ndarray, reps: int, drv, dtype: str = "fp16"
) -> dict[str, dict[str, Any]]:
    """Each of `STRATEGY_VARIANTS` in ``dtype`` on ``b``: seconds per launch, its check against
    ``ref`` and its plan in words."""
    from minijit.sparse import SpMM

    out = {}
    for name, kw in STRATEGY_VARIANTS.items():
        op = SpMM(s, n, dtype=dtype, target="cuda", driver=drv, **kw)
        c = np.full((s.shape[0], n), np.nan, np.float32)
        op.execute(b, c)
        op.upload_b(b)
        out[name] = {"time_s": _timed_launches(drv, op, reps), "check": report.check_result(c, ref, GPU_TOL),
                     "plan": op.plan_summary()}  # fmt: skip
    return out


def gpu_rows(
    mats, ns, reps: int, progress: Progress = report.quiet, driver=None, peer: Callable | None = None
) -> list[dict[str, Any]]:
    """TCA-SpMM vs cuSPARSE for every matrix, N and precision in `GPU_DTYPES` (a row each, with
    ``dtype``); each row also times every `STRATEGY_VARIANTS` kernel (``strategies``).
    ``driver``: `ptx.driver` by default; ``peer(s, b, reps, dtype) -> (label, seconds)``: the
    cuSPARSE peer (torch.sparse, else cupy, by default)."""
    from minijit.sparse import SpMM
    from minijit.sparse.precision import precision
    from ptx.driver import resolve

    drv = resolve(driver)
    if peer is None:
        torch = _torch_cuda() if gpu_peer() == "torch" else None
        peer = (lambda s, b, r, dt: _peer_torch(torch, s, b, r, dt)) if torch is not None else _peer_cupy
    rows = []
    for name, dist, s in mats:
        for n in ns:
            b32 = np.random.default_rng(n).standard_normal((s.shape[1], n)).astype(np.float32)
            for dtype in GPU_DTYPES:
                progress(f"gpu {name} {s.shape[0]}x{s.shape[1]} nnz {s.nnz} N={n} {dtype} ...")
                b = b32.astype(np.float16) if dtype == "fp16" else b32
                op = SpMM(s, n, dtype=dtype, target="cuda", driver=drv)
                progress(f"    plan: {op.plan_summary()}")
                c = np.full((s.shape[0], n), np.nan, np.float32)
                op.execute(b, c)
                prec = precision(dtype)
                sq = s.copy()  # the values the kernel multiplies (scipy.sparse has no float16)
                sq.data = prec.quantize(s.data)
                chk = report.check_result(c, sq @ prec.quantize(b), GPU_TOL)
                op.upload_b(b)
                t_tca = _timed_launches(drv, op, reps)
                label, t_peer = peer(s, b, reps, dtype)
                rows.append(_row("gpu", name, dist, s, n, t_tca, label, t_peer, chk))
                rows[-1]["dtype"] = dtype
                rows[-1]["strategy"] = op.strategy
                rows[-1]["reordered"] = op.reordered
                rows[-1]["window_rows"] = op.window_rows
                rows[-1]["strategies"] = strategy_times(s, n, b, sq @ prec.quantize(b), reps, drv, dtype)
                progress(_summary(rows[-1]))
    return rows


def gpu_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the GPU rows: one line per matrix and N, a column group per precision
    (TCA-SpMM TFLOPS, the cuSPARSE peer's TFLOPS, speedup)."""
    dtypes = [d for d in GPU_DTYPES if any(r.get("dtype") == d for r in rows)]
    head = ["matrix", "distribution", "rows x cols", "nnz", "N"]
    for d in dtypes:
        head += [f"{d} TFLOPS", f"cuSPARSE {GPU_DTYPES[d]} TFLOPS", f"{d} speedup"]
    head.append("check")
    lines: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        lines.setdefault((r["matrix"], r["n"]), {})[r.get("dtype", "fp16")] = r
    out = []
    for by_dtype in lines.values():
        first = next(iter(by_dtype.values()))
        cells = [first["matrix"], first["distribution"], f"{first['rows']} x {first['cols']}", str(first["nnz"])]
        cells.append(str(first["n"]))
        for d in dtypes:
            r = by_dtype.get(d)
            if r is None:
                cells += ["-", "-", "-"]
            else:
                cells += [f"{r['gflops'] / 1e3:.2f}", f"{r['peer']['gflops'] / 1e3:.2f}", f"{r['speedup']:.2f}x"]
        bad = [f"{d} ERR {r['check']['max_abs_err']:.2g}" for d, r in by_dtype.items() if not r["check"]["ok"]]
        cells.append("; ".join(bad) if bad else "ok")
        out.append(cells)
    return report.markdown_table(head, out)


def strategy_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the GPU rows' ``strategies``: microseconds per launch of each kernel,
    what ``strategy="auto"`` ran, and whether that was the fastest."""
    names = list(STRATEGY_VARIANTS)
    head = ["matrix", "N", "dtype", *(f"{nm} us" for nm in names), "auto ran", "fastest", "auto / fastest"]
    out = []
    for r in rows:
        st = r.get("strategies")
        if not st:
            continue
        fastest = min(names, key=lambda nm: st[nm]["time_s"])
        auto = "tca" if r["strategy"] == "tca" else f"window{r['window_rows']}"
        cells = [r["matrix"], str(r["n"]), r.get("dtype", "fp16")]
        cells += [f"{st[nm]['time_s'] * 1e6:.1f}" + ("" if st[nm]["check"]["ok"] else " ERR") for nm in names]
        cells += [auto + (" (reordered)" if r["reordered"] else ""), fastest]
        cells.append(f"{r['time_s'] / st[fastest]['time_s']:.2f}x")
        out.append(cells)
    return report.markdown_table(head, out)


def table(rows: list[dict[str, Any]], ours: str, unit: str = "GFLOPS") -> str:
    """Markdown table of one section (``unit``: GFLOPS or TFLOPS)."""
    scale = 1e3 if unit == "TFLOPS" else 1.0
    peer = rows[0]["peer"]["name"] if rows else "peer"
    head = ["matrix", "distribution", "rows x cols", "nnz", "N", f"{ours} ms", unit, f"{peer} ms", unit]
    head += ["speedup", "check"]
    out = []
    for r in rows:
        p = r["peer"]
        cells = [r["matrix"], r["distribution"], f"{r['rows']} x {r['cols']}", str(r["nnz"]), str(r["n"])]
        cells += [f"{r['time_s'] * 1e3:.3f}", f"{r['gflops'] / scale:.2f}", f"{p['time_s'] * 1e3:.3f}"]
        cells += [f"{p['gflops'] / scale:.2f}", f"{r['speedup']:.2f}x"]
        cells.append("ok" if r["check"]["ok"] else f"ERR {r['check']['max_abs_err']:.2g}")
        out.append(cells)
    return report.markdown_table(head, out)


def sections(
    gpu: list[dict[str, Any]] | None,
    cpu: list[dict[str, Any]],
    gpu_note: str,
    plan: list[dict[str, Any]] | None = None,
) -> list[str]:
    """The printed report: the plan model (`plan_rows`, when given), GPU table and geometric mean (or
    ``gpu_note``), CPU table and geometric mean."""
    out = []
    if plan:
        out += [
            "## Plans: mma instructions per 64 output columns (model, CPU-side), row reordering",
            "",
            plan_table(plan),
            "",
            "tile density: non-zeros per 16 x 8 A-tile slot of the row-window plan; saving: window mmas saved by"
            " reordering the rows; strategy: what SpMM(target='cuda', dtype='fp16') runs (reordering when it saves"
            " >= 10 %)",
            "",
        ]
    if gpu:
        out += ["## GPU: TCA-SpMM vs cuSPARSE (fp16 vs fp16, tf32 vs fp32)", "", gpu_table(gpu), ""]
        if any(r.get("strategies") for r in gpu):
            out += ["### Kernels side by side (microseconds per launch; auto: the mma model's pick)", "",
                    strategy_table(gpu), ""]  # fmt: skip
        for d in GPU_DTYPES:
            part = [r for r in gpu if r.get("dtype") == d]
            if part:
                gm = geomean([r["speedup"] for r in part])
                out.append(f"geometric-mean speedup of TCA-SpMM {d} over {part[0]['peer']['name']}: {gm:.2f}x")
        low = min(gpu, key=lambda r: r["speedup"])
        out.append(f"geometric mean over all GPU rows: {geomean([r['speedup'] for r in gpu]):.2f}x; lowest row"
                   f" {low['matrix']} N={low['n']} {low.get('dtype', 'fp16')}: {low['speedup']:.2f}x")  # fmt: skip
        out.append("")
    else:
        out += [gpu_note, ""]
    out += ["## CPU: minijit native kernel (fp32) vs scipy.sparse", "", table(cpu, "minijit"), ""]
    out.append(f"geometric-mean speedup over scipy: {geomean([r['speedup'] for r in cpu]):.2f}x")
    if cpu:
        low = min(cpu, key=lambda r: r["speedup"])
        out.append(f"lowest row: {low['matrix']} N={low['n']}: {low['speedup']:.2f}x")
    return out


def bench(
    ns: list[int], reps: int, threads: int, quick: bool, command: str, progress: Progress = report.quiet
) -> report.Report:
    """The GPU section (when a GPU and a cuSPARSE peer answer) and the CPU section, reported."""
    try:
        import scipy  # type: ignore[import-untyped]
    except ImportError:
        raise UserError("bench spmm needs scipy (the CPU peer and the check): pip install scipy") from None
    from ptx import driver

    started = time.perf_counter()
    mats = matrices(np.random.default_rng(2026), quick=quick)
    gpu, note, device = None, "", None
    if not driver.available():
        note = "GPU rows pending: no CUDA device here (ptx.driver.available() is False); CPU section only."
    elif gpu_peer() is None:
        note = "GPU rows skipped: no cuSPARSE peer (torch with CUDA, or cupy) is importable; CPU section only."
    else:
        device = f"{driver.device().name} ({driver.device().arch})"
        gpu = gpu_rows(mats, ns, reps, progress)
    plan = plan_rows(mats, ns[0], progress)
    cpu = cpu_rows(mats, ns, reps, threads, progress)
    body = sections(gpu, cpu, note, plan)
    hw = report.hardware()
    how = f"best of {reps} after a warm-up; GFLOPS = 2 nnz N / time"
    header = [
        f"# minijit bench spmm: {hw['cpu'] or hw['isa']}, threads {threads} (minijit, and scipy over row blocks),"
        f" N {','.join(map(str, ns))}, {'quick ' if quick else ''}matrices, {how}"
    ]
    meta = report.meta(command)
    rows = [*(gpu or []), *cpu]
    settings = {"n": ns, "reps": reps, "threads": threads, "quick": quick, "measurement": how}
    versions = {**report.versions(), "scipy": scipy.__version__}
    result = {**meta, "hardware": hw, "gpu": device or note, "versions": versions, "settings": settings}
    parts = (("gpu", gpu or []), ("cpu", cpu))
    result["geomean_speedup"] = {k: geomean([r["speedup"] for r in v]) for k, v in parts if v}
    for d in GPU_DTYPES if gpu else ():
        result["geomean_speedup"][f"gpu_{d}"] = geomean([r["speedup"] for r in gpu if r["dtype"] == d])
    result.update(elapsed_s=round(time.perf_counter() - started, 2), results=rows, plan_model=plan)
    facts = [
        f"CPU: {hw['cpu'] or hw['isa']} ({hw['isa']}), threads: {threads} for minijit and for scipy "
        "(S @ B over row blocks of equal nnz, one per thread)"
    ]
    facts += [f"GPU: {device}"] if device else []
    facts += [f"date: {meta['date']}", f"command: `{command}`", f"timing: {how}"]
    facts.append(
        "CPU: fp32 S (CSR) x fp32 B (row-major) -> fp32 C; GPU: fp16 S and B, and tf32 (fp32 S and B) -> fp32 C"
    )
    name = f"spmm_{meta['date'][:10]}.md" if gpu else f"spmm_cpu_{meta['date'][:10]}.md"
    title = "SpMM: minijit vs cuSPARSE (GPU) and scipy (CPU)"
    return report.Report(header, body, result, all(r["check"]["ok"] for r in rows), name, title, facts)
