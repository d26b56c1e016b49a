"""Sparse einsum benchmark rows for ``minijit bench sparse-einsum`` (issue 38, seed 002's kernels).

Rows: SpMM, SDDMM, the SDDMM-SpMM fusion of GNN attention, TTM, TTMc, MTTKRP and a chain of
tensor-times-matrix products, float64. Matrices are SuiteSparse-like power-law CSR
(`minijit.bench.spmm`'s generator). Tensors are FROSTT-like (`powerlaw_tensor`), stored as CSF:
power-law slices (fibre positions with Zipf-1.1 marginals per mode) and power-law fibre
lengths: the fibres of the last mode have Zipf-distributed lengths on ``1..K`` with mean
`FIBRE_MEAN` = 16 (the exponent is solved for that mean: about 1.5 for K = 400), so most
fibres hold one to three values and a few hold hundreds. Real count tensors stored with their
longest mode last (as a TTMc or TTM chain over that mode wants it) have such long, skewed
fibres; drawing every coordinate independently instead gives fibres of about one value, where
no schedule can save work per fibre. The mean is a chosen parameter, not a statistic measured
on FROSTT's files (they are not available here).

Per row, in the same process: `sparse_einsum` with the planner's schedule (``auto``) and with
TACO's default linear schedule (same code generator), `tensora` (TACO, when it imports),
pydata ``sparse.einsum`` (one call: it is slow), and scipy for the matrix product. Times are
medians of ``reps`` calls after a warm-up (``minijit.bench.cpu.timeit``); "plan+compile" is the
first call's planning and code generation. Every result is checked against a dense float64
``np.einsum`` on a slice of the output's first index (the heaviest rows).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from minijit.bench import report
from minijit.bench.cpu import timeit
from minijit.bench.einsum import geomean

__all__ = ["CASES", "bench", "cases", "powerlaw_tensor"]

#: dense elements the reference slice may have
_SLICE_ELEMENTS = 4_000_000
TOL = 1e-9
#: memory pydata sparse.einsum may take on top of the process (it densifies some products)
PYDATA_MEMORY = 4 << 30
#: alternating timing rounds per row
ROUNDS = 5
#: the rows where fission changes the complexity (the issue's >= 10x target)
FISSION_ROWS = ("TTMc", "SDDMM-SpMM", "TTM chain")
CASES = ("SpMM", "SDDMM", "SDDMM-SpMM", "TTM", "TTMc", "MTTKRP", "TTM chain")
_TACO = {  # tensora assignments and operand formats (output first)
    "SpMM": ("A(i,j) = S(i,k) * B(k,j)", ("dd", "ds", "dd")),
    "SDDMM": ("A(i,j) = S(i,j) * B(i,k) * C(j,k)", ("ds", "ds", "dd", "dd")),
    "SDDMM-SpMM": ("A(i,l) = S(i,j) * B(i,k) * C(j,k) * D(j,l)", ("dd", "ds", "dd", "dd", "dd")),
    "TTM": ("A(i,j,l) = S(i,j,k) * B(k,l)", ("ddd", "sss", "dd")),
    "TTMc": ("A(i,l,m) = S(i,j,k) * B(j,l) * C(k,m)", ("ddd", "sss", "dd", "dd")),
    "MTTKRP": ("A(i,l) = S(i,j,k) * B(j,l) * C(k,l)", ("dd", "sss", "dd", "dd")),
    "TTM chain": ("A(i,j,m) = S(i,j,k) * B(k,l) * C(l,m)", ("ddd", "sss", "dd", "dd")),
}


#: mean non-zeros per fibre of the last mode of the synthetic tensors (see `powerlaw_tensor`)
FIBRE_MEAN = 16.0
#: Zipf exponent of the slice and fibre *positions* (which i, which (i, j)) of the synthetic tensors
POSITION_ALPHA = 1.1


def zipf_exponent(mean: float, n: int) -> float:
    """The exponent ``s`` of the Zipf law ``P(len) ~ len**-s`` on ``1..n`` whose mean is ``mean``
    (bisection; the mean falls as ``s`` grows). ValueError unless ``1 <= mean < (n + 1) / 2``."""
    if not 1.0 <= mean < (n + 1) / 2:
        raise ValueError(f"mean fibre length must be in [1, {(n + 1) / 2}) for fibres of at most {n}, got {mean}")
    k = np.arange(1, n + 1, dtype=np.float64)

    def mean_of(s: float) -> float:
        w = k**-s
        return float((k * w).sum() / w.sum())

    lo, hi = 0.0, 30.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_of(mid) > mean else (lo, mid)
    return (lo + hi) / 2


def fibre_lengths(count: int, n: int, mean: float, rng: np.random.Generator) -> np.ndarray:
    """``count`` fibre lengths drawn from the Zipf law on ``1..n`` with mean ``mean``."""
    s = zipf_exponent(mean, n)
    k = np.arange(1, n + 1)
    p = k**-s
    return rng.choice(k, count, p=p / p.sum())


def powerlaw_tensor(
    shape: tuple[int, ...],
    nnz: int,
    rng: np.random.Generator,
    fibre_mean: float = FIBRE_MEAN,
    alpha: float = POSITION_ALPHA,
):
    """A CSF `SparseTensor` (all levels compressed, modes in order) with about ``nnz`` values,
    shaped like FROSTT's count tensors: power-law slices *and* power-law fibre lengths.

    The tensor has ``nnz / fibre_mean`` fibres of the last mode. Their lengths follow a Zipf law
    ``P(len) ~ len**-s`` on ``1..shape[-1]``, ``s`` solved so the mean is ``fibre_mean`` (most
    fibres hold one or two values, a few hold hundreds). Their positions (distinct prefixes of
    the other modes) and the coordinates inside each fibre (distinct) are drawn with
    Zipf(``alpha``) marginals per mode, ranks shuffled. Values are standard normal.
    """
    from minijit.sparseauto.tensor import SparseTensor

    *outer, last = shape
    nfib = max(1, round(nnz / fibre_mean))
    cells = int(np.prod(outer))
    if nfib > cells // 2:
        raise ValueError(f"{nfib} fibres need more than {cells} prefixes of shape {tuple(outer)}")
    lengths = fibre_lengths(nfib, last, fibre_mean, rng)

    def marginal(n: int) -> np.ndarray:
        p = 1.0 / np.arange(1, n + 1) ** alpha
        return rng.permutation(p / p.sum())

    # fibre positions: distinct prefixes drawn with power-law marginals per mode
    probs = [marginal(n) for n in outer]
    found = np.empty(0, np.int64)
    while found.size < nfib:
        draw = np.ravel_multi_index([rng.choice(n, 2 * nfib, p=p) for n, p in zip(outer, probs, strict=True)], outer)
        _, first = np.unique(np.concatenate([found, draw]), return_index=True)
        found = np.concatenate([found, draw])[np.sort(first)]
    prefix = np.array(np.unravel_index(found[:nfib], outer))
    # coordinates inside each fibre: distinct, power-law over the last mode (Gumbel top-k)
    logp = np.log(marginal(last))
    crd = []
    for lo in range(0, nfib, max(1, (1 << 22) // last)):
        ln = lengths[lo : lo + max(1, (1 << 22) // last)]
        keys = logp - np.log(-np.log(rng.random((ln.size, last))))
        order = np.argsort(-keys, axis=1)
        crd.append(order[np.arange(last) < ln[:, None]])
    last_crd = np.concatenate(crd)
    coords = np.vstack([np.repeat(prefix, lengths, axis=1), last_crd[None, :]])
    return SparseTensor.from_coo(coords, rng.standard_normal(coords.shape[1]), shape)


def _matrix(m: int, k: int, rng: np.random.Generator):
    """A power-law CSR matrix (Pareto 1.3 row lengths) as a `SparseTensor`."""
    from minijit.bench.spmm import _csr
    from minijit.sparseauto.tensor import SparseTensor

    lengths = np.minimum(np.floor(rng.pareto(1.3, m) * 4 + 1), k // 4)
    s = _csr(m, k, lengths, rng).astype(np.float64)
    return SparseTensor.from_scipy(s)


def cases(quick: bool, rng: np.random.Generator) -> list[dict[str, Any]]:
    """The rows: name, subscripts, operands (sparse first) and a description."""
    q = 4 if quick else 1
    out = []
    m = 20000 // q
    a = _matrix(m, m, rng)
    mat = f"{m}x{m} power-law CSR, nnz {a.nnz}"
    f = 32
    d = [rng.standard_normal((m, f)) for _ in range(3)]
    out.append(("SpMM", "ik,kj->ij", [a, d[0]], f"{mat}, N {f}"))
    out.append(("SDDMM", "ij,ik,jk->ij", [a, d[0], d[1]], f"{mat}, K {f}"))
    out.append(("SDDMM-SpMM", "ij,ik,jk,jl->il", [a, d[0], d[1], d[2]], f"{mat}, K = L = {f}"))
    s3 = (600 // q, 500 // q, 400 // q)
    t = powerlaw_tensor(s3, 200000 // q, rng)
    ten = f"{s3[0]}x{s3[1]}x{s3[2]} CSF, fibres Zipf mean {FIBRE_MEAN:g}, nnz {t.nnz}"
    out.append(("TTM", "ijk,kl->ijl", [t, rng.standard_normal((s3[2], 16))], f"{ten}, L 16"))
    b, c = rng.standard_normal((s3[1], 16)), rng.standard_normal((s3[2], 16))
    out.append(("TTMc", "ijk,jl,km->ilm", [t, b, c], f"{ten}, L = M = 16"))
    s3m = (2000 // q, 1500 // q, 1000 // q)
    tm = powerlaw_tensor(s3m, 200000 // q, rng)
    b, c = rng.standard_normal((s3m[1], 32)), rng.standard_normal((s3m[2], 32))
    desc = f"{s3m[0]}x{s3m[1]}x{s3m[2]} CSF, fibres Zipf mean {FIBRE_MEAN:g}, nnz {tm.nnz}, L 32"
    out.append(("MTTKRP", "ijk,jl,kl->il", [tm, b, c], desc))
    b, c = rng.standard_normal((s3[2], 16)), rng.standard_normal((16, 16))
    out.append(("TTM chain", "ijk,kl,lm->ijm", [t, b, c], f"{ten}, L = M = 16"))
    return [{"name": n, "subscripts": s, "operands": o, "description": d} for n, s, o, d in out]


def _dense_slice(x: Any, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of the first mode of ``x`` (SparseTensor or numpy), dense float64."""
    from minijit.sparseauto.tensor import SparseTensor

    if not isinstance(x, SparseTensor):
        return np.asarray(x, np.float64)[rows]
    coords, vals = x.to_coo()
    where = {int(r): n for n, r in enumerate(rows)}
    keep = np.isin(coords[0], rows)
    out = np.zeros((len(rows), *x.shape[1:]))
    first = np.array([where[int(r)] for r in coords[0, keep]], np.int64)
    np.add.at(out, (first, *coords[1:, keep]), vals[keep])
    return out


