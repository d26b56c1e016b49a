"""GPU rows for ``minijit bench cuda``: tensor-core GEMM/BRGEMM kernels vs torch (cuBLAS).

Cases, each for fp16, bf16 and fp32 inputs (fp32 runs as tf32; torch gets
``torch.backends.cuda.matmul.allow_tf32 = True``); output C is fp32 for minijit and the input
type for torch:

- ``gemm``: an M = N = K = ``size`` column-major GEMM against ``torch.matmul``;
- the seed 004 configurations ``seed gemm``, ``seed brgemm`` and ``seed zero-brgemm-relu``
  (`minijit.bench.configs.BUILTIN_CONFIGS`: A[m0,k0,k1,m1], B[n0,k0,n1,k1], C[m0,n0,n1,m1]) scaled up to fill
  the GPU: prims m1 = n1 = 512, k1 = 64, k0 = 32 and the outer m0 = n0 = ``size`` / 512 run
  ``shared`` (C is size x size, K = 2048; at 8192: 256 output blocks of 16 CTA tiles each),
  against ``torch.einsum`` (+ ``torch.relu``). Large prims, few loop iterations, so each launch
  has much work (``execute``'s host time per call is independent of the table sizes: the copy
  widths they imply are cached per operand alignment).

Timing: 3 warm-up calls, then ``torch.cuda.Event`` around ``iters`` calls (mean);
TFLOPS = 2 * (product of the dim sizes) / time. Each case is checked once against a torch fp32
reference (tf32 off) from the same inputs: ``max rel err`` = max |C - ref| / max |ref|.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from minijit.bench import report
from minijit.cuda import families
from minijit.cuda.families import NO_PTXAS

__all__ = [
    "DTYPES",
    "SIZE",
    "TOL",
    "Case",
    "bench",
    "cases",
    "environment",
    "measure",
    "missing",
    "seed_dims",
    "table",
    "target_status",
]

SIZE = 8192
QUICK_SIZE = 4096
MIN_SIZE, MAX_SIZE = 16, 16384
DTYPES = ("fp16", "bf16", "fp32")
#: ``check`` tolerance of the max relative error (fp32 inputs are rounded to tf32, the reference is not)
TOL = {"fp16": 1e-3, "bf16": 1e-3, "fp32": 1e-2}
SEED_CONFIGS = ("gemm", "brgemm", "zero-brgemm-relu")
SEED_EXPR = "akcb,dkec->adeb"  # A[m0,k0,k1,m1], B[n0,k0,n1,k1] -> C[m0,n0,n1,m1]
WARMUP = 3
TIMING = f"{WARMUP} warm-up calls, then torch.cuda.Event around iters calls (mean); TFLOPS = 2 * prod(dims) / time"
Progress = report.Progress


@dataclass(frozen=True)
class Case:
    """One benchmark case: CudaTensorOperation.setup arguments, dense operand shapes, the peer."""

    name: str
    dtype: str
    sizes: str
    setup_args: tuple  # setup() arguments after dtype
    expr: str  # einsum of the dense operands a, b -> c (before a ReLU)
    shapes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    relu: bool
    peer: str  # "torch.matmul" or "torch.einsum"
    flops: float
    family: str | None = None  # GEMM kernel family forced for this row (None: chosen by device)

    def operation(self):
        """The set-up `CudaTensorOperation` (needs no GPU)."""
        from minijit.cuda import CudaTensorOperation

        op = CudaTensorOperation(family=self.family)
        op.setup(self.dtype, *self.setup_args)
        return op

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """numpy float64 reference of C from the dense operands."""
        r = np.einsum(self.expr, a.astype(np.float64), b.astype(np.float64))
        return np.maximum(r, 0) if self.relu else r


def seed_dims(size: int) -> tuple[int, int, int, int, int, int]:
    """(m0, n0, k0, m1, n1, k1) of the scaled seed configurations for ``--size``."""
    outer = max(1, size // 512)
    return outer, outer, 32, 512, 512, 64


def cases(size: int, dims: tuple[int, ...] | None = None) -> list[Case]:
    """The GEMM and the three seed cases for every dtype (``dims``: override `seed_dims`)."""
    from minijit.bench.configs import BUILTIN_CONFIGS

    n = size
    out = []
    for dt in DTYPES:
        gemm = ("zero", "gemm", "none", "mnk", ("prim",) * 3, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0))
        # at[k, m] = A[m, k] (column-major A), bt[n, k] = B[k, n], c[n, m] = C[m, n]
        shapes = ((n, n), (n, n), (n, n))
        out.append(Case("gemm", dt, f"M=N=K={n}", gemm, "km,nk->nm", shapes, False, "torch.matmul", 2.0 * n**3))
    m0, n0, k0, m1, n1, k1 = dims or seed_dims(size)
    sizes = (m0, n0, k0, m1, n1, k1)
    strides = (
        (k0 * k1 * m1, 0, k1 * m1, 1, 0, m1),
        (0, k0 * n1 * k1, n1 * k1, 0, k1, 1),
        (n0 * n1 * m1, n1 * m1, 0, 1, m1, 0),
    )
    shapes = ((m0, k0, k1, m1), (n0, k0, n1, k1), (m0, n0, n1, m1))
    desc = f"M={m0 * m1} N={n0 * n1} K={k0 * k1} as (m0,n0,k0,m1,n1,k1)=({','.join(map(str, sizes))}), m0,n0 shared"
    for name in SEED_CONFIGS:
        s = BUILTIN_CONFIGS[name].setup
        exec_types = ("shared", "shared", *s["exec_types"][2:])  # the seed's outer seq M, N loops
        args = (s["prim_first"], s["prim_main"], s["prim_last"], s["dim_types"], exec_types, sizes, *strides)
        relu = s["prim_last"] == "relu"
        for dt in DTYPES:
            flops = 2.0 * math.prod(sizes)
            out.append(Case(f"seed {name}", dt, desc, args, SEED_EXPR, shapes, relu, "torch.einsum", flops))
    return out


def driver_problem() -> str | None:
    """Why ``ptx.driver.available()`` is False (no bindings, no driver, no GPU), or None when it is True."""
    return families.driver_problem()


def target_status() -> tuple[bool, str]:
    """Whether ``TensorOperation(target="cuda")`` runs here: (True, device and ptxas) or (False, what is missing)."""
    import ptx
    from ptx import driver

    ptxas = ptx.find_ptxas()
    problems = [p for p in (None if ptxas else NO_PTXAS, driver_problem()) if p]
    if problems:
        return False, "; ".join(problems)
    dev = driver.device()
    return True, f"{dev.name} ({dev.arch}), ptxas {ptxas}"


def missing() -> str | None:
    """What the GPU benchmark lacks here, as one line, or None when it can run."""
    import ptx

    problem = driver_problem()
    if problem:
        return f"no usable CUDA GPU: ptx.driver.available() is False: {problem}"
    if ptx.find_ptxas() is None:
        return NO_PTXAS
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        return "torch is not installed (the peer: torch.matmul / torch.einsum on cuBLAS)"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device (torch.cuda.is_available() is False)"
    return None


def _timed(torch, fn: Callable[[], object], iters: int) -> float:
    """Seconds per call: warm-up, then CUDA events around ``iters`` calls."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters / 1e3


