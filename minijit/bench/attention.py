"""``minijit bench attention``: `minijit.scaled_dot_product_attention` next to torch's
``F.scaled_dot_product_attention`` (when torch imports) and numpy written out (the full L x S
softmax), in one process, in alternating rounds (each side's best round kept).

Per row (shape, dtype, threads): each side's best time and GFLOPS (4 L S E per (batch, head),
only the visible (query, key) pairs when causal), the ratios, minijit's result checked against
numpy's, and, where the fused kernel runs, the model's (`minijit.attention.model.plan`) predicted
share of the softmax next to the measured one: the plan timed with the kernel built without its
softmax stage (`minijit.kernels.x86_64.attention.generate(softmax=False)`), share = 1 - that time
over the full time. ``sweep`` times the fused kernel's (g, s_x) tiles of `SWEEP_G` x `SWEEP_SX`
on each shape and says where the plan's own tile (`AttentionPlan.kernel_tile`) ranks.

    from minijit.bench import attention
    print("\\n".join(attention.bench(attention.QUICK, [1], ["fp32"], 2, 3, False, "").body))
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minijit.bench import report as reports

__all__ = ["QUICK", "SHAPES", "SWEEP_G", "SWEEP_SX", "Shape", "bench", "numpy_attention", "sweep"]


@dataclass(frozen=True)
class Shape:
    """One bench shape: ``batch`` x ``heads`` slices of L queries, S keys, E = Ev."""

    batch: int
    heads: int
    L: int
    S: int
    E: int
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "L", "S", "E"):
            x = getattr(self, name)
            if not isinstance(x, int) or isinstance(x, bool) or x < 1:
                raise ValueError(f"Shape.{name} must be a positive int, got {x!r}")

    @property
    def name(self) -> str:
        L = f"L={self.L}, S={self.S}" if self.L != self.S else f"L=S={self.L}"
        return f"{self.batch}x{self.heads}, {L}, E={self.E}" + (", causal" if self.causal else "")

    def flops(self) -> float:
        """2 (E + Ev) per visible (query, key) pair, all slices."""
        if self.causal:
            pairs = sum(min(i + 1, self.S) for i in range(self.L))
        else:
            pairs = self.L * self.S
        return 4.0 * self.E * pairs * self.batch * self.heads


#: issue 50's shapes
SHAPES = (
    Shape(1, 8, 2048, 2048, 64),
    Shape(1, 8, 2048, 2048, 64, True),
    Shape(1, 4, 4096, 4096, 128),
    Shape(4, 16, 512, 512, 64),
    Shape(2, 8, 1024, 1024, 128, True),
    Shape(1, 32, 1, 4096, 128),
)
#: ``--quick``: small shapes of the same kinds (a decode row included)
QUICK = (
    Shape(1, 2, 128, 128, 32),
    Shape(1, 2, 128, 128, 32, True),
    Shape(2, 2, 64, 96, 16),
    Shape(1, 4, 1, 512, 32),
)
#: the sweep's query rows and keys (in vectors of the native ISA) of the fused kernel's tile (rows
#: past the generator's ``G_MAX`` left out: AArch64 runs one register block a tile)
SWEEP_G = (4, 6, 8, 12, 18, 24)
SWEEP_SX = (2, 3, 4, 6, 8, 12, 16)

TOLERANCE = {"fp32": 3e-5, "fp64": 1e-12}
DTYPES = {"fp32": np.float32, "fp64": np.float64}


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, scale: float) -> np.ndarray:
    """numpy written out: the full L x S scores, their softmax, the product with V."""
    s = np.matmul(q, np.swapaxes(k, -1, -2))
    s *= s.dtype.type(scale)
    if causal:
        L, S = s.shape[-2:]
        s[..., ~np.tril(np.ones((L, S), bool))] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


def blas_threads(n: int) -> None:
    """numpy's OpenBLAS threads set to ``n`` (where the library exports the setter)."""
    from minijit import parallel

    for path in parallel.loaded_openblas():
        lib = ctypes.CDLL(path)
        for name in ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                break


#: the bench's clocks: elapsed time, or the process's CPU time over all its threads
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = CLOCKS["wall"]


def _best(fn: Callable[[], object], reps: int) -> float:
    best = math.inf
    for _ in range(reps):
        t0 = _clock()
        fn()
        best = min(best, _clock() - t0)
    return best


def _reps_for(seconds: float, reps: int) -> int:
    """Fewer repetitions for slow calls (at least 1, about 1.5 s a side and round at most)."""
    return max(1, min(reps, int(1.5 / max(seconds, 1e-6))))


