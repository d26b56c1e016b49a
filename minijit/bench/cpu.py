"""The CPU suite of ``minijit bench``: tensor operations next to numpy (and torch) in the same run.

Each row sets up a `TensorOperation` (`make_op`), fills random operands (`operands`), checks one
``execute`` against numpy (`reference`) and times minijit and its peers: numpy ``matmul`` for the
square column-major GEMMs, ``np.einsum(optimize=True)`` for other GEMM/BRGEMM configurations, the
matching ufunc for elementwise ones, ``torch.einsum`` when torch imports. A time is the median of
``reps`` calls after a warm-up (`timeit`), taken in `ROUNDS` rounds that alternate minijit and its
peers (a slow spell of a shared host then hits both), best round kept (one round when a call takes
longer than `LONG_CALL_S`; ``rounds=`` / ``--rounds`` sets the count); the rate is
GFLOPS = ``TensorConfig.flops()`` / time, or GB/s = `moved_bytes` / time for rows whose main
primitive does no flops (copy, zero). The ``minijit/peer`` ratio is always the peer's time over
minijit's. Every round's median is kept in
the row (``round_times_s``), and the table's ``spread`` column gives, per side, how far the slowest
round lies above the best one: a ratio closer to 1.0 than the spreads is not a difference this
host resolves.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from minijit import parallel
from minijit.bench import UserError, report
from minijit.bench.configs import OpSpec, matmul_layout

__all__ = [
    "BlasThreads",
    "alternating_blocks",
    "bench",
    "check_native",
    "checked_gemm_calls",
    "gemm_arrays",
    "make_op",
    "matmul_peer",
    "moved_bytes",
    "operands",
    "reference",
    "shape_table",
    "spread",
    "timeit",
]

MAX_BUFFER_BYTES = 4 << 30
#: Pause before timing minijit: OpenBLAS worker threads keep spinning for a while after a call
#: and would take a core away from minijit's threads. The pause alone may be shorter than their
#: spin, so minijit's rounds also stop them first (`settle`).
SETTLE_S = 0.1
#: rounds alternating minijit and its peers (best round's median kept) ...
ROUNDS = 3
#: ... unless one call takes longer than this (seconds): then one round
LONG_CALL_S = 0.2
MEASUREMENT = (
    f"warm-up, then median of reps time.perf_counter() calls, in {ROUNDS} rounds alternating minijit and its peers"
    " (numpy's OpenBLAS workers stopped and a pause before each minijit round)"
    f" (one round for calls over {LONG_CALL_S} s), best round kept (every round's median in round_times_s, the"
    " slowest over the best in spread); GFLOPS = TensorConfig.flops()/time,"
    " GB/s = (bytes read + written)/time for rows without flops (copy, zero); ratio = peer time / minijit time"
)


def check_native(target: str) -> str:
    """``target`` resolved ("native" -> the host's best); UserError unless this host runs it natively."""
    from minijit import targets

    try:
        resolved = targets.get_cpu(target)
    except ValueError as e:
        raise UserError(str(e)) from None
    if not resolved.native:
        raise UserError(f"bench needs a target this host runs natively; {resolved.name} would be emulated")
    if not resolved.supported:
        raise UserError(f"target {resolved.name} needs ISA extensions this CPU lacks")
    return resolved.name


def make_op(spec: OpSpec, threads: int, target: str):
    """A set-up TensorOperation for ``spec`` (UserError on any setup failure)."""
    from minijit import SetupError, TensorOperation

    opts = dict(spec.options)
    opt = opts.pop("optimize", None)
    has_prims = any(str(e).lower() == "prim" for e in spec.setup["exec_types"])
    if opt is None and has_prims and threads > 1:
        opt = True  # given prims: the optimizer keeps them and adds the shared loops
    opts.setdefault("thread_target", threads)
    try:
        op = TensorOperation(target=target, num_threads=threads)
        op.setup(**spec.setup, optimize=opt, **opts)
    except SetupError as e:
        raise UserError(f"config {spec.name!r}: setup failed: {e}") from None
    except (ValueError, TypeError, NotImplementedError) as e:
        raise UserError(f"config {spec.name!r}: {e}") from None
    return op


@dataclass
class Operands:
    """Flat buffers of the three tensors and numpy views over the elements the op touches."""

    flats: dict[str, np.ndarray]
    base: dict[str, int]
    views: dict[str, np.ndarray]
    subscripts: dict[str, str]

    def array(self, t: str) -> np.ndarray:
        """The buffer handed to execute(): the flat array from the tensor's first element on."""
        return self.flats[t][self.base[t] :]

    def einsum_expr(self) -> str:
        s = self.subscripts
        return f"{s['in0']},{s['in1']}->{s['out']}"


def operands(config, seed: int = 0) -> Operands:
    """Random inputs and a zeroed output for ``config``, with strided views in its dim order."""
    from minijit.ir import offset_range

    dt = config.dtype.numpy
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if len(config.dims) > len(letters):
        raise UserError(f"too many dims ({len(config.dims)}) for an einsum peer")
    flats, base, views, subs = {}, {}, {}, {}
    total = 0
    for t in ("in0", "in1", "out"):
        lo, hi = offset_range(config, t)
        n = hi - lo + 1
        total += n * dt.itemsize
        if total > MAX_BUFFER_BYTES:
            raise UserError(f"the tensors need more than {MAX_BUFFER_BYTES >> 30} GiB")
        flat = np.zeros(n, dt) if t == "out" else rng.uniform(-1, 1, n).astype(dt)
        flats[t], base[t] = flat, -lo
        used = [(i, d) for i, d in enumerate(config.dims) if d.stride(t) != 0]
        shape = tuple(d.size for _, d in used)
        strides = tuple(d.stride(t) * dt.itemsize for _, d in used)
        views[t] = np.lib.stride_tricks.as_strided(flat[-lo:], shape, strides, writeable=t == "out")
        subs[t] = "".join(letters[i] for i, _ in used)
    return Operands(flats, base, views, subs)


def moved_bytes(config) -> int:
    """Bytes the main primitive must move: each element of the tensors it reads once, plus each
    output element written once (broadcast dims, stride 0, count once)."""
    from minijit.ir import ptype_t

    main = config.prim_main
    reads = [] if main is ptype_t.zero else ["in0"] if main in (ptype_t.copy, ptype_t.relu) else ["in0", "in1"]
    elements = 0
    for t in (*reads, "out"):
        n = 1
        for d in config.dims:
            n *= d.size if d.stride(t) != 0 else 1
        elements += n
    return elements * config.dtype.numpy.itemsize


def reference(config, ops: Operands) -> Callable[[], np.ndarray]:
    """numpy computing what execute() writes into the out view (from a zeroed out)."""
    from minijit.ir import ptype_t

    main, v = config.prim_main, ops.views
    if main in (ptype_t.gemm, ptype_t.brgemm):
        expr = ops.einsum_expr()

        def f() -> np.ndarray:
            r = np.einsum(expr, v["in0"], v["in1"], optimize=True)
            return np.maximum(r, 0) if config.prim_last is ptype_t.relu else r

        return f
    full = {}
    for t in ("in0", "in1"):  # broadcast views over every dim, in the out view's dim order
        order = [ops.subscripts[t].find(c) for c in ops.subscripts["out"]]
        arr = v[t]
        full[t] = np.lib.stride_tricks.as_strided(
            arr, v["out"].shape, tuple(arr.strides[j] if j >= 0 else 0 for j in order)
        )
    ufuncs = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum}
    ufuncs["max"] = np.maximum
    if main.name in ufuncs:
        return lambda: ufuncs[main.name](full["in0"], full["in1"])
    if main is ptype_t.zero:
        return lambda: np.zeros(v["out"].shape, v["out"].dtype)
    if main is ptype_t.relu:
        return lambda: np.maximum(full["in0"], 0)
    return lambda: full["in0"].copy()


