"""Dtypes `minijit.einsum` computes on the kernels of another dtype (no machine code of their own).

A `Route` says how a call numpy's einsum would otherwise run is computed on the compiled
float32/float64 or int32/int64 path, with numpy's result dtype and values (docs/decisions.md):

- ``"int"``: int8/int16/uint8/uint16/uint32/uint64, mixed integer kinds, bool among integers.
  Every operand is cast to numpy's result dtype (as numpy does), then 8/16-bit ones widened to
  int32 (``astype``) and uint32/uint64 viewed as int32/int64; the result is cast or viewed back.
  Arithmetic mod 2^n commutes with the wider ring, so this is numpy's result bit for bit,
  wrap-around included.
- ``"bool"``: numpy's einsum on bool is logical and (products) / or (sums). Computed on float32
  0/1 values (products exact; a sum of non-negative terms is zero iff every term is), ``!= 0``.
- ``"float"``: float16 operands (or float16 among float32/float64; floats only) widened to
  float32 (or the float64 result dtype), contracted on those kernels, the result rounded once to float16.
  The conversion is at the boundary, not inside the kernels: float16 <-> float32 by the host's
  conversion kernel (`minijit.kernels.convert`; numpy's ``astype`` where there is none), bit for
  bit numpy's ``astype``; float16 -> float64 by ``astype``.
- torch CPU bfloat16 tensors (every operand one, no ``dtype``; `is_torch_bf16`): widened to
  float32 with torch's ``.float()`` (exact), float32 kernels, the result rounded once to
  bfloat16 with torch's ``.to`` (round to nearest even), a bfloat16 tensor as ``torch.einsum``
  gives; numpy holds no bfloat16, so the widening is done in torch, at the boundary too.
- ``"complex"``: complex64/complex128 (with real float operands of any precision) pairwise along
  the contraction path (`complex_contract`) on the float32/float64 kernels. A step of two complex
  operands is the real "4M" formulation, one real einsum with one operand viewed as real with a
  trailing (re, im) axis and the other expanded to a 2x2 real block per element (`expand_4m`),
  or, when its GEMM sizes m, n, k are all at least `GAUSS_MIN`, the "3M" (Gauss) formulation
  (`gauss_3m`): three real einsums on planar parts, 25% fewer multiply-adds, a weaker bound on
  the imaginary part (docs/decisions.md).

Everything else (longdouble, clongdouble, object, integers mixed with floats or complex, an
integer result of float kind, an ``out`` of another dtype, a one-operand view) stays numpy's.
The transforms are pure functions of arrays; `run` takes the compiled real einsum as ``call``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minijit.einsum import keywords as _kw
from minijit.kernels import convert as _convert

__all__ = [
    "BF16_ROUTE",
    "Route",
    "as_real",
    "complex_contract",
    "expand_4m",
    "explain",
    "gauss_3m",
    "gemm_sizes",
    "is_torch_bf16",
    "narrow",
    "route",
    "run",
    "widen",
]

#: the compiled einsum on real or int32/int64 arrays: ``call(subscripts, *arrays, optimize=...)``,
#: a C-order result
RealEinsum = Callable[..., np.ndarray]

_KINDS = ("int", "bool", "float", "complex")
_COMPUTE = {np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64)}
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_PLAIN = (np.generic, int, float, complex, bool, list, tuple)

#: a step of two complex operands runs 3M when its m, n and k (`gemm_sizes`) are all at least
#: this (elements); below, 4M. Measured on x86-64 AVX2, 1 thread, 'ij,jk->ik', 3M's speed over
#: 4M's: 0.76-0.94x at 128 (its extra passes and three calls), 0.98-1.24x at 160 (break-even),
#: 1.08-1.20x at 192, 1.05-1.40x at 256-1024 (bench/results/x86_64_einsum_complex_3m_2026-11-28.md)
GAUSS_MIN = 192


@dataclass(frozen=True)
class Route:
    """How a call runs on the compiled path: ``kind`` (one of "int", "bool", "float",
    "complex"), numpy's ``result`` dtype and the ``compute`` dtype of the compiled kernels
    (int32/int64/float32/float64; for "complex" the real dtype of the result's precision)."""

    kind: str
    result: np.dtype
    compute: np.dtype

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Route: kind must be one of {_KINDS}, got {self.kind!r}")
        if np.dtype(self.compute) not in _COMPUTE:
            raise ValueError(f"Route: compute must be int32/int64/float32/float64, got {self.compute}")

    def describe(self) -> str:
        """The path in words, e.g. "complex64 via the real 4M formulation on float32 kernels"
        (`explain` says "via 3M" instead where a step is large enough for it)."""
        r, c = self.result, self.compute
        if self.kind == "complex":
            return f"{r} via the real 4M formulation on {c} kernels"
        if self.kind == "bool":
            return f"bool as logical and/or: 0/1 {c} on {c} kernels, result != 0"
        if self.kind == "float":
            rounded = f", result rounded once to {r}" if r != c else ""
            return f"operands widened to {c} (converted at the boundary), {c} kernels{rounded}"
        how = "viewed as" if r.itemsize == c.itemsize else "widened to"
        return f"{r} {how} {c} (arithmetic mod 2^{8 * r.itemsize}), {c} kernels, result back to {r}"


#: what `explain` says of a call on torch CPU bfloat16 tensors
BF16_ROUTE = (
    "bfloat16 widened to float32 (torch's .float() at the boundary), float32 kernels, result rounded once to bfloat16"
)


def is_torch_bf16(x: Any) -> bool:
    """Whether ``x`` is a torch CPU tensor of bfloat16 (no torch import: its type's module)."""
    if type(x) is np.ndarray or not (type(x).__module__ or "").startswith("torch"):
        return False
    return str(getattr(x, "dtype", "")) == "torch.bfloat16" and getattr(getattr(x, "device", None), "type", "") == "cpu"


def _arrays(subscripts: Any, operands: Sequence[Any]) -> list[np.ndarray] | None:
    """The array operands (sublists left out; plain ones through np.asarray), or None when one
    is neither a numpy array nor plain (torch and device arrays: read after host conversion)."""
    xs = list(operands) if isinstance(subscripts, str) else [subscripts, *operands][0::2][: (len(operands) + 1) // 2]
    out = []
    for x in xs:
        if isinstance(x, _PLAIN):
            try:
                x = np.asarray(x)
            except (ValueError, TypeError):
                return None
        if type(x) is not np.ndarray:
            return None
        out.append(x)
    return out


def route(
    subscripts: Any, operands: Sequence[Any], out: Any, dtype: Any, order: Any, casting: Any, target: Any
) -> Route | None:
    """The `Route` of a call numpy's einsum would run, or None (numpy's einsum runs it: its
    result, its errors). Decides from dtypes and keywords only (nothing is converted)."""
    from minijit.einsum import dtypes as _dt  # noqa: PLC0415 - dtypes imports this module lazily

    if not (_kw.valid_order(order) and _kw.valid_casting(casting)) or subscripts is _dt.MISSING:
        return None
    arrays = _arrays(subscripts, operands)
    if not arrays or (out is not None and type(out) is not np.ndarray):
        return None
    try:
        rt = np.dtype(dtype) if dtype is not None else np.result_type(*arrays)
    except TypeError:
        return None
    if out is not None and out.dtype != rt:
        return None
    if not _kw.cast_allowed(arrays, rt, out, "safe" if casting is None else casting):
        return None
    if out is None and dtype is None and _dt._is_view(subscripts, tuple(operands)):
        return None  # numpy returns a view of the operand
    kinds = {x.dtype.kind for x in arrays}
    if rt.kind in "iu" and kinds <= set("iub"):
        compute = np.dtype(np.int32 if rt.itemsize <= 4 else np.int64)
        if not _dt._int_target(target, _dt.INT_DTYPES[compute]):
            return None
        return Route("int", rt, compute)
    if rt.kind == "b":
        return Route("bool", rt, np.dtype(np.float32))
    if rt in (np.float16, np.float32, np.float64) and kinds == {"f"} and _plain_floats(arrays):
        return Route("float", rt, np.dtype(np.float64 if rt == np.float64 else np.float32))
    if rt in (np.complex64, np.complex128) and kinds <= set("fc") and _plain_floats(arrays):
        return Route("complex", rt, np.dtype(np.float32 if rt == np.complex64 else np.float64))
    return None


#: the inexact operand dtypes a route takes (not longdouble or clongdouble: no kernels of their precision)
_INEXACT = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128)}