def _operands(shape: Shape, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    dims = (shape.batch, shape.heads)
    q = rng.standard_normal((*dims, shape.L, shape.E), dtype=np.float64).astype(dtype)
    k = rng.standard_normal((*dims, shape.S, shape.E), dtype=np.float64).astype(dtype)
    v = rng.standard_normal((*dims, shape.S, shape.E), dtype=np.float64).astype(dtype)
    return q, k, v


def _cpu_hz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1]) * 1e6
    except (OSError, ValueError):
        pass
    return None


def _plan(shape: Shape, dtype: str, threads: int, tile: tuple[int, int] | None = None):
    from minijit.attention.api import AttentionPlan

    q = (shape.batch, shape.heads, shape.L, shape.E)
    k = (shape.batch, shape.heads, shape.S, shape.E)
    mask = "causal" if shape.causal else "none"
    return AttentionPlan(q, k, k, np.dtype(DTYPES[dtype]), mask, threads=threads, tile=tile)


def _torch_call(torch, shape: Shape, q, k, v, threads: int):
    F = torch.nn.functional
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

    def call():
        torch.set_num_threads(threads)
        with torch.inference_mode():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=shape.causal)

    return call


def measure_row(
    shape: Shape, dtype: str, threads: int, rounds: int, reps: int, progress: reports.Progress = reports.quiet
) -> dict[str, Any]:
    """One row: minijit, torch (when it imports) and numpy written out at ``threads`` threads,
    ``rounds`` alternating rounds of up to ``reps`` calls each (best kept); the check against
    numpy's result; the model's and the measured softmax share where the fused kernel runs."""
    from minijit import parallel
    from minijit.attention import api, model

    torch = reports.torch_module()
    q, k, v = _operands(shape, DTYPES[dtype])
    plan = _plan(shape, dtype, threads)
    scale = 1.0 / math.sqrt(shape.E)
    fused = api.FUSED and shape.L > api.DECODE_MAX_ROWS and api.fused_kernel(plan.dtype) is not None
    sides: dict[str, Callable[[], object]] = {"minijit": lambda: plan.execute(q, k, v)}
    if fused:
        sides["minijit without softmax"] = lambda: plan.execute_without_softmax(q, k, v)
    if torch is not None:
        sides["torch"] = _torch_call(torch, shape, q, k, v, threads)
    sides["numpy"] = lambda: numpy_attention(q, k, v, shape.causal, scale)
    blas_threads(threads)
    outs = {name: fn() for name, fn in sides.items()}  # warm-up: kernels built, buffers touched
    best = dict.fromkeys(sides, math.inf)
    for r in range(rounds):
        for name, fn in sides.items():
            if name != "numpy":
                parallel.quiet_blas()  # numpy's BLAS workers would spin on the cores minijit uses
            best[name] = min(best[name], _best(fn, _reps_for(best[name] if r else 0.2, reps)))
        progress(f"  round {r + 1}: " + ", ".join(f"{n} {1e3 * t:.2f} ms" for n, t in best.items()))
    ref = outs["numpy"]
    check = reports.check_result(outs["minijit"], ref, TOLERANCE[dtype])
    flops = shape.flops()
    row: dict[str, Any] = {
        "shape": shape.name,
        "batch": shape.batch,
        "heads": shape.heads,
        "L": shape.L,
        "S": shape.S,
        "E": shape.E,
        "causal": shape.causal,
        "dtype": dtype,
        "threads": threads,
        "path": "fused kernel"
        if fused
        else "decode (key chunks, merged)"
        if shape.L <= api.DECODE_MAX_ROWS
        else "numpy tiles",
        "tile": list(plan.kernel_tile()) if fused else None,
        "check": check,
    }
    for name in ("minijit", "torch", "numpy"):
        if name in best:
            row[f"{name}_ms"] = 1e3 * best[name]
            row[f"{name}_gflops"] = flops / best[name] / 1e9
    for name in ("torch", "numpy"):
        if name in best:
            row[f"vs_{name}"] = best[name] / best["minijit"]
    if torch is not None:
        row["torch_check"] = reports.check_result(np.asarray(outs["torch"]), ref, TOLERANCE[dtype])
    m = model.plan(
        shape.batch, shape.heads, shape.L, shape.S, shape.E, dtype=dtype, causal=shape.causal, threads=threads
    )
    shares = m.time.shares()
    row["model"] = {
        "g_q": m.tiling.g_q,
        "s_x": m.tiling.s_x,
        "key_split": m.tiling.key_split,
        "cycles": m.time.total,
        "softmax_share": shares.get("softmax", 0.0),
        "products_share": shares.get("Q K^T", 0.0) + shares.get("P V", 0.0),
        "limit": m.time.limit,
    }
    hz = _cpu_hz()
    if hz:
        row["model"]["ms_at_cpuinfo_clock"] = 1e3 * m.time.total / hz
    if fused:
        t_ns = best["minijit without softmax"]
        row["measured_softmax_share"] = max(0.0, 1.0 - t_ns / best["minijit"])
        row["minijit_without_softmax_ms"] = 1e3 * t_ns
    return row