def _measure(torch, case: Case, iters: int) -> dict[str, Any]:
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[case.dtype]
    op = case.operation()
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(case.shapes[0], device="cuda", generator=gen).to(tdt)
    b = torch.randn(case.shapes[1], device="cuda", generator=gen).to(tdt)
    c = torch.zeros(case.shapes[2], device="cuda", dtype=torch.float32)

    def peer() -> object:
        r = torch.matmul(b, a) if case.peer == "torch.matmul" else torch.einsum(case.expr, a, b)
        return torch.relu(r) if case.relu else r

    # correctness once, from a zeroed C (the accumulating seed configs add to C)
    op.execute(a, b, c)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = torch.einsum(case.expr, a.float(), b.float())
    if case.relu:
        ref = torch.relu(ref)
    scale = ref.abs().max().item()
    err = (c - ref).abs().max().item() / max(scale, 1e-30)
    del ref
    torch.backends.cuda.matmul.allow_tf32 = True
    t_ours = _timed(torch, lambda: op.execute(a, b, c, sync=False), iters)
    t_peer = _timed(torch, peer, iters)
    return {
        "case": case.name,
        "dtype": case.dtype,
        "sizes": case.sizes,
        "flops": case.flops,
        "time_s": t_ours,
        "tflops": case.flops / t_ours / 1e12,
        "peer": {"name": case.peer, "time_s": t_peer, "tflops": case.flops / t_peer / 1e12},
        "ratio": t_peer / t_ours,  # minijit TFLOPS / peer TFLOPS
        "max_rel_err": err,
        "check": {"max_rel_err": err, "tol": TOL[case.dtype], "ok": bool(err <= TOL[case.dtype])},
        "kernel": _kernel_name(op),
    }


def _kernel_name(op) -> str:
    """The name of the GEMM kernel ``op`` launches on this device (sm90a or mma.sync family)."""
    from ptx import driver

    if op.plan is None and op.family_for(driver.device().arch) == "sm90a":
        return op.sm90_spec().name
    return op.spec.name


def measure(size: int, iters: int, progress: Progress = report.quiet) -> list[dict[str, Any]]:
    """Measure every case (needs `missing()` to be None)."""
    import torch  # type: ignore[import-not-found]

    from ptx import driver

    driver.device()  # the primary context, shared with torch
    old = torch.backends.cuda.matmul.allow_tf32
    todo = cases(size)
    rows: list[dict[str, Any]] = []
    try:
        for i, case in enumerate(todo, 1):
            progress(f"[{i}/{len(todo)}] {case.name} {case.dtype} {case.sizes} ...")
            rows.append(_measure(torch, case, iters))
            r, p = rows[-1], rows[-1]["peer"]
            status = "" if r["check"]["ok"] else f"  WRONG RESULT (max rel err {r['max_rel_err']:.3g})"
            progress(f"    minijit {r['tflops']:.1f} TFLOPS; {p['name']} {p['tflops']:.1f} ({r['ratio']:.2f}x){status}")
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return rows