class BlasThreads:
    """Set numpy's BLAS thread count (threadpoolctl, else the OpenBLAS symbol of the loaded library)."""

    def __init__(self) -> None:
        self._set: Callable[[int], None] | None = None
        self._get: Callable[[], int] | None = None
        self.how = "unavailable"
        try:
            import threadpoolctl  # type: ignore[import-not-found]

            ctl = threadpoolctl.ThreadpoolController()
            blas = ctl.select(user_api="blas")
            if blas.lib_controllers:
                self._set = lambda n: [c.set_num_threads(n) for c in blas.lib_controllers] and None
                self._get = lambda: blas.lib_controllers[0].num_threads
                self.how = "threadpoolctl"
                return
        except Exception:
            pass
        lib = self._openblas()
        if lib is None:
            return
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", "_64_", ""):
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                    self._set, self._get, self.how = setter, getter, "openblas"
                    return

    @staticmethod
    def _openblas() -> ctypes.CDLL | None:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
        except OSError:
            return None
        for p in sorted(paths):
            try:
                return ctypes.CDLL(p)
            except OSError:
                continue
        return None

    def available(self) -> bool:
        """Whether `limit` can set the thread count."""
        return self._set is not None and self._get is not None

    @contextlib.contextmanager
    def limit(self, n: int) -> Iterator[bool]:
        """Run the block with ``n`` BLAS threads; yields whether the limit could be set."""
        if self._set is None or self._get is None:
            yield False
            return
        old = self._get()
        self._set(n)
        try:
            yield True
        finally:
            self._set(old)


