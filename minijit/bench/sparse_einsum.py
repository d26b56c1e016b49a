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
on FROSTT's files (they are not available here). The "NELL-2" rows instead take the fibre
statistics of FROSTT's NELL-2 as published (`NELL2`: 228 values per fibre, coefficient of
variation 0.89, 27.9 fibres per slice) on NELL-2's two long modes, with fewer slices.

Per row, in the same process: `sparse_einsum` with the planner's schedule (``auto``) and with
TACO's default linear schedule (same code generator); ``minijit.einsum`` as users call it, on the
pre-converted `SparseTensor` ("einsum pre") and on the user's own operand ("einsum call": a scipy
CSR matrix for the matrix rows, a pydata ``sparse.COO`` for the tensor rows; the conversion and the
result in the caller's type are part of the call); `tensora` (TACO, when it imports) timed the
same two ways: on its tensors built beforehand, and with its own conversion of the user's
operands (``Tensor.from_scipy_sparse``, ``from_aos``, ``from_numpy``) inside the call;
pydata ``sparse.einsum`` (one call: it is slow), and scipy for the matrix product. Times are
medians of ``reps`` calls after a warm-up (``minijit.bench.cpu.timeit``); "plan+compile" is the
first call's planning and code generation; "model linear/auto" is the planner's cost model at the
row's sizes (`model_ratio`), the ratio both schedules would give at equal speed per modelled
iteration. Every result is checked against a dense float64
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
FISSION_ROWS = (
    "TTMc",
    "SDDMM-SpMM",
    "TTM chain",
    "TTMc NELL-2",
    "TTM chain NELL-2",
    "TTM chain fibre",
    "TTM chain NELL-2 fibre",
)
#: GNN-sized rows: SDDMM-SpMM (attention scores on the edges, then aggregation) on a power-law
#: graph of `GNN_EDGES` edges over `GNN_NODES` nodes, one row per feature width
GNN_EDGES = 1_000_000
GNN_NODES = 50_000
GNN_WIDTHS = (64, 256)
GNN_ROWS = tuple(f"SDDMM-SpMM GNN-{w}" for w in GNN_WIDTHS)
CASES = (
    "SpMM",
    "SDDMM",
    "SDDMM-SpMM",
    "TTM",
    "TTMc",
    "MTTKRP",
    "TTM chain",
    "TTMc NELL-2",
    "TTM chain NELL-2",
    "TTM chain fibre",
    "TTM chain NELL-2 fibre",
    *GNN_ROWS,
)
_TACO = {  # tensora assignments and operand formats (output first)
    "SpMM": ("A(i,j) = S(i,k) * B(k,j)", ("dd", "ds", "dd")),
    "SDDMM": ("A(i,j) = S(i,j) * B(i,k) * C(j,k)", ("ds", "ds", "dd", "dd")),
    "SDDMM-SpMM": ("A(i,l) = S(i,j) * B(i,k) * C(j,k) * D(j,l)", ("dd", "ds", "dd", "dd", "dd")),
    "TTM": ("A(i,j,l) = S(i,j,k) * B(k,l)", ("ddd", "sss", "dd")),
    "TTMc": ("A(i,l,m) = S(i,j,k) * B(j,l) * C(k,m)", ("ddd", "sss", "dd", "dd")),
    "MTTKRP": ("A(i,l) = S(i,j,k) * B(j,l) * C(k,l)", ("dd", "sss", "dd", "dd")),
    "TTM chain": ("A(i,j,m) = S(i,j,k) * B(k,l) * C(l,m)", ("ddd", "sss", "dd", "dd")),
}
_TACO["TTMc NELL-2"], _TACO["TTM chain NELL-2"] = _TACO["TTMc"], _TACO["TTM chain"]
_TACO["TTM chain fibre"] = _TACO["TTM chain NELL-2 fibre"] = (_TACO["TTM chain"][0], ("ssd", "sss", "dd", "dd"))
for _name in GNN_ROWS:
    _TACO[_name] = _TACO["SDDMM-SpMM"]