def _check(case: dict[str, Any], got: Any) -> dict[str, Any]:
    """Compare ``got`` with a dense float64 einsum on the heaviest rows of the first index."""
    subs, ops = case["subscripts"], case["operands"]
    lhs, out = subs.split("->")
    terms = lhs.split(",")
    first = out[0]
    sparse = ops[0]
    others = int(np.prod([s for s in sparse.shape[1:]]))
    n = max(1, min(8, _SLICE_ELEMENTS // max(1, others)))
    coords, _ = sparse.to_coo()
    rows = np.sort(np.argsort(-np.bincount(coords[0], minlength=sparse.shape[0]))[:n])
    sliced = [
        _dense_slice(x, rows) if term[0] == first else np.asarray(x, np.float64)
        for term, x in zip(terms, ops, strict=True)
    ]
    ref = np.einsum(subs, *sliced, optimize=True)
    mine = _dense_slice(got, rows)
    return report.check_result(mine, ref, TOL * max(1.0, float(np.abs(ref).max(initial=0))))


def _tensora(case: dict[str, Any]) -> tuple[Callable[[], object] | None, str]:
    """A timed tensora call on the case's operands, or None and why not."""
    try:
        import tensora
    except Exception as e:  # not installed, or its compiler backend fails to load
        return None, f"tensora unavailable ({type(e).__name__})"
    assignment, formats = _TACO[case["name"]]
    names = ["A", "S", "B", "C", "D"][: len(formats)]
    args = {}
    for name, fmt, x in zip(names[1:], formats[1:], case["operands"], strict=True):
        if "s" in fmt:
            coords, vals = x.to_coo()
            args[name] = tensora.Tensor.from_aos(
                [tuple(c) for c in coords.T.tolist()], vals.tolist(), dimensions=x.shape, format=fmt
            )
        else:
            args[name] = tensora.Tensor.from_numpy(x, format=fmt)
    fn = tensora.tensor_method(assignment, dict(zip(names, formats, strict=True)))
    return (lambda: fn(**args)), ""


def _pydata(case: dict[str, Any]) -> Callable[[], object]:
    import sparse

    ops = []
    for x in case["operands"]:
        if hasattr(x, "to_coo"):
            coords, vals = x.to_coo()
            ops.append(sparse.COO(coords, vals, shape=x.shape))
        else:
            ops.append(x)
    return lambda: sparse.einsum(case["subscripts"], *ops)


def _once_within(fn: Callable[[], object], extra: int) -> tuple[float | None, str]:
    """Time one call of ``fn`` with the address space capped at its current size plus ``extra``
    bytes (Linux; no cap elsewhere): ``(seconds, "")``, or ``(None, why)`` when it ran out."""
    try:
        import resource

        with open("/proc/self/statm", encoding="ascii") as f:
            now = int(f.read().split()[0]) * resource.getpagesize()
        old = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (now + extra, old[1]))
    except (ImportError, OSError, ValueError):
        old = None
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0, ""
    except MemoryError:
        return None, f"out of memory (more than {extra >> 30} GiB)"
    finally:
        if old is not None:
            resource.setrlimit(resource.RLIMIT_AS, old)


def _scipy(case: dict[str, Any]) -> Callable[[], object] | None:
    if case["name"] != "SpMM":
        return None
    import scipy.sparse as sp

    a, b = case["operands"]
    coords, vals = a.to_coo()
    s = sp.csr_matrix((vals, (coords[0], coords[1])), shape=a.shape)
    return lambda: s @ b


def bench_one(case: dict[str, Any], reps: int, threads: int, pydata: bool, rounds: int = ROUNDS) -> dict[str, Any]:
    """One row: chosen and linear schedules, the peers, the check and the ratios. Timed in
    ``rounds`` alternating rounds, the order rotated each round (each side's best round kept):
    the host is shared and noisy, and a fixed order can favour one entry."""
    from minijit.sparseauto.api import compile_einsum, sparse_einsum

    subs, ops = case["subscripts"], case["operands"]
    row: dict[str, Any] = {k: case[k] for k in ("name", "subscripts", "description")}
    row["threads"] = threads
    ok = True
    timed: dict[str, Callable[[], object]] = {}
    codes: dict[str, bytes] = {}
    for sched in ("auto", "linear"):
        t0 = time.perf_counter()
        compiled, _ = compile_einsum(subs, *ops, schedule=sched, threads=threads)
        row[f"{sched}_setup_s"] = time.perf_counter() - t0
        check = _check(case, sparse_einsum(subs, *ops, schedule=sched, threads=threads))
        ok &= check["ok"]
        row[f"{sched}_check"] = check
        row[f"{sched}_nest"] = str(compiled.nest)
        codes[sched] = compiled.program.asm.code()
        timed[sched] = lambda s=sched: sparse_einsum(subs, *ops, schedule=s, threads=threads)
    row["same_code"] = codes["auto"] == codes["linear"]  # then linear/auto only measures noise
    fn, row["tensora_note"] = _tensora(case)
    if fn is not None:
        timed["tensora"] = fn
        if "s" not in _TACO[case["name"]][1][0]:  # dense outputs: check tensora's too
            row["tensora_check"] = _check(case, np.asarray(fn().to_numpy()))
    sc = _scipy(case)
    if sc is not None:
        timed["scipy"] = sc
    best = dict.fromkeys(timed, float("inf"))
    names = list(timed)
    for r in range(rounds):  # each round starts with the next entry: no entry always follows another
        for name in names[r % len(names) :] + names[: r % len(names)]:
            best[name] = min(best[name], timeit(timed[name], reps))
    for name in ("auto", "linear", "tensora", "scipy"):
        row[f"{name}_s"] = best.get(name)
    row["pydata_s"], row["pydata_note"] = None, ""
    if pydata:
        row["pydata_s"], row["pydata_note"] = _once_within(_pydata(case), PYDATA_MEMORY)
    row["ok"] = ok
    return row


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def _ratio(peer: float | None, mine: float) -> str:
    return "-" if peer is None else f"{peer / mine:.2f}x"


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "kernel",
        "data",
        "auto ms",
        "linear ms",
        "linear/auto",
        "tensora ms",
        "tensora/auto",
        "sparse.einsum ms",
        "sparse/auto",
        "scipy ms",
        "plan+compile ms",
        "check",
    ]
    body = []
    for r in rows:
        t = r["auto_s"]
        body.append(
            [
                r["name"],
                r["description"],
                _ms(t),
                _ms(r["linear_s"]),
                _ratio(r["linear_s"], t) + (" (same code)" if r.get("same_code") else ""),
                _ms(r["tensora_s"]),
                _ratio(r["tensora_s"], t),
                _ms(r["pydata_s"]) if r["pydata_s"] is not None or not r["pydata_note"] else r["pydata_note"],
                _ratio(r["pydata_s"], t),
                _ms(r["scipy_s"]),
                f"{r['auto_setup_s'] * 1e3:.0f}",
                "ok" if r["ok"] else "WRONG",
            ]
        )
    return report.markdown_table(head, body)