def settle() -> None:
    """Before timing minijit: stop numpy's spinning OpenBLAS workers (`minijit.parallel.quiet_blas`;
    the bench makes no concurrent BLAS calls) and pause `SETTLE_S`, so that each side runs on cores
    the other has left (bench/results/x86_64_zen3_blas_handoff_2026-11-27.md)."""
    parallel.quiet_blas()
    time.sleep(SETTLE_S)


def timeit(fn: Callable[[], object], reps: int, warmup: int = 1, min_warm_s: float = 0.05) -> float:
    """Median of ``reps`` timed calls after ``warmup`` calls (more while under ``min_warm_s``)."""
    t0 = time.perf_counter()
    for _ in range(max(warmup, 1)):
        fn()
    while time.perf_counter() - t0 < min_warm_s:
        fn()
    times = []
    for _ in range(max(reps, 1)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def alternating_blocks(calls: dict[str, Callable[[], object]], reps: int, rounds: int, pause_s: float = 0.25) -> dict:
    """For the GEMM scripts in ``bench/``: ``rounds`` rounds, each timing a block of ``reps`` calls
    (`timeit`: the median seconds of one call) of every entry of ``calls`` in turn, after a
    ``pause_s`` sleep and `minijit.parallel.quiet_blas` (OpenBLAS's and the team's threads stop
    spinning); returns each name's
    per-round times, so ratios can be taken round by round on a noisy host."""
    blocks: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            parallel.quiet_blas()
            time.sleep(pause_s)
            blocks[name].append(timeit(call, reps, warmup=1, min_warm_s=0))
    return blocks


def shape_table(
    description: str, default_shapes: str, columns: list[str], measure: Callable[..., str], *, inc: bool = False
) -> None:
    """For the GEMM scripts in ``bench/``: parse ``--shapes`` (comma-separated M x N x K),
    ``--threads``, ``--order`` (C or F), ``--dtype``, ``--rounds`` (and with ``inc``, ``--inc``: a
    positive element stride, passed on as ``measure``'s keyword ``inc``); note when
    OPENBLAS_NUM_THREADS differs from ``--threads`` (numpy would run on another thread count); print
    a markdown table of ``columns`` with one row per shape, ``measure(shape, threads, order,
    dtype, rounds)``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--shapes", default=default_shapes, help="M x N x K, comma-separated")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--order", choices=("C", "F"), default="C")
    p.add_argument("--dtype", choices=("fp32", "fp64"), default="fp32")
    p.add_argument("--rounds", type=int, default=8)
    if inc:
        p.add_argument("--inc", type=int, default=1, help="element stride of the vectors (1: contiguous)")
    args = p.parse_args()
    if inc and args.inc < 1:
        p.error(f"--inc must be a positive integer, got {args.inc}")
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        print(f"note: OPENBLAS_NUM_THREADS is not {args.threads}: numpy may use another thread count")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    extra = {"inc": args.inc} if inc else {}
    for shape in args.shapes.split(","):
        print(measure(shape, args.threads, args.order, args.dtype, args.rounds, **extra), flush=True)


def checked_gemm_calls(ops: dict[str, Any], a: np.ndarray, b: np.ndarray, c: np.ndarray, bufs: tuple) -> dict:
    """For the GEMM scripts in ``bench/``: run each operation of ``ops`` once on ``bufs`` (the arrays
    as `execute` takes them) with ``c`` zeroed and check ``c`` against ``a @ b`` in float64 (raises
    naming the operation); returns the calls to time, each operation's ``execute`` and
    ``np.matmul`` (key "numpy")."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    for name, op in ops.items():
        c[...] = 0
        op.execute(*bufs)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3 * np.sqrt(a.shape[1]), err_msg=name)
    calls: dict[str, Callable[[], object]] = {name: (lambda op=op: op.execute(*bufs)) for name, op in ops.items()}
    calls["numpy"] = lambda: np.matmul(a, b, out=c)
    return calls