def _plain_floats(arrays: list[np.ndarray]) -> bool:
    """Every inexact operand is float16/32/64 or complex64/128."""
    return all(x.dtype in _INEXACT for x in arrays if x.dtype.kind in "fc")


def widen(x: np.ndarray, r: Route) -> np.ndarray:
    """Operand ``x`` as the compiled call reads it: cast to numpy's result dtype ``r.result`` first
    (as numpy's einsum casts), then to ``r.compute`` (ints: a view where the size is the same;
    bool: 0/1). "complex": complex operands as ``r.result``, real ones as ``r.compute``."""
    if r.kind == "complex":
        return x.astype(r.result if x.dtype.kind == "c" else r.compute, copy=False)
    if x.dtype == np.float16 and r.compute == np.float32:  # exact either way: the conversion kernel
        return _convert.to_float32(x)
    y = x.astype(r.result, copy=False)
    if r.kind == "int" and y.itemsize == r.compute.itemsize:
        return y.view(r.compute)
    return y.astype(r.compute, copy=False)


def narrow(result: np.ndarray, r: Route) -> np.ndarray:
    """The compiled call's ``result`` (``r.compute``, C order) as numpy's result dtype: a view
    (uint32/uint64), an astype that wraps (8/16-bit ints) or rounds once (float16), ``!= 0``."""
    result = np.asarray(result)
    if r.kind == "bool":
        return result != 0
    if r.kind == "int" and result.itemsize == r.result.itemsize:
        return result.view(r.result)
    if r.result == np.float16 and result.dtype == np.float32:  # rounded once, by the conversion kernel
        return _convert.to_float16(result)
    return result.astype(r.result, copy=False)