#: mean non-zeros per fibre of the last mode of the synthetic tensors (see `powerlaw_tensor`)
FIBRE_MEAN = 16.0
#: NELL-2 of FROSTT (12092 x 9184 x 28818, 76.9M non-zeros) as FeaTen measured it, from the
#: parameters GenTensor's ``generate_real_tensor_siblings.sh`` (github.com/sparcityeu/GenTensor)
#: passes to regenerate it: non-zero density, density of non-empty mode-3 fibres, and the
#: coefficient of variation of non-zeros per fibre. Its fibres hold density / fibre density * K
#: = 228 values on average, and a slice holds fibre density * J = 27.9 fibres.
NELL2 = {"shape": (12092, 9184, 28818), "density": 2.40224e-5, "fibre_density": 3.03788e-3, "fibre_cv": 0.891844}
#: slices of the NELL-2-shaped rows (NELL-2's other two modes, fibres per slice and fibre lengths)
NELL2_SLICES = 128


def nell2_tensor(slices: int, rng: np.random.Generator):
    """A CSF tensor of ``slices`` slices with NELL-2's other modes and fibre statistics (`NELL2`):
    27.9 fibres per slice on average at power-law positions, log-normal fibre lengths of mean 228
    and coefficient of variation 0.89 on 1..28818 (`powerlaw_tensor` with ``fibre_cv``)."""
    _, j, k = NELL2["shape"]
    mean = NELL2["density"] / NELL2["fibre_density"] * k
    nnz = round(slices * NELL2["fibre_density"] * j * mean)
    return powerlaw_tensor((slices, j, k), nnz, rng, fibre_mean=mean, fibre_cv=NELL2["fibre_cv"])


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


def fibre_lengths(count: int, n: int, mean: float, rng: np.random.Generator, cv: float | None = None) -> np.ndarray:
    """``count`` fibre lengths on ``1..n``: from the Zipf law with mean ``mean``, or with ``cv``
    given, log-normal with that mean and coefficient of variation (rounded, clipped to ``1..n``)."""
    if cv is not None:
        if not (1.0 <= mean <= n and cv > 0):
            raise ValueError(f"log-normal fibre lengths need 1 <= mean <= {n} and cv > 0, got mean {mean}, cv {cv}")
        sigma2 = np.log1p(cv * cv)
        draw = rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), count)
        return np.clip(np.rint(draw), 1, n).astype(np.int64)
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
    fibre_cv: float | None = None,
):
    """A CSF `SparseTensor` (all levels compressed, modes in order) with about ``nnz`` values,
    shaped like FROSTT's count tensors: power-law slices *and* power-law fibre lengths.

    The tensor has ``nnz / fibre_mean`` fibres of the last mode. Their lengths follow a Zipf law
    ``P(len) ~ len**-s`` on ``1..shape[-1]``, ``s`` solved so the mean is ``fibre_mean`` (most
    fibres hold one or two values, a few hold hundreds). Their positions (distinct prefixes of
    the other modes) and the coordinates inside each fibre (distinct) are drawn with
    Zipf(``alpha``) marginals per mode, ranks shuffled. Values are standard normal. With
    ``fibre_cv`` the lengths are log-normal with that coefficient of variation instead of Zipf
    (`fibre_lengths`; the `NELL2` rows).
    """
    from minijit.sparseauto.tensor import SparseTensor

    *outer, last = shape
    nfib = max(1, round(nnz / fibre_mean))
    cells = int(np.prod(outer))
    if nfib > cells // 2:
        raise ValueError(f"{nfib} fibres need more than {cells} prefixes of shape {tuple(outer)}")
    lengths = fibre_lengths(nfib, last, fibre_mean, rng, fibre_cv)

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
        top = int(ln.max())  # the largest keys of each row, in order: argpartition, then sort those
        if top < last:
            part = np.argpartition(-keys, top - 1, axis=1)[:, :top]
        else:
            part = np.tile(np.arange(last), (ln.size, 1))
        order = np.take_along_axis(part, np.argsort(-np.take_along_axis(keys, part, 1), axis=1), 1)
        crd.append(order[np.arange(top) < ln[:, None]])
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


