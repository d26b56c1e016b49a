"""Einsum rows for ``minijit bench einsum``: `minijit.EinsumPlan` next to ``np.einsum(optimize=True)``.

Real expressions (attention scores, batched matmul, Tucker, tensor train, a chemistry-style
4-index transform, a matrix chain, the lab's einsum tree at reduced and at full size) and random
ones (fixed seeds): minijit's own generator (`random_cases`), and `generated_cases` from the
``einsum_benchmark`` package's generators (matrix chains, trees, lattices, random networks and
hypernetworks) and ``opt_einsum.testing.rand_equation``, each when it imports.

Each row builds one plan (its setup time is reported, not timed), checks one run against
``np.einsum`` in float64 (on a slice for outputs above ``CHECK_ELEMENTS``), then times minijit
and its peers in the same run: numpy ``einsum(optimize=True)`` always, ``torch.einsum`` and
``opt_einsum.contract`` when they import. A time is the median of ``reps`` calls after a warm-up
(`minijit.bench.cpu.timeit`), taken in ``ROUNDS`` rounds that alternate minijit and its peers,
best round kept; GFLOPS for every column = the flops of minijit's plan (its nodes'
``TensorConfig.flops()``) / time, so the ``minijit/peer`` ratio is the peer's time over
minijit's. The summary gives the geometric mean of the numpy ratios over the real and over the
random rows.

Integer rows (`int_cases`: GEMM-like, batched, matrix-vector, attention-scores and row-dot
expressions in int32 and int64, whatever ``dtype`` the float rows run in) time minijit's integer
kernels against ``np.einsum(optimize=True)`` and, where the expression is a matmul, ``np.matmul``
(numpy's integer matmul has no BLAS); each result is checked bit for bit against ``np.einsum``.
Their rate is GOPS (a multiply-add counts two), their table and geomeans come after the float ones
(``int_results`` in the JSON).

complex64, complex128 and float16 rows (`dtype_cases`: GEMM-like, batched and matrix-vector, in
``dtype_results``) time ``minijit.einsum`` itself, on whatever path it takes for the dtype (its
compiled one, or numpy's einsum where it delegates; the row's ``path`` says which, from
``explain=True``), against ``np.einsum(optimize=True)`` and, for complex, ``np.matmul`` (OpenBLAS
cgemm/zgemm, at the row's thread count). Their rate is GFLOPS counted in real flops: a complex
multiply-add is 8 (4 real multiplies, 4 real adds), a float16 one 2; every column divides the same
count by its own time. Each result is checked against the exact contraction (float64/complex128
of the same operands) within a rounding bound, ``(n + 2k + 2) u sum|x|`` (four times that for
complex; n terms per element, k operands, u the dtype's unit roundoff), and the ``np.matmul``
peer within the same bound. ``rows`` ("all", "float", "typed") picks the float suite, the typed
(integer, complex, float16) rows, or both.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from minijit.bench import report
from minijit.bench.cpu import LONG_CALL_S, SETTLE_S, BlasThreads, settle, timeit

__all__ = [
    "DTYPE_NAMES",
    "GENERATORS",
    "LAB_TREE",
    "ROWS",
    "bench",
    "bench_dtype_one",
    "bench_int_one",
    "cases",
    "dtype_cases",
    "generated_cases",
    "int_cases",
    "random_cases",
    "rounding_bound",
]

LAB_TREE = "[[8,4],[7,3,8]->[7,3,4]],[[[2,6,7],[1,5,6]->[1,2,5,7]],[0,5]->[0,1,2,7]]->[0,1,2,3,4]"
#: the lab's sizes (its output has 354 M elements, 1.4 GB in fp32: the "lab-tree-full" row)
LAB_SIZES_FULL = (100, 72, 128, 128, 3, 71, 305, 32, 3)
#: the lab's sizes scaled to run in ~10 ms (the "lab-tree" row)
LAB_SIZES = (25, 18, 32, 32, 3, 18, 76, 32, 3)
#: outputs above this many elements are checked on a slice (``CHECK_SLICE`` values of the first
#: output index) against float64 numpy, not whole
CHECK_ELEMENTS = 1 << 24
CHECK_SLICE = 2
TOL = {"float32": 1e-4, "float64": 1e-10}
#: rounds of (minijit, peers) timings; each side's time is its best round's median (one round when
#: a call takes longer than ``LONG_CALL_S``)
ROUNDS = 3


def cases(quick: bool = False) -> list[dict[str, Any]]:
    """The real expressions: name, subscripts (or the lab tree) and shapes; ``quick``: smaller."""
    q = 2 if quick else 1
    b, h, s, d = 4, 8, 256 // q, 64
    rows = [
        ("attention", "bhqd,bhkd->bhqk", [(b, h, s, d), (b, h, s, d)], "attention scores Q K^T"),
        ("attention-av", "bhqk,bhkd->bhqd", [(b, h, s, s), (b, h, s, d)], "attention P V"),
        ("batched-matmul", "bij,bjk->bik", [(32 // q, 128, 128), (32 // q, 128, 128)], f"{32 // q} 128^3 GEMMs"),
        ("matmul", "ij,jk->ik", [(512, 512), (512, 512)], "one 512^3 GEMM"),
    ]
    n = 64 // q
    rows.append(("tucker", "abc,ai,bj,ck->ijk", [(n, n, n), (n, 32), (n, 32), (n, 32)], "Tucker core from a 3-tensor"))
    r = 16
    rows.append(
        (
            "tensor-train",
            "ia,ajb,bkc,cld,dm->ijklm",
            [(16, r), (r, 16, r), (r, 16, r), (r, 16, r), (r, 16 // q)],
            "5-core TT to the full tensor",
        )
    )
    n = 32 // q
    rows.append(
        (
            "ao-to-mo",
            "pqrs,pi,qj,rk,sl->ijkl",
            [(n, n, n, n), (n, n), (n, n), (n, n), (n, n)],
            "4-index (AO->MO) integral transform",
        )
    )
    rows.append(
        (
            "matrix-chain",
            "ij,jk,kl,lm->im",
            [(512, 64), (64, 512), (512, 32), (32, 512)],
            "chain whose order matters",
        )
    )
    out = [{"name": nm, "subscripts": e, "shapes": sh, "description": desc, "kind": "real"} for nm, e, sh, desc in rows]
    sizes = LAB_SIZES if not quick else tuple(max(1, x // 2) if x > 3 else x for x in LAB_SIZES)
    trees = [("lab-tree", sizes)] + ([] if quick else [("lab-tree-full", LAB_SIZES_FULL)])
    for name, sz in trees:
        desc = f"the lab's einsum tree, sizes {','.join(map(str, sz))}"
        out.append({"name": name, "tree": LAB_TREE, "sizes": sz, "description": desc, "kind": "real"})
    return out


def int_cases(quick: bool = False) -> list[dict[str, Any]]:
    """The integer rows: name, subscripts, shapes, description and ``matmul`` (the same product as
    ``np.matmul`` of the operands as given, or None), for int32 and int64; ``quick``: the matmul
    and matvec rows at a quarter of each size (numpy's integer products are slow)."""
    q = 4 if quick else 1
    n, b, m = 512 // q, 16 // q, 2048 // q
    rows = [
        ("matmul", "ij,jk->ik", [(n, n), (n, n)], f"one {n}^3 GEMM", lambda x, y: np.matmul(x, y)),
        ("batched-matmul", "bij,bjk->bik", [(b, 128, 128), (b, 128, 128)], f"{b} 128^3 GEMMs", np.matmul),
        ("attention", "bhqd,bhkd->bhqk", [(2, 4, 256 // q, 64), (2, 4, 256 // q, 64)], "scores Q K^T",
         lambda x, y: np.matmul(x, y.swapaxes(-1, -2))),
        ("matvec", "ij,j->i", [(m, m), (m,)], f"{m}x{m} matrix-vector", np.matmul),
        ("row-dots", "ij,ij->i", [(m, 512), (m, 512)], f"{m} dot products of 512", None),
    ]  # fmt: skip
    return [
        {"name": f"{nm}-{dt}", "subscripts": e, "shapes": sh, "description": desc, "kind": dt, "matmul": mm}
        for dt in ("int32", "int64")
        for nm, e, sh, desc, mm in rows
        if not quick or nm in ("matmul", "matvec")
    ]


def bench_int_one(
    case: dict[str, Any], threads: int, reps: int, blas: BlasThreads, rounds: int = ROUNDS
) -> dict[str, Any]:
    """One integer row: minijit's plan, ``np.einsum(optimize=True)`` and ``np.matmul`` (where the
    case has one) timed in ``rounds`` alternating rounds; the result checked bit for bit."""
    from minijit.einsum import EinsumPlan

    dtype = case["kind"]
    t0 = time.perf_counter()
    plan = EinsumPlan(case["subscripts"], *case["shapes"], dtype=dtype, num_threads=threads)
    setup_s = time.perf_counter() - t0
    subs = plan.subscripts
    rng = np.random.default_rng(0)
    ops = [rng.integers(-1000, 1001, s).astype(dtype) for s in plan.shapes]
    out = np.empty(plan.out_shape, dtype)
    plan(*ops, out=out)
    want = np.einsum(subs, *ops, optimize=True)
    same = bool(np.array_equal(out, want))
    check = {"ok": same, "max_abs_err": 0.0 if same else float(np.abs(out.astype(np.float64) - want).max())}
    peers: list[tuple[str, Callable[[], object]]] = [("numpy.einsum", lambda: np.einsum(subs, *ops, optimize=True))]
    if case["matmul"] is not None:
        mm = case["matmul"]
        assert np.array_equal(mm(*ops), want), case["name"]
        peers.append(("numpy-matmul", lambda: mm(*ops)))
    best = {"minijit": math.inf, **{name: math.inf for name, _ in peers}}
    for _ in range(rounds):  # alternate minijit and the peers; a noisy host hits both alike
        settle()
        best["minijit"] = min(best["minijit"], timeit(lambda: plan(*ops, out=out), reps))
        with blas.limit(threads):
            for name, fn in peers:
                time.sleep(SETTLE_S)
                best[name] = min(best[name], timeit(fn, reps))
    t_mj, flops = best["minijit"], plan.flops
    return {
        "config": case["name"],
        "kind": dtype,
        "description": case["description"],
        "subscripts": subs,
        "shapes": [list(s) for s in plan.shapes],
        "dtype": {"int32": "s32", "int64": "s64"}[dtype],
        "threads": threads,
        "target": plan.target,
        "flops": flops,
        "setup_s": round(setup_s, 4),
        "time_s": t_mj,
        "unit": "GOPS",
        "rate": flops / t_mj / 1e9,
        "check": check,
        "rounds": rounds,
        "plan": plan.listing(configs=False),
        "peers": [
            {
                "name": name,
                "threads": 1,
                "time_s": best[name],
                "rate": flops / best[name] / 1e9,
                "ratio": best[name] / t_mj,
            }
            for name, _ in peers
        ],  # fmt: skip
    }


#: the complex and float16 rows' dtypes and their names in the tables
DTYPE_NAMES = {"complex64": "c64", "complex128": "c128", "float16": "fp16"}
#: which rows `bench` runs: the float suite and the typed rows, the float suite, the typed rows
ROWS = ("all", "float", "typed")


def dtype_cases(quick: bool = False) -> list[dict[str, Any]]:
    """The complex64, complex128 and float16 rows: name, subscripts, shapes, description and
    ``matmul`` (``np.matmul`` of the operands as given, the same product; None for float16, whose
    matmul has no BLAS); ``quick``: the matmul and matvec rows at a quarter of each size."""
    q = 4 if quick else 1
    n, b, m = 384 // q, 16 // q, 2048 // q
    rows = [
        ("matmul", "ij,jk->ik", [(n, n), (n, n)], f"one {n}^3 GEMM"),
        ("batched-matmul", "bij,bjk->bik", [(b, 96, 96), (b, 96, 96)], f"{b} 96^3 GEMMs"),
        ("matvec", "ij,j->i", [(m, m), (m,)], f"{m}x{m} matrix-vector"),
    ]
    return [
        {"name": f"{nm}-{dt}", "subscripts": e, "shapes": sh, "description": desc, "kind": dt,
         "matmul": np.matmul if dt.startswith("complex") else None}
        for dt in DTYPE_NAMES
        for nm, e, sh, desc in rows
        if not quick or nm in ("matmul", "matvec")
    ]  # fmt: skip


def _typed_values(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Operand values: uniform in [-1, 1) (both parts for complex)."""
    if dt.kind == "c":
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dt)
    return rng.uniform(-1, 1, shape).astype(dt)


def rounding_bound(subs: str, ops: list[np.ndarray], dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(exact, bound)``: the contraction of ``ops`` (``subs`` with an explicit output, no size-1
    broadcasting) in float64/complex128 and, per element, the
    error a result of the float or complex dtype ``dt`` may carry against it (first order,
    recursive summation): (n + 2 k + 2) u |x|, four times that for complex (the modulus of the
    error of 4M's 2n-term real sums and of 3M's weaker imaginary part, 3 (n + 4) u |x|), plus n times the smallest
    subnormal; n: product terms per element, k: operands, u: unit roundoff of ``dt``, |x|: the
    contraction of the operands' absolute values."""
    hi = np.complex128 if dt.kind == "c" else np.float64
    exact = np.einsum(subs, *[o.astype(hi) for o in ops], optimize=True)
    scale = np.einsum(subs, *[np.abs(o.astype(hi)) for o in ops], optimize=True)
    lhs, out = subs.split("->")
    sizes = {c: n for sub, o in zip(lhs.split(","), ops, strict=True) for c, n in zip(sub, o.shape, strict=True)}
    terms = math.prod(n for c, n in sizes.items() if c not in out)
    n = max(1, terms)
    info = np.finfo(dt)
    u = float(info.eps) / 2
    bound = (4 if dt.kind == "c" else 1) * (n + 2 * len(ops) + 2) * u * scale + n * float(info.smallest_subnormal)
    return exact, bound


@contextlib.contextmanager
def _minijit_env(threads: int) -> Iterator[None]:
    """``minijit.einsum`` calls inside build plans for ``threads`` threads and specialise them on
    their first call (``MINIJIT_NUM_THREADS``, ``MINIJIT_JIT=eager``); the environment restored."""
    keys = {"MINIJIT_NUM_THREADS": str(threads), "MINIJIT_JIT": "eager"}
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bench_dtype_one(
    case: dict[str, Any], threads: int, reps: int, blas: BlasThreads, rounds: int = ROUNDS
) -> dict[str, Any]:
    """One complex or float16 row: ``minijit.einsum``, ``np.einsum(optimize=True)`` and
    ``np.matmul`` (where the case has one) timed in ``rounds`` alternating rounds; GFLOPS in real
    flops (a complex multiply-add is 8); minijit's result and the matmul peer's checked against
    the exact contraction within `rounding_bound`."""
    import minijit  # noqa: PLC0415 - the bench loads minijit on use
    from minijit import jit  # noqa: PLC0415
    from minijit.einsum import parse_subscripts  # noqa: PLC0415

    dt = np.dtype(case["kind"])
    subs, shapes = case["subscripts"], [tuple(s) for s in case["shapes"]]
    expr = parse_subscripts(subs, *shapes)
    flops = (8 if dt.kind == "c" else 2) * math.prod(expr.sizes.values())
    rng = np.random.default_rng(0)
    ops = [_typed_values(rng, s, dt) for s in shapes]
    exact, bound = rounding_bound(subs, ops, dt)

    def run() -> np.ndarray:
        return minijit.einsum(subs, *ops)

    with _minijit_env(threads):
        t0 = time.perf_counter()
        got = np.asarray(run())
        jit.drain()
        setup_s = time.perf_counter() - t0
        path = minijit.einsum(subs, *ops, explain=True).splitlines()[0]
    err = np.abs(got.astype(exact.dtype) - exact)
    check = {
        "ok": bool(got.dtype == dt and got.shape == exact.shape and not (err > bound).any()),
        "max_abs_err": float(err.max(initial=0.0)),
        "bound": float(bound.max(initial=0.0)),
    }
    peers: list[tuple[str, Callable[[], object], int | str]] = [
        ("numpy.einsum", lambda: np.einsum(subs, *ops, optimize=True), threads if dt.kind == "c" else 1)
    ]
    if case["matmul"] is not None:
        mm = case["matmul"]
        if (np.abs(np.asarray(mm(*ops)).astype(exact.dtype) - exact) > bound).any():
            raise RuntimeError(f"{case['name']}: np.matmul of the operands is not the expression's product")
        peers.append(("numpy-matmul", lambda: mm(*ops), threads))
    best = {"minijit": math.inf, **{name: math.inf for name, _, _ in peers}}
    for _ in range(rounds):  # alternate minijit and the peers; a noisy host hits both alike
        settle()
        with _minijit_env(threads):
            best["minijit"] = min(best["minijit"], timeit(run, reps))
        with blas.limit(threads):
            for name, fn, _ in peers:
                time.sleep(SETTLE_S)
                best[name] = min(best[name], timeit(fn, reps))
    t_mj = best["minijit"]
    return {
        "config": case["name"],
        "kind": dt.name,
        "description": case["description"],
        "subscripts": subs,
        "shapes": [list(s) for s in shapes],
        "dtype": DTYPE_NAMES[dt.name],
        "threads": threads,
        "path": path,
        "flops": flops,
        "setup_s": round(setup_s, 4),
        "time_s": t_mj,
        "unit": "GFLOPS",
        "rate": flops / t_mj / 1e9,
        "check": check,
        "rounds": rounds,
        "peers": [
            {
                "name": name,
                "threads": pt,
                "time_s": best[name],
                "rate": flops / best[name] / 1e9,
                "ratio": best[name] / t_mj,
            }
            for name, _, pt in peers
        ],  # fmt: skip
    }


def _acceptable(subs: str, shapes: list[tuple[int, ...]], max_elements: int, flop_range: tuple[float, float]) -> bool:
    """Every operand and numpy's largest intermediate bounded, numpy's optimized flops in range."""
    if any(math.prod(s) > max_elements for s in shapes):
        return False
    try:
        _, info = np.einsum_path(subs, *[np.empty(s) for s in shapes], optimize=True)
    except ValueError:
        return False
    flops = float(info.split("Optimized FLOP count:")[1].split()[0])
    largest = float(info.split("Largest intermediate:")[1].split()[0])
    return flop_range[0] <= flops <= flop_range[1] and largest <= 2 * max_elements


def random_cases(count: int = 4, seed: int = 2026, max_elements: int = 1 << 21) -> list[dict[str, Any]]:
    """``count`` random 3-5 operand expressions (fixed seed): 5-8 indices of sizes 4-48, each operand
    2-4 of them, explicit output of 1-3 indices; every operand and the naive index space bounded."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        n_idx = int(rng.integers(5, 9))
        letters = "abcdefghijkl"[:n_idx]
        sizes = {c: int(rng.integers(4, 49)) for c in letters}
        n_ops = int(rng.integers(3, 6))
        inputs = ["".join(rng.permutation(list(letters))[: int(rng.integers(2, 5))]) for _ in range(n_ops)]
        used = sorted(set("".join(inputs)))
        output = "".join(rng.permutation(used)[: int(rng.integers(1, 4))])
        shapes = [tuple(sizes[c] for c in sub) for sub in inputs]
        subs = ",".join(inputs) + "->" + output
        if math.prod(sizes[c] for c in output) > max_elements or len(used) < n_idx:
            continue
        if not _acceptable(subs, shapes, max_elements, (1e7, 2e8)):  # big enough to time, small enough for numpy
            continue
        out.append(
            {"name": f"random-{len(out)}", "subscripts": subs, "shapes": shapes, "description": subs, "kind": "random"}
        )
    return out


def _eb_generators() -> dict[str, Callable[[int], tuple]] | None:
    try:
        import einsum_benchmark.generators as g  # type: ignore[import-not-found]
    except Exception:
        return None
    return {
        "eb-matrix-chain": lambda s: g.structured.matrix_chain(
            num_matrices=6, min_dim=32, max_dim=384, is_shuffle=True, seed=s
        ),
        "eb-tree": lambda s: g.structured.tree(8, d_min=4, d_max=32, n_outer=3, seed=s),
        "eb-lattice": lambda s: g.structured.lattice((3, 3), d_min=6, d_max=16, seed=s),
        "eb-network": lambda s: g.random.connected_network(
            6, 3, number_of_output_indices=2, min_axis_size=4, max_axis_size=16, seed=s
        ),
        "eb-hypernetwork": lambda s: g.random.connected_hypernetwork(
            6, 3, max_edge_order=3, diagonals_in_hyper_edges=False, number_of_output_indices=2,
            min_axis_size=4, max_axis_size=12, seed=s,
        ),
    }  # fmt: skip


def _oe_generators() -> dict[str, Callable[[int], tuple]] | None:
    try:
        import opt_einsum.testing as oet  # type: ignore[import-not-found]
    except Exception:
        return None
    return {"oe-rand-equation": lambda s: oet.rand_equation(6, 3, n_out=2, d_min=4, d_max=16, seed=s)}


#: the external generators of random rows: package -> (what to install, its generators or None)
GENERATORS: dict[str, Callable[[], dict[str, Callable[[int], tuple]] | None]] = {
    "einsum_benchmark": _eb_generators,
    "opt_einsum": _oe_generators,
}
#: seeds tried per generator (in order) for an expression in the flop and size bounds
MAX_SEEDS = 300


def generated_cases(
    per_generator: int = 2, max_elements: int = 1 << 21, flop_range: tuple[float, float] = (1e7, 3e8)
) -> tuple[list[dict[str, Any]], list[str]]:
    """Random rows from the ``einsum_benchmark`` generators and ``opt_einsum.testing.rand_equation``:
    for each generator, the first ``per_generator`` seeds (0, 1, ...) whose expression passes
    `_acceptable`. Returns the rows and a note per package that did not import."""
    out: list[dict[str, Any]] = []
    missing = []
    for package, load in GENERATORS.items():
        gens = load()
        if gens is None:
            missing.append(f"{package} is not installed: its random rows are missing (pip install {package})")
            continue
        for name, gen in gens.items():
            found = 0
            for seed in range(MAX_SEEDS):
                subs, shapes = gen(seed)[:2]
                shapes = [tuple(int(x) for x in s) for s in shapes]
                if not _acceptable(subs, shapes, max_elements, flop_range):
                    continue
                desc = f"{package} {name.split('-', 1)[1]}, seed {seed}"
                out.append(
                    {"name": f"{name}-{seed}", "subscripts": subs, "shapes": shapes, "description": desc,
                     "kind": "random"}
                )  # fmt: skip
                found += 1
                if found == per_generator:
                    break
    return out, missing


def _peers() -> list[tuple[str, Callable]]:
    peers = []
    torch = report.torch_module()
    if torch is not None:

        def torch_fn(subs, ops):
            ts = [torch.from_numpy(o) for o in ops]
            return lambda: torch.einsum(subs, *ts)

        peers.append(("torch.einsum", torch_fn))
    try:
        import opt_einsum  # type: ignore[import-not-found]

        peers.append(("opt_einsum.contract", lambda subs, ops: lambda: opt_einsum.contract(subs, *ops)))
    except Exception:
        pass
    return peers


def _reference(subs: str, ops: list[np.ndarray], out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(minijit's result, numpy's in float64)``, whole, or for outputs above ``CHECK_ELEMENTS``
    elements on the first ``CHECK_SLICE`` values of the output's first index (every operand that
    carries that index sliced alike)."""
    lhs, rhs = subs.split("->")
    if out.size <= CHECK_ELEMENTS or not rhs:
        return out.astype(np.float64), np.einsum(subs, *[o.astype(np.float64) for o in ops], optimize=True)
    first = rhs[0]
    sliced = []
    for sub, o in zip(lhs.split(","), ops, strict=True):
        idx = tuple(slice(0, CHECK_SLICE) if c == first else slice(None) for c in sub)
        sliced.append(o[idx].astype(np.float64))
    return out[:CHECK_SLICE].astype(np.float64), np.einsum(subs, *sliced, optimize=True)


def bench_one(case: dict[str, Any], dtype: str, threads: int, reps: int, blas: BlasThreads) -> dict[str, Any]:
    from minijit.einsum import EinsumPlan

    t0 = time.perf_counter()
    if "tree" in case:
        plan = EinsumPlan.from_tree(case["tree"], case["sizes"], dtype=dtype, num_threads=threads)
    else:
        plan = EinsumPlan(case["subscripts"], *case["shapes"], dtype=dtype, num_threads=threads)
    setup_s = time.perf_counter() - t0
    subs = plan.subscripts
    rng = np.random.default_rng(0)
    ops = [rng.uniform(-1, 1, s).astype(dtype) for s in plan.shapes]
    out = np.empty(plan.out_shape, dtype)
    t_call = time.perf_counter()
    plan(*ops, out=out)
    rounds = ROUNDS if time.perf_counter() - t_call < LONG_CALL_S else 1
    got, ref = _reference(subs, ops, out)
    check = report.check_result(got, ref, TOL[dtype] * max(1, int(math.sqrt(plan.flops) / 1000)))
    flops = plan.flops
    peers: list[tuple[str, Callable[[], object], int | str]] = [
        (
            "numpy.einsum",
            lambda: np.einsum(subs, *ops, optimize=True),
            threads if blas.how != "unavailable" else "default",
        )
    ]
    peers += [(name, make(subs, ops), threads) for name, make in _peers()]
    torch = report.torch_module()
    best = {"minijit": math.inf, **{name: math.inf for name, _, _ in peers}}
    for _ in range(rounds):  # alternate minijit and the peers; a noisy host hits both alike
        settle()
        best["minijit"] = min(best["minijit"], timeit(lambda: plan(*ops, out=out), reps))
        with blas.limit(threads):
            for name, fn, _ in peers:
                time.sleep(SETTLE_S)
                if name.startswith("torch") and torch is not None:
                    old = torch.get_num_threads()
                    torch.set_num_threads(threads)
                    try:
                        best[name] = min(best[name], timeit(fn, reps))
                    finally:
                        torch.set_num_threads(old)
                else:
                    best[name] = min(best[name], timeit(fn, reps))
    t_mj = best["minijit"]
    row: dict[str, Any] = {
        "config": case["name"],
        "kind": case["kind"],
        "description": case["description"],
        "subscripts": subs,
        "shapes": [list(s) for s in plan.shapes],
        "path": [list(p) for p in plan.path],
        "nodes": len(plan.steps),
        "dtype": "fp32" if dtype == "float32" else "fp64",
        "threads": threads,
        "target": plan.target,
        "flops": flops,
        "setup_s": round(setup_s, 4),
        "time_s": t_mj,
        "unit": "GFLOPS",
        "rate": flops / t_mj / 1e9,
        "gflops": flops / t_mj / 1e9,
        "check": check,
        "rounds": rounds,
        "plan": plan.listing(configs=False),
        "peers": [],
    }
    for name, _, peer_threads in peers:
        t = best[name]
        row["peers"].append(
            {
                "name": name,
                "threads": peer_threads,
                "time_s": t,
                "rate": flops / t / 1e9,
                "gflops": flops / t / 1e9,
                "ratio": t / t_mj,
            }  # fmt: skip
        )
    return row


#: a 1-minute load average above this (a core's worth of other work on 2 cores) marks a busy host
BUSY_LOAD = 0.8


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def plan_overhead(dtype: str, threads: int) -> dict[str, float]:
    """Microseconds per call of a tiny 2-operand plan, of its single node's ``execute_ptr`` (the
    kernel call itself) and of ``minijit.einsum`` (plan cache lookup included); medians of 2000."""
    import minijit

    rng = np.random.default_rng(0)
    a, b = (rng.random((8, 8)).astype(dtype) for _ in range(2))
    c = np.empty((8, 8), dtype)
    plan = minijit.EinsumPlan("ij,jk->ik", a.shape, b.shape, dtype=dtype, num_threads=threads)
    (op,) = [s.op for s in plan.steps]
    # a and b have one shape and dtype: which one the node reads first does not change its time
    a0, a1, ao = a.ctypes.data, b.ctypes.data, c.ctypes.data
    return {
        "plan_us": timeit(lambda: plan(a, b, out=c), 2000) * 1e6,
        "node_us": timeit(lambda: op.execute_ptr(a0, a1, ao), 2000) * 1e6,
        "einsum_us": timeit(lambda: minijit.einsum("ij,jk->ik", a, b), 2000) * 1e6,
    }


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _progress_row(progress: report.Progress, r: dict[str, Any]) -> None:
    peers = ", ".join(f"{p['name']} {report.fmt(p['rate'])} ({p['ratio']:.2f}x)" for p in r["peers"])
    bad = "" if r["check"]["ok"] else f"  WRONG RESULT (max err {r['check']['max_abs_err']:.3g})"
    progress(f"    minijit {report.fmt(r['rate'])} {r['unit']}; {peers}{bad}")


def _typed_geomeans(rows: list[dict[str, Any]], dtypes: tuple[str, ...]) -> tuple[dict[str, float | None], list[str]]:
    """Per dtype and peer: the geomean of minijit/peer over the rows, and over the GEMM-like
    (matmul, batched) rows; the summary entries (``{dtype}_{peer}``) and the lines."""
    summary: dict[str, float | None] = {}
    lines = []
    for peer in ("numpy.einsum", "numpy-matmul"):
        for dt in dtypes:
            got = [p["ratio"] for r in rows if r["kind"] == dt for p in r["peers"] if p["name"] == peer]
            gemms = [r for r in rows if r["kind"] == dt and r["config"].startswith(("matmul", "batched"))]
            gemm = [p["ratio"] for r in gemms for p in r["peers"] if p["name"] == peer]
            if got:
                summary[f"{dt}_{peer}"] = geomean(got)
                lines.append(
                    f"geomean minijit/{peer} {dt}: {geomean(got):.2f}x over {len(got)} rows"
                    f" (GEMM rows {report.fmt(geomean(gemm), 2)}x)"
                )
    return summary, lines


def bench(
    reps: int,
    threads: int,
    quick: bool,
    command: str,
    dtype: str = "fp32",
    progress: report.Progress = report.quiet,
    rows: str = "all",
) -> report.Report:
    """Every case at ``threads`` threads; Markdown tables and the geomean ratios vs numpy.
    ``rows``: "all" (the float suite in ``dtype``, then the integer, complex and float16 rows),
    "float" (the float suite) or "typed" (the integer, complex and float16 rows)."""
    if rows not in ROWS:
        raise ValueError(f"bench einsum: rows must be one of {', '.join(ROWS)}, got {rows!r}")
    np_dtype = {"fp32": "float32", "fp64": "float64"}[dtype]
    blas = BlasThreads()
    started = time.perf_counter()
    load_start = _load()
    if rows != "typed":
        generated, missing = generated_cases(1 if quick else 2)
        all_cases = cases(quick) + random_cases(2 if quick else 4) + generated
    else:
        all_cases, missing = [], []
    float_rows: list[dict[str, Any]] = []
    for i, case in enumerate(all_cases):
        progress(f"[{i + 1}/{len(all_cases)}] {case['name']} ...")
        float_rows.append(bench_one(case, np_dtype, threads, reps, blas))
        _progress_row(progress, float_rows[-1])
    hw = report.hardware()
    summary = {}
    for kind in ("real", "random"):
        ratios = [
            p["ratio"] for r in float_rows if r["kind"] == kind for p in r["peers"] if p["name"] == "numpy.einsum"
        ]
        summary[kind] = geomean(ratios)
    int_rows, dtype_rows = [], []
    typed_rounds = 1 if quick else ROUNDS
    for case in int_cases(quick) if rows != "float" else []:
        progress(f"[int] {case['name']} ...")
        int_rows.append(bench_int_one(case, threads, reps, blas, typed_rounds))
        _progress_row(progress, int_rows[-1])
    for case in dtype_cases(quick) if rows != "float" else []:
        progress(f"[{case['kind']}] {case['name']} ...")
        dtype_rows.append(bench_dtype_one(case, threads, reps, blas, typed_rounds))
        _progress_row(progress, dtype_rows[-1])
    lines: list[str] = []
    over: dict[str, float] = {}
    if float_rows:
        over = plan_overhead(np_dtype, threads)
        lines += [report.cpu_table(float_rows), ""]
        for peer in dict.fromkeys(p["name"] for r in float_rows for p in r["peers"]):  # geomean and lowest row
            parts = []
            for kind in ("real", "random"):
                of_kind = [r for r in float_rows if r["kind"] == kind]
                got = [(p["ratio"], r["config"]) for r in of_kind for p in r["peers"] if p["name"] == peer]
                if got:
                    low = min(got)
                    parts.append(f"{kind} {geomean([x for x, _ in got]):.2f}x (lowest {low[1]} {low[0]:.2f}x)")
            lines.append(f"geomean minijit/{peer}: " + ", ".join(parts))
    int_summary: dict[str, float | None] = {}
    if int_rows:
        lines += ["", "integer rows (GOPS: a multiply-add counts two; bit for bit np.einsum's; numpy's"
                  " integer einsum and matmul have no BLAS; np.matmul single-threaded):", "",
                  report.cpu_table(int_rows), ""]  # fmt: skip
        int_summary, more = _typed_geomeans(int_rows, ("int32", "int64"))
        lines += more
    dtype_summary: dict[str, float | None] = {}
    if dtype_rows:
        lines += ["", "complex and float16 rows (GFLOPS in real flops: a complex multiply-add counts 8, a float16"
                  " one 2; minijit.einsum on the path it takes, below; within the rounding bound of the exact"
                  " product; np.matmul is OpenBLAS cgemm/zgemm, np.einsum(optimize=True) BLAS-backed for"
                  " complex GEMMs; float16 has no BLAS):", "",
                  report.cpu_table(dtype_rows), ""]  # fmt: skip
        dtype_summary, more = _typed_geomeans(dtype_rows, tuple(DTYPE_NAMES))
        lines += more
        lines += ["", "paths (minijit.einsum(..., explain=True)):"]
        lines += [f"- {r['config']}: {r['path']}" for r in dtype_rows]
    if over:
        lines += [
            f"plan reuse overhead (ij,jk->ik, 8x8x8): plan(A, B, out=C) {over['plan_us']:.1f} us, its one node's"
            f" execute_ptr {over['node_us']:.1f} us, overhead {over['plan_us'] - over['node_us']:.1f} us;"
            f" minijit.einsum() {over['einsum_us']:.1f} us",
        ]
    typed = int_rows + dtype_rows
    lines += [
        *missing,
        "",
        "expressions:",
        *(
            f"- {r['config']}: `{r['subscripts']}` shapes {r['shapes']} ({r['description']})"
            for r in float_rows + typed
        ),
    ]
    what = dtype if float_rows else "int32/int64/complex64/complex128/float16"
    header = [f"# minijit bench einsum: {hw['cpu'] or hw['isa']}, {hw['cores']} cores, {what}, threads {threads}"]
    load_end = _load()
    busy = max(load_start or 0.0, load_end or 0.0) > BUSY_LOAD
    if busy:
        header.append(
            f"# warning: the host was busy (1-min load average {load_start} at start, {load_end} at end):"
            " other processes distort these ratios (numpy's BLAS threads suffer most)"
        )
    ok = all(r["check"]["ok"] for r in float_rows + typed)
    result = {
        **report.meta(command),
        "hardware": hw,
        "versions": report.versions(),
        "settings": {
            "reps": reps,
            "threads": threads,
            "dtype": dtype,
            "quick": quick,
            "rows": rows,
            "blas_threads_control": blas.how,
        },
        "summary": {
            "geomean_ratio_real": summary["real"],
            "geomean_ratio_random": summary["random"],
            **over,
            "int": int_summary,
            "dtypes": dtype_summary,
        },
        "load_average": [load_start, load_end],
        "wall_s": round(time.perf_counter() - started, 1),
        "results": float_rows,
        "int_results": int_rows,
        "dtype_results": dtype_rows,
    }
    date = result["date"][:10]
    facts = [
        f"date: {result['date']}",
        f"command: `{command}`",
        f"CPU: {hw['cpu']}, {hw['cores']} cores, ISA {hw['isa']} ({', '.join(hw['flags'])}),"
        f" target {hw['native_target']}",
        f"versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}",
        f"wall time: {result['wall_s']} s",
        f"1-min load average at start / end: {load_start} / {load_end}" + (" (busy host)" if busy else ""),
    ]
    return report.Report(header, lines, result, ok, f"einsum_{date}.md", "minijit bench einsum", facts)