def as_real(a: np.ndarray) -> np.ndarray:
    """Complex ``a`` as a read-only real view of shape ``a.shape + (2,)``: (re, im) on the last
    axis, stride ``a.itemsize // 2`` bytes (C-contiguous where ``a`` is)."""
    half = a.itemsize // 2
    return np.lib.stride_tricks.as_strided(a.real, a.shape + (2,), a.strides + (half,), writeable=False)


def expand_4m(b: np.ndarray, k: int) -> np.ndarray:
    """Complex ``b`` as the real array ``E`` of shape ``b.shape[:k] + (2,) + b.shape[k:] + (2,)``
    (axes ``..., r, ..., s``, C order) with ``E[.., r, .., s]`` = [[re, im], [-im, re]][r][s], so
    that ``sum_r A[.., r] E[.., r, .., s]`` is the product ``A b`` with (re, im) on ``s``."""
    e = np.empty(b.shape[:k] + (2,) + b.shape[k:] + (2,), b.real.dtype)
    v = np.moveaxis(e, k, -2)  # b's axes, then r, s
    v[..., 0, 0] = b.real
    v[..., 0, 1] = b.imag
    # assigned, not np.negative(b.imag, out=...): numpy 2.4.6's negative writes wrong values into
    # this strided view when b is a transposed view with an axis of 2 (test_widen's regression test)
    v[..., 1, 0] = -b.imag
    v[..., 1, 1] = b.real
    return e


def _fresh(used: str, n: int) -> str:
    free = [c for c in _LETTERS if c not in used]
    if len(free) < n:
        raise ValueError("einsum: no letters left for the complex (re, im) axes")
    return "".join(free[:n])