def summary(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Geomean ratios: linear/auto on the fission rows and the others, tensora/auto, sparse/auto."""

    def g(key: str, names: tuple[str, ...] | None = None) -> float | None:
        xs = [r[key] / r["auto_s"] for r in rows if r.get(key) and (names is None or r["name"] in names)]
        return geomean(xs)

    others = tuple(r["name"] for r in rows if r["name"] not in FISSION_ROWS)
    return {
        "linear/auto (fission rows)": g("linear_s", FISSION_ROWS),
        "linear/auto (other rows)": g("linear_s", others),
        "tensora/auto": g("tensora_s"),
        "sparse.einsum/auto": g("pydata_s"),
    }


def _load() -> tuple[float, ...]:
    try:
        return os.getloadavg()
    except OSError:  # not available on this platform
        return ()


def bench(
    reps: int,
    threads: int,
    quick: bool,
    command: str,
    progress: report.Progress = report.quiet,
    pydata: bool = True,
    only: tuple[str, ...] | None = None,
) -> report.Report:
    """Every case at ``threads`` threads: a Markdown table and the geomean ratios."""
    rng = np.random.default_rng(0)
    load_start = _load()
    all_cases = [c for c in cases(quick, rng) if only is None or c["name"] in only]
    rows = []
    for i, case in enumerate(all_cases):
        progress(f"[{i + 1}/{len(all_cases)}] {case['name']} {case['subscripts']} ...")
        rows.append(bench_one(case, reps, threads, pydata))
        r = rows[-1]
        progress(f"    auto {_ms(r['auto_s'])} ms, linear {_ms(r['linear_s'])} ms, tensora {_ms(r['tensora_s'])} ms")
    hw = report.hardware()
    sums = summary(rows)
    lines = [table(rows), ""]
    lines += [f"- geomean {k}: {'-' if v is None else f'{v:.2f}x'}" for k, v in sums.items()]
    notes = sorted({r["tensora_note"] for r in rows if r["tensora_note"]})
    lines += [f"- {n}" for n in notes]
    lines += ["", "Schedules (auto):", ""]
    for r in rows:
        lines += [f"{r['name']}:", "```", r["auto_nest"], "```"]
    facts = [
        f"CPU: {report.describe_cpu(hw)}, {hw['cores']} cores, ISA {hw['isa']} ({', '.join(hw['flags'])})",
        f"threads: {threads}; float64; best of {ROUNDS} alternating rounds (order rotated) of the median of"
        f" {reps} calls;"
        " sparse.einsum one call",
        "data: matrices power-law CSR (Pareto 1.3 row lengths); tensors FROSTT-like CSF with"
        f" power-law slices (Zipf-{POSITION_ALPHA:g} positions per mode) and Zipf-distributed fibre"
        f" lengths of mean {FIBRE_MEAN:g} on 1..K (see `minijit.bench.sparse_einsum`; a chosen"
        " parameter, not measured on FROSTT's files); seed 0",
        "host load average (1, 5, 15 min) at the start: "
        f"{', '.join(f'{x:.1f}' for x in load_start)}; at the end: {', '.join(f'{x:.1f}' for x in _load())}"
        " (a shared host: other jobs ran during the measurement when this exceeds the core count)",
        f"date: {report.meta(command)['date']}",
        f"command: `{command}`",
    ]
    ok = all(r["ok"] for r in rows)
    return report.Report(
        header=[f"# sparse einsum: chosen vs linear schedule vs tensora / sparse.einsum / scipy ({threads} threads)"],
        body=lines,
        result={"meta": report.meta(command), "hardware": hw, "rows": rows, "summary": sums},
        ok=ok,
        md_name="sparse_einsum.md",
        md_title="minijit bench sparse-einsum",
        md_facts=facts,
    )