def sweep(
    shape: Shape, dtype: str, threads: int, rounds: int, reps: int, progress: reports.Progress = reports.quiet
) -> dict[str, Any]:
    """The fused kernel's (g, s_x) tiles of `SWEEP_G` x `SWEEP_SX` (vectors) on ``shape`` (the plan
    with ``tile`` pinned, alternating rounds, best kept; every tile's result checked against the
    first's), and the rank of the plan's own tile among them (added to the grid when off it)."""
    from minijit import parallel, targets
    from minijit.attention import api

    found = api.fused_kernel(np.dtype(DTYPES[dtype]))
    if found is None or shape.L <= api.DECODE_MAX_ROWS:
        return {"shape": shape.name, "dtype": dtype, "threads": threads, "skipped": "no fused kernel for this shape"}
    kernel = found[1]  # the generator module: its tile limits
    vl = targets.native().vector_lanes(DTYPES[dtype])
    q, k, v = _operands(shape, DTYPES[dtype])
    chosen = _plan(shape, dtype, threads).kernel_tile()
    tiles = [(g, vl * n) for g in SWEEP_G for n in SWEEP_SX if n <= kernel.SX_VECTORS_MAX and g <= kernel.G_MAX]
    if chosen not in tiles:
        tiles.append(chosen)
    plans = {t: _plan(shape, dtype, threads, t) for t in tiles}
    first = plans[tiles[0]].execute(q, k, v)
    ok = True
    for p in plans.values():
        ok &= reports.check_result(p.execute(q, k, v), first, TOLERANCE[dtype])["ok"]
    best = dict.fromkeys(tiles, math.inf)
    for r in range(rounds):
        for t, p in plans.items():
            parallel.quiet_blas()
            best[t] = min(best[t], _best(lambda p=p: p.execute(q, k, v), _reps_for(best[t] if r else 0.2, reps)))
        progress(f"  sweep round {r + 1} of {rounds}")
    order = sorted(tiles, key=lambda t: best[t])
    top = order[0]
    return {
        "shape": shape.name,
        "dtype": dtype,
        "threads": threads,
        "times_ms": {f"{g}x{s}": 1e3 * best[(g, s)] for g, s in tiles},
        "best": list(top),
        "best_ms": 1e3 * best[top],
        "chosen": list(chosen),
        "chosen_ms": 1e3 * best[chosen],
        "chosen_rank": order.index(chosen) + 1,
        "tiles": len(tiles),
        "chosen_over_best": best[chosen] / best[top],
        "ok": bool(ok),
    }


def _geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _table(rows: list[dict[str, Any]]) -> str:
    f = reports.fmt
    head = ["shape", "dtype", "threads", "path", "minijit ms", "GFLOPS", "torch ms", "GFLOPS", "vs torch",
            "numpy ms", "GFLOPS", "vs numpy", "softmax share model / measured", "check"]  # fmt: skip
    out = []
    for r in rows:
        share = f"{100 * r['model']['softmax_share']:.0f} %"
        share += f" / {100 * r['measured_softmax_share']:.0f} %" if "measured_softmax_share" in r else " / -"
        out.append([
            r["shape"], r["dtype"], str(r["threads"]),
            r["path"] + (f" {r['tile'][0]}x{r['tile'][1]}" if r["tile"] else ""),
            f(r["minijit_ms"], 2), f(r["minijit_gflops"]), f(r.get("torch_ms"), 2), f(r.get("torch_gflops")),
            _ratio(r.get("vs_torch")), f(r["numpy_ms"], 2), f(r["numpy_gflops"]), _ratio(r["vs_numpy"]), share,
            "ok" if r["check"]["ok"] else f"ERR {r['check']['max_abs_err']:.2g}",
        ])  # fmt: skip
    return reports.markdown_table(head, out)