def _pair(a: tuple[str, np.ndarray], b: tuple[str, np.ndarray], o: str, call: RealEinsum, steps: list[str] | None):
    """One pairwise contraction ``a, b -> o`` (index strings and arrays; complex or real of the
    same precision) as one real einsum; the result complex when an operand is."""
    (sa, xa), (sb, xb) = a, b
    ca, cb = xa.dtype.kind == "c", xb.dtype.kind == "c"
    if not (ca or cb):
        subs = f"{sa},{sb}->{o}"
        if steps is not None:
            steps.append(subs)
        return call(subs, xa, xb)
    if not (ca and cb):  # one complex operand: its (re, im) axis passes through
        r = _fresh(sa + sb + o, 1)
        subs = f"{sa}{r if ca else ''},{sb}{r if cb else ''}->{o}{r}"
        if steps is not None:
            steps.append(subs)
        res = call(subs, as_real(xa) if ca else xa, as_real(xb) if cb else xb)
        return _complex(res, xa if ca else xb)
    if min(gemm_sizes(sa, xa.shape, sb, xb.shape, o)) >= GAUSS_MIN:
        return gauss_3m(a, b, o, call, steps)
    if xb.size > xa.size:  # expand the smaller one (the expansion writes 4x its size)
        (sa, xa), (sb, xb) = (sb, xb), (sa, xa)
    r, s = _fresh(sa + sb + o, 2)
    shared = [c for c in sa if c in sb]
    rest = [c for c in sb if c not in shared]
    perm = [sb.index(c) for c in shared + rest]
    xt = xb.transpose(perm)
    if steps is None:
        e = expand_4m(xt, len(shared))
    else:  # explain: the expanded operand's shape only, nothing written
        e = np.broadcast_to(xt.real[..., None, None], xt.shape + (2, 2)).transpose(_mid(xt.ndim, len(shared)))
    ra = as_real(xa)
    c = sa[-1] if sa else ""
    merge = bool(c) and c in sb and c not in o and xa.shape[-1] == xt.shape[len(shared) - 1]
    if merge and xa.strides[-1] != xa.itemsize and not (steps is not None and xa.strides[-1] == 0):
        merge = False  # not contiguous (zero strides: explain's stand-ins, which say what a C-order call runs)
    if merge:
        # a's last index is summed and contiguous: it and (re, im) are one index of 2n values in
        # both operands (one K of the real GEMM, not an inner loop of 2)
        n, k = xa.shape[-1], len(shared)
        a_shape, e_shape = ra.shape[:-2] + (2 * n,), e.shape[: k - 1] + (2 * n,) + e.shape[k + 1 :]
        if steps is None:
            ra, e = ra.reshape(a_shape), e.reshape(e_shape)
        else:  # explain: shapes only
            ra, e = (np.broadcast_to(np.zeros((), ra.dtype), x) for x in (a_shape, e_shape))
        subs = f"{sa},{''.join(shared)}{''.join(rest)}{s}->{o}{s}"
    else:
        subs = f"{sa}{r},{''.join(shared)}{r}{''.join(rest)}{s}->{o}{s}"
    if steps is not None:
        steps.append(subs + "  (4M: operand 2 expanded)")
    return _complex(call(subs, ra, e), xa)


def gemm_sizes(sa: str, shape_a: tuple[int, ...], sb: str, shape_b: tuple[int, ...], o: str) -> tuple[int, int, int]:
    """The GEMM sizes (elements) of the step ``sa, sb -> o``: m, the product of the sizes of
    ``a``'s indices not in ``b``; n, of ``b``'s not in ``a``; k, of the shared ones summed (not in
    ``o``). Shared indices kept in ``o`` are the batch and count in none."""
    size = dict(zip(sa, shape_a, strict=True)) | dict(zip(sb, shape_b, strict=True))
    m = math.prod(size[c] for c in sa if c not in sb)
    n = math.prod(size[c] for c in sb if c not in sa)
    k = math.prod(size[c] for c in sa if c in sb and c not in o)
    return m, n, k


#: 3M on a step with a batch index (shared and kept) runs in blocks of whole batch planes, each
#: block's planar parts at most this many bytes (at least one plane): small temporaries are
#: reused from the allocator and stay in cache instead of faulting in fresh pages (complex128
#: 'bij,bjk->bik' at 16x256: 72 ms in one block, 46-50 ms in blocks of 0.5-2 MiB)
GAUSS_BLOCK_BYTES = 1 << 20