def gemm_arrays(a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int, order: str) -> tuple[np.ndarray, ...]:
    """The n x n matrices A, B, C over the first n*n elements of buffers ``a``, ``b``, ``c`` stored
    in ``order`` (`minijit.bench.configs.LAYOUTS`: "F", "C" or the letters of A, B, C), as a numpy
    user holds them: a C-order array, or an F-order one (the layout ``np.asfortranarray`` gives)
    over the same memory. What a square-GEMM row hands to minijit and to its numpy peer."""
    letters = order * 3 if len(order) == 1 else order
    return tuple(
        x[: n * n].reshape(n, n) if o == "C" else x[: n * n].reshape(n, n).T
        for x, o in zip((a, b, c), letters, strict=True)
    )


def matmul_peer(a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int, order: str) -> Callable[[], object]:
    """numpy's ``C = A B`` on the arrays of `gemm_arrays` over buffers ``a``, ``b``, ``c``, as a
    numpy user writes it: ``np.matmul(A, B, out=C)``; into an F-order C as the C-order
    ``C^T = B^T A^T`` (``out=C.T``, the same memory: BLAS writes row-major results, and numpy
    would compute an F-order ``out`` into a temporary and copy it; transposes are BLAS flags)."""
    a2, b2, c2 = gemm_arrays(a, b, c, n, order)
    if c2.flags.c_contiguous:
        return lambda: np.matmul(a2, b2, out=c2)
    return lambda: np.matmul(b2.T, a2.T, out=c2.T)


def bench_one(
    spec: OpSpec, threads: int, target: str, reps: int, blas: BlasThreads, rounds: int | None = None
) -> dict[str, Any]:
    """One row: set up, check once against numpy, time minijit and its peers in ``rounds`` rounds
    (default `ROUNDS`, one for calls over `LONG_CALL_S`)."""
    t0 = time.perf_counter()
    op = make_op(spec, threads, target)
    setup_s = time.perf_counter() - t0
    cfg = op.config
    ops = operands(cfg)
    a0, a1, ao = ops.array("in0"), ops.array("in1"), ops.array("out")
    if cfg.inputs_swapped:  # the operands were built for the optimized config's roles: execute swaps back
        a0, a1 = a1, a0
    layout = matmul_layout(spec.setup) if spec.peer == "matmul" else None
    buffers = a0, a1, ao
    if layout is not None:  # a square GEMM gets the 2-D C- or F-order arrays its name says
        a0, a1, ao = gemm_arrays(*buffers, *layout)
    flops, nbytes = cfg.flops(), moved_bytes(cfg)
    unit, work = ("GFLOPS", flops) if flops else ("GB/s", nbytes)

    # correctness once: out zeroed, one execute, compared with numpy
    ops.flats["out"][:] = 0
    op.execute(a0, a1, ao)
    tol = 1e-4 if cfg.dtype.name == "fp32" else 1e-10
    check = report.check_result(ops.views["out"], reference(cfg, ops)(), tol)

    run = lambda: op.execute(a0, a1, ao)  # noqa: E731
    t_call = time.perf_counter()
    run()
    if rounds is None:
        rounds = ROUNDS if time.perf_counter() - t_call < LONG_CALL_S else 1

    # the peers: (name, call, thread count reported, context that sets their thread count)
    v = ops.views
    is_gemm = cfg.prim_main.name in ("gemm", "brgemm")
    peers: list[tuple[str, Callable[[], object], int | str, Callable[[], Any]]] = []
    limited = blas.available()
    peer_threads: int | str = threads if limited else "default"
    if layout is not None:
        fn = matmul_peer(*buffers, *layout)  # the same arrays as minijit's
        peers.append(("numpy.matmul", fn, peer_threads, lambda: blas.limit(threads)))
    elif is_gemm:
        expr = ops.einsum_expr()
        fn = lambda: np.einsum(expr, v["in0"], v["in1"], optimize=True)  # noqa: E731
        peers.append(("numpy.einsum", fn, peer_threads, lambda: blas.limit(threads)))
    else:
        peers.append(("numpy", reference(cfg, ops), peer_threads, lambda: blas.limit(threads)))
    torch = report.torch_module()
    if torch is not None and is_gemm:
        expr = ops.einsum_expr()
        x, y = torch.from_numpy(np.ascontiguousarray(v["in0"])), torch.from_numpy(np.ascontiguousarray(v["in1"]))
        fn = lambda: torch.einsum(expr, x, y)  # noqa: E731
        peers.append(("torch.einsum", fn, threads, lambda: _torch_threads(torch, threads)))

    times: dict[str, list[float]] = {"minijit": [], **{name: [] for name, *_ in peers}}
    for _ in range(rounds):  # alternate minijit and the peers; a noisy host hits both alike
        settle()  # the previous peer's BLAS threads stop spinning
        times["minijit"].append(timeit(run, reps))
        for name, fn, _, context in peers:
            with context():
                time.sleep(SETTLE_S)
                times[name].append(timeit(fn, reps))
    best = {name: min(t) for name, t in times.items()}
    t_mj = best["minijit"]
    row: dict[str, Any] = {
        "config": spec.name,
        "description": spec.description,
        "dtype": cfg.dtype.name,
        "threads": threads,
        "target": op.target,
        "flops": flops,
        "bytes": nbytes,
        "setup_s": round(setup_s, 4),
        "time_s": t_mj,
        "unit": unit,
        "rate": work / t_mj / 1e9,
        "gflops": flops / t_mj / 1e9 if flops else None,
        "check": check,
        "optimized_config": str(cfg),
        "rounds": rounds,
        "round_times_s": times["minijit"],
        "spread": spread(times["minijit"]),
        "peers": [],
    }
    for name, _, p_threads, _ in peers:
        t = best[name]
        row["peers"].append(
            {
                "name": name,
                "threads": p_threads,
                "time_s": t,
                "rate": work / t / 1e9,
                "gflops": flops / t / 1e9 if flops else None,
                "ratio": t / t_mj,  # minijit rate / peer rate
                "round_times_s": times[name],
                "spread": spread(times[name]),
            }
        )
    return row