def powerlaw_graph(nodes: int, edges: int, rng: np.random.Generator):
    """A ``nodes x nodes`` CSR `SparseTensor` with about ``edges`` non-zeros: Pareto-1.3 row
    lengths (`_matrix`'s law) scaled to the edge count, each row at most a quarter of the nodes."""
    from minijit.bench.spmm import _csr
    from minijit.sparseauto.tensor import SparseTensor

    raw = np.floor(rng.pareto(1.3, nodes) * 4 + 1)
    cap, scale = max(1, nodes // 4), edges / raw.sum()
    for _ in range(20):  # the cap cuts the heaviest rows: scale the others up until the count is met
        lengths = np.clip(np.round(raw * scale), 1, cap)
        if abs(lengths.sum() - edges) <= edges // 1000 or lengths.min() == cap:
            break
        scale *= edges / lengths.sum()
    return SparseTensor.from_scipy(_csr(nodes, nodes, lengths, rng).astype(np.float64))


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
    tn = nell2_tensor(NELL2_SLICES // q, rng)
    sn = tn.shape
    nell = f"{sn[0]}x{sn[1]}x{sn[2]} CSF, NELL-2 fibres (mean {tn.nnz / _fibres(tn):.0f}), nnz {tn.nnz}"
    b, c = rng.standard_normal((sn[1], 16)), rng.standard_normal((sn[2], 16))
    out.append(("TTMc NELL-2", "ijk,jl,km->ilm", [tn, b, c], f"{nell}, L = M = 16"))
    b, c = rng.standard_normal((sn[2], 16)), rng.standard_normal((16, 16))
    out.append(("TTM chain NELL-2", "ijk,kl,lm->ijm", [tn, b, c], f"{nell}, L = M = 16"))
    rows = [{"name": n, "subscripts": s, "operands": o, "description": d} for n, s, o, d in out]
    for name in ("TTM chain", "TTM chain NELL-2"):  # the same rows with the output under B's fibres
        row = next(r for r in rows if r["name"] == name)
        rows.append({**row, "name": f"{name} fibre", "description": row["description"] + ", fibre output"})
        rows[-1]["fibre_output"] = True
    nodes, edges = (GNN_NODES, GNN_EDGES) if not quick else (GNN_NODES // 50, GNN_EDGES // 100)
    g = powerlaw_graph(nodes, edges, rng)
    for w in GNN_WIDTHS:
        feats = [rng.standard_normal((nodes, w)) for _ in range(3)]
        desc = f"{nodes}x{nodes} power-law graph, {g.nnz} edges, K = L = {w}"
        rows.append({"name": f"SDDMM-SpMM GNN-{w}", "subscripts": "ij,ik,jk,jl->il", "operands": [g, *feats]})
        rows[-1].update(description=desc, gnn=True)
    return rows


def _fibres(t: Any) -> int:
    """Non-empty fibres of the last mode of a CSF `SparseTensor` (entries of its level above)."""
    return int(t.storage[-2].crd.shape[0])


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
    """Compare ``got`` with a dense float64 einsum on the heaviest rows of the first index.

    Only the coordinates that the kept rows' non-zeros use are densified along the sparse
    operand's other modes (every term of the sum has a non-zero there), so long modes (NELL-2's
    28818) stay small; ``got`` must be zero at the other coordinates of those rows."""
    subs, ops = case["subscripts"], case["operands"]
    lhs, out = subs.split("->")
    terms = lhs.split(",")
    first = out[0]
    sparse = ops[0]
    coords, vals = sparse.to_coo()
    heavy = np.argsort(-np.bincount(coords[0], minlength=sparse.shape[0]))
    for n in range(min(8, sparse.shape[0]), 0, -1):  # as many heavy rows as fit the budget
        rows = np.sort(heavy[:n])
        keep = np.isin(coords[0], rows)
        sel = {terms[0][m]: np.unique(coords[m, keep]) for m in range(1, sparse.ndim)}
        if n == 1 or n * int(np.prod([len(v) for v in sel.values()])) <= _SLICE_ELEMENTS:
            break
    sel[first] = rows
    remap = [np.searchsorted(sel[ch], coords[m, keep]) for m, ch in enumerate(terms[0])]
    block = np.zeros(tuple(len(sel[ch]) for ch in terms[0]))
    np.add.at(block, tuple(remap), vals[keep])

    def take(x: np.ndarray, term: str) -> np.ndarray:
        for axis, ch in enumerate(term):
            if ch in sel:
                x = np.take(x, sel[ch], axis=axis)
        return x

    sliced = [block] + [take(np.asarray(x, np.float64), term) for term, x in zip(terms[1:], ops[1:], strict=True)]
    ref = np.einsum(subs, *sliced, optimize=True)
    rows_got = _dense_slice(got, rows)
    axes = [sel.get(ch, np.arange(m)) for ch, m in zip(out[1:], rows_got.shape[1:], strict=True)]
    used = np.ix_(np.arange(len(rows)), *axes)
    outside = rows_got.copy()
    outside[used] = 0.0
    res = report.check_result(rows_got[used], ref, TOL * max(1.0, float(np.abs(ref).max(initial=0))))
    if np.any(outside):
        res = {**res, "ok": False, "outside": "non-zero where no non-zero of the sparse operand contributes"}
    return res


def _tensora(case: dict[str, Any]) -> tuple[Callable[[], object] | None, str]:
    """A timed tensora call on the case's operands, or None and why not."""
    try:
        import tensora
    except Exception as e:  # not installed, or its compiler backend fails to load
        why = f"{type(e).__name__}: not installed, or its backend fails"
        return None, f"tensora unavailable ({why}): its columns are '-'"
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


def _user_operands(case: dict[str, Any]) -> tuple[list[Any] | None, str]:
    """The row's operands as users hold them: a scipy ``csr_matrix`` for a sparse matrix, a
    pydata ``sparse.COO`` for a sparse tensor (built by pydata's own constructor), dense ones as
    they are; or None and why not (pydata missing)."""
    import scipy.sparse as sp

    out = []
    for x in case["operands"]:
        if not hasattr(x, "to_coo"):
            out.append(x)
            continue
        coords, vals = x.to_coo()
        if x.ndim == 2:
            out.append(sp.csr_matrix((np.array(vals), (coords[0], coords[1])), shape=x.shape))
            continue
        try:
            import sparse
        except ImportError:
            return None, "pydata sparse not installed: no call on a COO"
        out.append(sparse.COO(coords, np.array(vals), shape=x.shape))
    return out, ""


def _tensora_from_user(case: dict[str, Any], user_ops: list[Any]) -> Callable[[], object] | None:
    """tensora with its own conversion of the user's operands inside the call: scipy matrices by
    ``Tensor.from_scipy_sparse``, pydata COO by ``Tensor.from_aos`` (Python lists, its only
    coordinate input), dense arrays by ``Tensor.from_numpy``; None when tensora does not import."""
    try:
        import tensora
    except Exception:
        return None
    assignment, formats = _TACO[case["name"]]
    names = ["A", "S", "B", "C", "D"][: len(formats)]
    fn = tensora.tensor_method(assignment, dict(zip(names, formats, strict=True)))

    def call() -> object:
        args = {}
        for name, fmt, x in zip(names[1:], formats[1:], user_ops, strict=True):
            if type(x).__module__.startswith("scipy.sparse"):
                args[name] = tensora.Tensor.from_scipy_sparse(x, format=fmt)
            elif hasattr(x, "coords"):
                aos = [tuple(c) for c in x.coords.T.tolist()]
                args[name] = tensora.Tensor.from_aos(aos, x.data.tolist(), dimensions=x.shape, format=fmt)
            else:
                args[name] = tensora.Tensor.from_numpy(x, format=fmt)
        return fn(**args)

    return call


def _as_checkable(x: Any) -> Any:
    """A result of `minijit.einsum` on user operands as `_check` reads it: scipy and pydata
    results as a `SparseTensor` (their own conversion), numpy as it is."""
    from minijit.sparseauto.tensor import SparseTensor, as_sparse

    if isinstance(x, np.ndarray | SparseTensor):
        return x
    return as_sparse(x, "einsum result")


#: single calls of tensora with its conversion (Python lists of coordinates: slow), best kept
TENSORA_INCL_CALLS = 3


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


def model_ratio(plan: Any) -> float | None:
    """The planner's cost model (seed 002's time complexity) at the row's sizes and non-zero
    counts: the default linear schedule's time over the chosen schedule's. The measured
    linear/auto ratio would equal it if both schedules ran at the same rate per unit of modelled
    time (it counts loop iterations, not memory traffic or the output's zeroing)."""
    from minijit.sparseauto.complexity import cost
    from minijit.sparseauto.prune import environment

    if plan is None or plan.choice is None:
        return None
    env = environment(plan.operands, plan.sizes, plan.nnz)
    chosen = plan.choice.candidate.cost.time.evaluate(env)
    return None if chosen <= 0 else cost(plan.default_linear()).time.evaluate(env) / chosen


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
    fibre = bool(case.get("fibre_output", False))
    for sched in ("auto", "linear"):
        t0 = time.perf_counter()
        compiled, _ = compile_einsum(subs, *ops, schedule=sched, threads=threads, fibre_output=fibre)
        row[f"{sched}_setup_s"] = time.perf_counter() - t0
        check = _check(case, sparse_einsum(subs, *ops, schedule=sched, threads=threads, fibre_output=fibre))
        ok &= check["ok"]
        row[f"{sched}_check"] = check
        row[f"{sched}_nest"] = str(compiled.nest)
        if sched == "auto":
            row["model_ratio"] = model_ratio(compiled.plan)
        codes[sched] = compiled.program.asm.code()
        timed[sched] = lambda s=sched: sparse_einsum(subs, *ops, schedule=s, threads=threads, fibre_output=fibre)
    row["same_code"] = codes["auto"] == codes["linear"]  # then linear/auto only measures noise
    user_ops, row["call_note"] = (None, "fibre output: sparse_einsum only") if fibre else _user_operands(case)
    if user_ops is not None:
        import minijit

        timed["call_pre"] = lambda: minijit.einsum(subs, *ops)
        timed["call"] = lambda: minijit.einsum(subs, *user_ops)
        row["call_check"] = _check(case, _as_checkable(timed["call"]()))
        ok &= row["call_check"]["ok"]
    fn, row["tensora_note"] = _tensora(case)
    if fn is not None:
        timed["tensora"] = fn
        if "s" not in _TACO[case["name"]][1][0] and not case.get("gnn"):  # dense outputs: check tensora's too
            row["tensora_check"] = _check(case, np.asarray(fn().to_numpy()))
    sc = _scipy(case)
    if sc is not None:
        timed["scipy"] = sc
    # GNN rows: the unfused products (linear, tensora) take nnz * K * L steps, seconds a call at
    # K = L = 256: one call each, after the rounds of the others
    once = {k: timed.pop(k) for k in ("linear", "tensora") if case.get("gnn") and k in timed}
    best = dict.fromkeys(timed, float("inf"))
    names = list(timed)
    for r in range(rounds):  # each round starts with the next entry: no entry always follows another
        for name in names[r % len(names) :] + names[: r % len(names)]:
            best[name] = min(best[name], timeit(timed[name], reps))
    best.update({k: _once(f) for k, f in once.items()})
    row["single_call"] = sorted(once)
    for name in ("auto", "linear", "tensora", "scipy", "call", "call_pre"):
        row[f"{name}_s"] = best.get(name)
    row["tensora_incl_s"] = None
    incl = _tensora_from_user(case, user_ops) if fn is not None and user_ops is not None else None
    if incl is not None:
        row["tensora_incl_s"] = min(_once(incl) for _ in range(1 if case.get("gnn") else TENSORA_INCL_CALLS))
    row["pydata_s"], row["pydata_note"] = None, ""
    if fibre:
        row["pydata_note"] = "dense output only: see the row above"
    elif case.get("gnn"):
        row["pydata_note"] = "not run on the GNN rows"
    elif pydata:
        row["pydata_s"], row["pydata_note"] = _once_within(_pydata(case), PYDATA_MEMORY)
    row["ok"] = ok
    return row


def _once(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


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
        "model linear/auto",
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
                "-" if r.get("model_ratio") is None else f"{r['model_ratio']:.2f}x",
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


def call_table(rows: list[dict[str, Any]]) -> str:
    """The rows as users call them: ``minijit.einsum`` on the pre-converted `SparseTensor` and on
    the user's scipy/pydata operand, and tensora timed both ways (its tensors built beforehand;
    its conversion of the user's operands inside the call)."""
    head = [
        "kernel",
        "einsum pre ms",
        "einsum call ms",
        "call/pre",
        "tensora ms",
        "tensora/pre",
        "tensora incl. conversion ms",
        "tensora incl./call",
        "check",
    ]
    body = []
    for r in rows:
        pre, call = r.get("call_pre_s"), r.get("call_s")
        if pre is None or call is None:
            body.append([r["name"], "-", "-", r.get("call_note") or "-", "-", "-", "-", "-", "-"])
            continue
        check = r.get("call_check", {}).get("ok")
        body.append(
            [
                r["name"],
                _ms(pre),
                _ms(call),
                f"{call / pre:.2f}x",
                _ms(r["tensora_s"]),
                _ratio(r["tensora_s"], pre),
                _ms(r.get("tensora_incl_s")),
                _ratio(r.get("tensora_incl_s"), call),
                "-" if check is None else ("ok" if check else "WRONG"),
            ]
        )
    return report.markdown_table(head, body)


def summary(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Geomean ratios: linear/auto on the fission rows and the others, tensora/auto, sparse/auto."""

    def g(key: str, names: tuple[str, ...] | None = None) -> float | None:
        xs = [r[key] / r["auto_s"] for r in rows if r.get(key) and (names is None or r["name"] in names)]
        return geomean(xs)

    def model(names: tuple[str, ...]) -> float | None:
        return geomean([r["model_ratio"] for r in rows if r["name"] in names and r.get("model_ratio")])

    sets = {
        "fission rows": FISSION_ROWS,
        "fission rows, power-law tensors": ("TTMc", "SDDMM-SpMM", "TTM chain"),
        "fission rows, NELL-2 tensors and SDDMM-SpMM": ("TTMc NELL-2", "SDDMM-SpMM", "TTM chain NELL-2"),
        "fission rows, power-law tensors, fibre output": ("TTMc", "SDDMM-SpMM", "TTM chain fibre"),
        "fission rows, NELL-2 tensors and SDDMM-SpMM, fibre output": (
            "TTMc NELL-2",
            "SDDMM-SpMM",
            "TTM chain NELL-2 fibre",
        ),
    }
    others = tuple(r["name"] for r in rows if r["name"] not in FISSION_ROWS + GNN_ROWS)
    out: dict[str, float | None] = {}
    for label, names in sets.items():
        out[f"linear/auto ({label})"] = g("linear_s", names)
        out[f"model linear/auto ({label})"] = model(names)

    def call(key: str, base: str) -> float | None:
        return geomean([r[key] / r[base] for r in rows if r.get(key) and r.get(base)])

    return {
        **out,
        "linear/auto (other rows)": g("linear_s", others),
        "tensora/auto": g("tensora_s"),
        "sparse.einsum/auto": g("pydata_s"),
        "einsum call/einsum pre": call("call_s", "call_pre_s"),
        "tensora/einsum pre": call("tensora_s", "call_pre_s"),
        "tensora incl. conversion/einsum call": call("tensora_incl_s", "call_s"),
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
    lines += ["", "As users call it (`minijit.einsum` on the pre-converted tensor and on the user's operand):", ""]
    lines += [call_table(rows)]
    lines += ["", "Schedules (auto):", ""]
    for r in rows:
        lines += [f"{r['name']}:", "```", r["auto_nest"], "```"]
    facts = [
        f"CPU: {report.describe_cpu(hw)}, {hw['cores']} cores, ISA {hw['isa']} ({', '.join(hw['flags'])})",
        f"threads: {threads}; float64; best of {ROUNDS} alternating rounds (order rotated) of the median of"
        f" {reps} calls; sparse.einsum one call; tensora with its conversion: best of"
        f" {TENSORA_INCL_CALLS} single calls; GNN rows: linear, tensora and tensora with its"
        " conversion one call each (nnz * K * L steps: seconds a call), tensora's result not checked",
        "einsum pre / call: `minijit.einsum` (its default threads) on the pre-converted SparseTensor /"
        " on a scipy csr_matrix (matrix rows) or a pydata sparse.COO (tensor rows), the result in the"
        " caller's type (pydata: a COO) as part of the call",
        f"GNN rows: SDDMM-SpMM on a power-law graph (Pareto 1.3 row lengths scaled to {GNN_EDGES} edges"
        f" over {GNN_NODES} nodes; --quick: 1/100 of the edges, 1/50 of the nodes)",
        "data: matrices power-law CSR (Pareto 1.3 row lengths); tensors FROSTT-like CSF with"
        f" power-law slices (Zipf-{POSITION_ALPHA:g} positions per mode) and Zipf-distributed fibre"
        f" lengths of mean {FIBRE_MEAN:g} on 1..K (see `minijit.bench.sparse_einsum`; a chosen"
        " parameter, not measured on FROSTT's files); the NELL-2 rows: NELL-2's modes 2 and 3 and its"
        " published fibre statistics (log-normal lengths, mean 228, cv 0.89; 27.9 fibres per slice)"
        f" on {NELL2_SLICES} slices; seed 0",
        "host load average (1, 5, 15 min) at the start: "
        f"{', '.join(f'{x:.1f}' for x in load_start)}; at the end: {', '.join(f'{x:.1f}' for x in _load())}"
        " (a shared host: other jobs ran during the measurement when this exceeds the core count)",
        "model linear/auto: the planner's cost model (seed 002's time complexity) at the row's sizes and"
        " non-zero counts, linear over chosen: the ratio both schedules would give at equal speed per"
        " modelled iteration (it counts loop iterations, not memory traffic or the output's zeroing)",
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