def _sweep_table(sweeps: list[dict[str, Any]]) -> str:
    out = []
    for s in sweeps:
        if "skipped" in s:
            out.append([s["shape"], s["dtype"], str(s["threads"]), "-", "-", "-", "-", s["skipped"]])
            continue
        b, c = s["best"], s["chosen"]
        out.append([
            s["shape"], s["dtype"], str(s["threads"]), f"{b[0]}x{b[1]} ({s['best_ms']:.2f} ms)",
            f"{c[0]}x{c[1]} ({s['chosen_ms']:.2f} ms)", f"{s['chosen_rank']} of {s['tiles']}",
            f"{100 * (s['chosen_over_best'] - 1):.1f} %", "ok" if s["ok"] else "ERR",
        ])  # fmt: skip
    head = ["shape", "dtype", "threads", "best tile g x s_x", "plan's tile", "rank", "plan over best", "check"]
    return reports.markdown_table(head, out)


def bench(
    shapes: Sequence[Shape],
    threads: Sequence[int],
    dtypes: Sequence[str],
    rounds: int,
    reps: int,
    do_sweep: bool,
    command: str,
    progress: reports.Progress = reports.quiet,
    clock: str = "wall",
) -> reports.Report:
    """``minijit bench attention``: `measure_row` for every shape, dtype and thread count (and
    `sweep` per shape and dtype at the first thread count with ``do_sweep``) as a report, timed by
    ``clock`` (`CLOCKS`: "wall", or "cpu": the process's CPU time over all its threads)."""
    global _clock
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    _clock = CLOCKS[clock]
    try:
        return _bench(shapes, threads, dtypes, rounds, reps, do_sweep, command, progress, clock)
    finally:
        _clock = CLOCKS["wall"]


def _bench(shapes, threads, dtypes, rounds, reps, do_sweep, command, progress, clock: str) -> reports.Report:
    torch = reports.torch_module()
    rows, sweeps = [], []
    for dtype in dtypes:
        for shape in shapes:
            for t in threads:
                progress(f"attention {shape.name} {dtype} {t} thread(s)")
                rows.append(measure_row(shape, dtype, t, rounds, reps, progress))
            if do_sweep:
                progress(f"sweep {shape.name} {dtype} {threads[0]} thread(s)")
                sweeps.append(sweep(shape, dtype, threads[0], rounds, reps, progress))
    hw = reports.hardware()
    summary = []
    for dtype in dtypes:
        for t in threads:
            sel = [r for r in rows if r["dtype"] == dtype and r["threads"] == t]
            vt, vn = _geomean([r.get("vs_torch") for r in sel]), _geomean([r["vs_numpy"] for r in sel])
            worst = min((r["vs_torch"] for r in sel if "vs_torch" in r), default=None)
            summary.append({"dtype": dtype, "threads": t, "geomean_vs_torch": vt, "min_vs_torch": worst,
                            "geomean_vs_numpy": vn})  # fmt: skip
    lines = [
        f"{s['dtype']}, {s['threads']} thread(s): geomean "
        + (
            f"{s['geomean_vs_torch']:.2f}x torch (lowest row {s['min_vs_torch']:.2f}x), "
            if s["geomean_vs_torch"]
            else ""
        )
        + f"{s['geomean_vs_numpy']:.2f}x numpy written out"
        for s in summary
    ]
    body = [_table(rows), "", *lines]
    if sweeps:
        body += ["", _sweep_table(sweeps)]
    ok = all(r["check"]["ok"] for r in rows) and all(s.get("ok", True) for s in sweeps)
    header = [
        f"# minijit bench attention: {reports.describe_cpu(hw)}, {hw.get('cores', '?')} cores; "
        + ("torch " + torch.__version__ if torch is not None else "torch not installed")
        + f"; best of {rounds} alternating rounds"
        + ("; clock: the process's CPU time over all its threads" if clock == "cpu" else "; clock: wall")
    ]
    result = {
        **reports.meta(command),
        "hardware": hw,
        "versions": reports.versions(),
        "settings": {
            "threads": list(threads),
            "dtypes": list(dtypes),
            "rounds": rounds,
            "reps": reps,
            "sweep": do_sweep,
            "clock": clock,
            "shapes": [s.name for s in shapes],
        },  # fmt: skip
        "results": rows,
        "summary": summary,
        "sweep": sweeps,
    }
    title = f"minijit bench attention ({reports.describe_cpu(hw)})"
    facts = [f"command: `{command}`", f"date: {result['date']}"]
    return reports.Report(header, body, result, ok, "attention_bench.md", title, facts)