def spread(times: list[float]) -> float:
    """How far the slowest of ``times`` (seconds, at least one, all positive) lies above the fastest,
    as a fraction (0.07: 7 %); 0 for a single time. ValueError otherwise."""
    if not times or any(t <= 0 for t in times):
        raise ValueError(f"spread needs positive times, got {times!r}")
    return max(times) / min(times) - 1.0


@contextlib.contextmanager
def _torch_threads(torch, threads: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _summary(row: dict[str, Any]) -> str:
    peers = ", ".join(f"{p['name']} {report.fmt(p['rate'])} ({p['ratio']:.2f}x)" for p in row["peers"])
    status = "" if row["check"]["ok"] else f"  WRONG RESULT (max err {row['check']['max_abs_err']:.3g})"
    return f"    minijit {report.fmt(row['rate'])} {row['unit']}; {peers}{status}"


def bench(
    specs: list[OpSpec],
    threads: list[int],
    target: str,
    reps: int,
    command: str,
    progress: report.Progress = report.quiet,
    rounds: int | None = None,
) -> report.Report:
    """Every spec at every thread count on ``target`` (already checked by `check_native`);
    ``rounds``: alternating rounds per row (None: `ROUNDS`, one for calls over `LONG_CALL_S`)."""
    if rounds is not None and (not isinstance(rounds, int) or rounds < 1):
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    blas = BlasThreads()
    rows: list[dict[str, Any]] = []
    total = len(specs) * len(threads)
    started = time.perf_counter()
    for spec in specs:
        for th in threads:
            progress(f"[{len(rows) + 1}/{total}] {spec.name} {spec.setup['dtype']} threads={th} ...")
            rows.append(bench_one(spec, th, target, reps, blas, rounds))
            progress(_summary(rows[-1]))
    hw = report.hardware()
    header = [f"# minijit bench: {report.describe_cpu(hw)}, {hw['cores']} cores, {target}, reps {reps} (median)"]
    if rounds is not None:
        header[0] += f", {rounds} rounds"
    if blas.how == "unavailable":
        header.append("# note: numpy's BLAS thread count could not be set; peers used their default threads")
    settings = {
        "target": target,
        "reps": reps,
        "rounds": rounds or "auto",
        "threads": threads,
        "blas_threads_control": blas.how,
    }
    result = {
        **report.meta(command),
        "hardware": hw,
        "versions": report.versions(),
        "settings": {**settings, "measurement": MEASUREMENT},
        "elapsed_s": round(time.perf_counter() - started, 2),
        "results": rows,
    }
    return report.Report(header, [report.cpu_table(rows)], result, all(r["check"]["ok"] for r in rows))