def gauss_3m(
    a: tuple[str, np.ndarray], b: tuple[str, np.ndarray], o: str, call: RealEinsum, steps: list[str] | None = None
) -> np.ndarray:
    """The complex step ``a, b -> o`` (index strings and complex arrays) as three real einsums
    ``sa, sb -> o`` on planar (C-order copies of the) parts: T1 = re.re, T2 = im.im,
    T3 = (re + im).(re + im); then re = T1 - T2 and im = (T3 - T1) - T2, written into the
    complex result's real and imaginary views (C order). A batch index (in both and in ``o``)
    splits the step into blocks of `GAUSS_BLOCK_BYTES` per planar part. Error
    (docs/decisions.md): re within gamma_{k+1} (|re||re| + |im||im|), im within gamma_{k+4}
    ((|re|+|im|)(|re|+|im|) + |re||re| + |im||im|), k the summed length."""
    (sa, xa), (sb, xb) = a, b
    subs = f"{sa},{sb}->{o}"
    if steps is not None:  # explain: the three products on the parts' views, nothing combined
        steps.extend(f"{subs}  (3M: {what})" for what in ("re.re", "im.im", "(re+im).(re+im)"))
        t1 = call(subs, xa.real, xb.real)
        return np.zeros(t1.shape, xa.dtype)
    size = dict(zip(sa, xa.shape, strict=True)) | dict(zip(sb, xb.shape, strict=True))
    res = np.empty([size[c] for c in o], xa.dtype)
    batch = [c for c in o if c in sa and c in sb]
    if not batch or res.size == 0:
        _gauss_block(xa, xb, subs, call, res)
        return res
    c = batch[0]  # the outermost batch index of the result
    planar = max(xa.size, xb.size, res.size) * xa.real.itemsize
    per = max(1, (GAUSS_BLOCK_BYTES * size[c]) // max(planar, 1))
    for lo in range(0, size[c], per):
        cut = slice(lo, lo + per)
        _gauss_block(_cut(xa, sa, c, cut), _cut(xb, sb, c, cut), subs, call, _cut(res, o, c, cut))
    return res


def _cut(x: np.ndarray, sub: str, c: str, cut: slice) -> np.ndarray:
    """``x`` (indices ``sub``) sliced by ``cut`` along index ``c``: a view."""
    return x[(slice(None),) * sub.index(c) + (cut,)]


def _gauss_block(xa: np.ndarray, xb: np.ndarray, subs: str, call: RealEinsum, out: np.ndarray) -> None:
    """3M of ``subs`` on complex ``xa``, ``xb`` into the complex view ``out`` (`gauss_3m`)."""
    ar, ai = np.ascontiguousarray(xa.real), np.ascontiguousarray(xa.imag)
    br, bi = np.ascontiguousarray(xb.real), np.ascontiguousarray(xb.imag)
    t1 = np.asarray(call(subs, ar, br))
    t2 = np.asarray(call(subs, ai, bi))
    np.add(ar, ai, out=ar)  # the parts are not needed again: their sums in place
    np.add(br, bi, out=br)
    t3 = np.asarray(call(subs, ar, br))
    np.subtract(t1, t2, out=out.real)
    np.subtract(t3, t1, out=t3)
    np.subtract(t3, t2, out=out.imag)


def _mid(ndim: int, k: int) -> list[int]:
    """The axis order ``..., r, ..., s`` of `expand_4m` from an array with ``r, s`` last."""
    return [*range(k), ndim, *range(k, ndim), ndim + 1]


def _complex(res: Any, like: np.ndarray) -> np.ndarray:
    """A real C-order result with (re, im) on its last axis as a complex array of ``like``'s dtype."""
    res = np.ascontiguousarray(res)
    return res.view(like.dtype)[..., 0]


def complex_contract(
    inputs: Sequence[str],
    output: str,
    arrays: Sequence[np.ndarray],
    path: Sequence[tuple[int, int]],
    call: RealEinsum,
    steps: list[str] | None = None,
) -> np.ndarray:
    """``inputs -> output`` (explicit index strings, no repeats within an operand) over complex
    and real operands of one precision, pairwise along ``path`` (numpy's convention), each step
    one real einsum through ``call`` (`_pair`); ``steps`` collects the real subscripts."""
    ops = list(zip(inputs, arrays, strict=True))
    for n, (i, j) in enumerate(path):
        i, j = sorted((i, j))
        b, a = ops.pop(j), ops.pop(i)
        if n == len(path) - 1 and not ops:
            o = output
        else:
            need = set(output).union(*(s for s, _ in ops))
            o = "".join(c for c in dict.fromkeys(a[0] + b[0]) if c in need)
        ops.append((o, _pair(a, b, o, call, steps)))
    ((sub, x),) = ops
    if path:  # the last step wrote the output
        return x
    if x.dtype.kind != "c":  # one real operand (a complex dtype= asked for)
        subs = f"{sub}->{output}"
        if steps is not None:
            steps.append(subs)
        return call(subs, x)
    r = _fresh(sub + output, 1)
    subs = f"{sub}{r}->{output}{r}"
    if steps is not None:
        steps.append(subs)
    return _complex(call(subs, as_real(x)), x)


def run(
    r: Route, subscripts: str, arrays: Sequence[np.ndarray], optimize: Any, call: RealEinsum, steps: list | None = None
) -> np.ndarray:
    """The call's C-order result of numpy's result dtype ``r.result``: ``subscripts`` (canonical,
    `minijit.einsum.grammar.canonicalize`) over numpy ``arrays``, on the compiled real/integer
    einsum ``call(subscripts, *arrays, optimize=...)``. ``steps`` collects the real subscripts."""
    wide = [widen(x, r) for x in arrays]
    if r.kind != "complex":
        if steps is not None:
            steps.append(subscripts)
        return narrow(call(subscripts, *wide, optimize=optimize), r)
    from minijit.einsum.api import contract_path  # noqa: PLC0415 - the planner loads on first use
    from minijit.einsum.parse import expand_subscripts  # noqa: PLC0415

    inputs, output = expand_subscripts(subscripts, tuple(x.ndim for x in wide))
    if len(wide) <= 2 and not isinstance(optimize, list):  # one step or none: no search
        path = [(0, 1)] if len(wide) == 2 else []
    else:  # minijit's path for the expression (an explicit one checked)
        path, _ = contract_path(subscripts, *[x.shape for x in wide], optimize=optimize, itemsize=r.result.itemsize)

    def pairwise(subs: str, *xs: np.ndarray) -> np.ndarray:
        return call(subs, *xs, optimize=True)

    res = complex_contract(inputs, output, wide, path, pairwise, steps)
    return res.astype(r.result, copy=False) if res.dtype != r.result else res


def explain(r: Route, subscripts: str, arrays: Sequence[np.ndarray], optimize: Any, call: RealEinsum) -> str:
    """``"minijit compiled: <the route in words>"`` and the real einsums it runs, one per line,
    then the compiled plan's listing for the widened call (not "complex": one plan per step).
    Nothing is computed: the operands' shapes stand in for them."""
    steps: list[str] = []
    if r.kind != "complex":
        stand_ins = [_stand_in(x.shape, r.compute) for x in arrays]
        listing = call(subscripts, *stand_ins, optimize=optimize, explain=True)
        return f"minijit compiled: {r.describe()}\n  {r.compute} einsum {subscripts}\n{listing}"
    stand_ins = [_stand_in(x.shape, r.result if x.dtype.kind == "c" else r.compute) for x in arrays]

    def shapes_only(subs: str, *xs: np.ndarray, optimize: Any = True) -> np.ndarray:
        lhs, out = subs.split("->")
        sizes: dict[str, int] = {}
        for sub, x in zip(lhs.split(","), xs, strict=True):
            for c, n in zip(sub, x.shape, strict=True):
                sizes[c] = max(sizes.get(c, 1), n)
        return np.zeros([sizes[c] for c in out], r.compute)

    run(r, subscripts, stand_ins, optimize, shapes_only, steps)
    head = r.describe()
    if any("(3M:" in s for s in steps):  # a step large enough for 3M (`GAUSS_MIN`)
        head = f"{r.result} via 3M on {r.compute} kernels"
        if any("(4M:" in s for s in steps):
            head += " (the smaller steps via the real 4M formulation)"
    return "\n".join([f"minijit compiled: {head}"] + [f"  {r.compute} einsum {s}" for s in steps])


def _stand_in(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A read-only array of ``shape`` and ``dtype`` over one element (zero strides)."""
    return np.broadcast_to(np.zeros((), dtype), shape)