#: launch-overhead row: a GEMM small enough that its kernel is shorter than the host's work
OVERHEAD_SIZE, OVERHEAD_CALLS = 64, 2000


def per_call_us(clock: Callable[[], float], fn: Callable[[], object], sync: Callable[[], object], calls: int) -> float:
    """Microseconds per call of ``calls`` back-to-back ``fn()`` followed by one ``sync()``
    (asynchronous launches: the host rate, once launches outpace the kernels)."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    fn()
    sync()
    start = clock()
    for _ in range(calls):
        fn()
    sync()
    return (clock() - start) / calls * 1e6


def launch_overhead(calls: int = OVERHEAD_CALLS) -> dict[str, Any]:
    """Host time per ``execute(..., sync=False)`` of a 64^3 fp16 GEMM on torch device tensors,
    next to ``torch.matmul`` on the same tensors (the issue's bound: under 10 us)."""
    import torch  # type: ignore[import-not-found]

    from minijit.cuda import CudaTensorOperation

    n = OVERHEAD_SIZE
    op = CudaTensorOperation()
    op.setup("fp16", "zero", "gemm", "none", "mnk", ("prim",) * 3, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0))
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.zeros(n, n, device="cuda", dtype=torch.float32)
    ours = per_call_us(time.perf_counter, lambda: op.execute(a, b, c, sync=False), torch.cuda.synchronize, calls)
    peer = per_call_us(time.perf_counter, lambda: torch.matmul(b, a), torch.cuda.synchronize, calls)
    return {"case": f"launch overhead ({n}^3 fp16, execute sync=False)", "minijit_us": ours, "torch_us": peer}


def table(rows: list[dict[str, Any]]) -> str:
    head = ["case", "dtype", "sizes", "minijit TFLOPS", "peer", "peer TFLOPS", "minijit/peer", "max rel err"]
    head += ["check", "kernel"]
    out = []
    for r in rows:
        p = r["peer"]
        cells = [r["case"], r["dtype"], r["sizes"], f"{r['tflops']:.1f}", p["name"], f"{p['tflops']:.1f}"]
        cells += [f"{r['ratio']:.2f}x", f"{r['max_rel_err']:.1e}", "ok" if r["check"]["ok"] else "ERR", r["kernel"]]
        out.append(cells)
    return report.markdown_table(head, out)


def _driver_version() -> str:
    parts = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if r.returncode == 0 and r.stdout.strip():
                parts.append(r.stdout.strip().splitlines()[0])
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from ptx import driver

        v = driver.version()
        parts.append(f"CUDA {v // 1000}.{v % 1000 // 10}")
    except Exception:
        pass
    return " ".join(parts[:1] + [f"({p})" for p in parts[1:]]) or "?"


def environment() -> dict[str, Any]:
    """Device, driver, torch and ptxas versions (needs `missing()` to be None)."""
    import torch  # type: ignore[import-not-found]

    from ptx import driver, toolchain

    dev = driver.device()
    lines = toolchain.ptxas_version().splitlines()
    ptxas = next((ln for ln in lines if "release" in ln), lines[-1] if lines else "?")
    return {
        "device": f"{dev.name} ({dev.arch})",
        "driver": _driver_version(),
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
        "ptxas": ptxas.strip(),
    }


def bench(size: int, iters: int, command: str, progress: Progress = report.quiet) -> report.Report:
    """Measure every case (needs `missing()` to be None) and report them."""
    started = time.perf_counter()
    rows = measure(size, iters, progress)
    overhead = launch_overhead()
    us = (overhead["minijit_us"], overhead["torch_us"])
    progress(f"    launch overhead: minijit {us[0]:.1f} us per execute, torch.matmul {us[1]:.1f} us")
    env = environment()
    header = [f"# minijit bench cuda: {env['device']}, driver {env['driver']}, size {size}, iters {iters}"]
    meta = report.meta(command)
    settings = {"size": size, "iters": iters, "warmup": WARMUP, "measurement": TIMING}
    result = {**meta, "device": env, "versions": report.versions(), "settings": settings}
    result.update(elapsed_s=round(time.perf_counter() - started, 2), results=rows, launch_overhead=overhead)
    facts = [f"{k}: {v}" for k, v in env.items()]
    facts += [f"date: {meta['date']}", f"command: `{command}`", f"timing: {TIMING}"]
    facts.append("fp32 rows: minijit tf32 (cvt.rna, fp32 C) vs torch with allow_tf32; torch's C has the input dtype")
    ok = all(r["check"]["ok"] for r in rows)
    title = "CUDA GEMM/BRGEMM: minijit vs torch (cuBLAS)"
    line = (
        f"{overhead['case']}: minijit {overhead['minijit_us']:.1f} us per call, torch.matmul "
        f"{overhead['torch_us']:.1f} us ({OVERHEAD_CALLS} calls, then one synchronize)"
    )
    return report.Report(header, [table(rows), line], result, ok, f"cuda_{meta['date'][:10]}.md", title, facts)
