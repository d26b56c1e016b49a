"""The generic tier of `minijit.einsum`: a contraction of two operands that is one (batched) GEMM
runs at once on the generic GEMM kernel of its ISA and dtype (`minijit.kernels.generic`: sizes
and strides at run time), so a new shape costs planning, not code generation. A plan executed
long enough to pay for code generation (`jit.due`), or one whose work dwarfs it, has its shape-specialised
`EinsumPlan` built by one background thread (`minijit.jit`), which puts it in the plan cache;
from then on `einsum` finds the specialised plan first. Results are identical: both tiers
compute each output element as one FMA chain over K in order.

What the generic tier takes (else `plan_for` returns None and `einsum` builds the specialised
plan at once): two operands of one dtype (float32/float64) and that result dtype, each subscript
letter at most once per operand, every letter of an input in the output or in both inputs, at most
one letter of size > 1 in each of the batch, M, N and K groups, element strides, and a C-order
result. The M letter must have unit stride in its operand and in the result; where no letter
has, the operand of the result's unit-stride letter is copied with that letter last (A times B
transposed, F-order operands). At least two columns (N > 1): a GEMV is the specialised tier's.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from minijit import jit, limits
from minijit.cache import LRUCache
from minijit.kernels import generic as spec

__all__ = ["GenericPlan", "plan_for"]

#: generic plans kept (each a few hundred bytes)
CACHE_SIZE = 4096
_PLANS = LRUCache(lambda: CACHE_SIZE, name="einsum.generic")
#: the args arrays' element order, as indices
_I = {name: i for i, name in enumerate(spec.ARGS)}


@dataclass(frozen=True)
class Roles:
    """Which letter plays which part: ``swap`` (the kernel's A is operand 1), the letters of M, N,
    K and the batch (None: that group is empty), per operand."""

    swap: bool
    m: str | None
    n: str | None
    k: str | None
    batch: str | None


@functools.lru_cache(maxsize=1024)
def _groups(
    subscripts: str,
) -> tuple[str, str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
    """(in0, in1, out, batch, only0, only1, contracted) letters of explicit two-operand
    ``subscripts``, or None where the generic tier does not take the expression."""
    lhs, arrow, out = subscripts.partition("->")
    ins = lhs.split(",")
    if not arrow or len(ins) != 2 or "." in subscripts:
        return None
    s0, s1 = ins
    if any(len(set(s)) != len(s) for s in (s0, s1, out)) or set(out) - set(s0) - set(s1):
        return None
    batch = tuple(c for c in out if c in s0 and c in s1)
    only0 = tuple(c for c in out if c in s0 and c not in s1)
    only1 = tuple(c for c in out if c in s1 and c not in s0)
    contracted = tuple(c for c in s0 if c in s1 and c not in out)
    if any(c not in out and c not in s1 for c in s0) or any(c not in out and c not in s0 for c in s1):
        return None  # a letter summed within one operand
    return s0, s1, out, batch, only0, only1, contracted


def _one(letters: tuple[str, ...], sizes: dict[str, int]) -> tuple[bool, str | None]:
    """(ok, the letter of size > 1 or None): at most one letter of the group is larger than 1."""
    big = [c for c in letters if sizes[c] != 1]
    return (len(big) <= 1, big[0] if big else None)


@dataclass(frozen=True, eq=False)
class GenericPlan:
    """A contraction on the generic GEMM kernel: the roles, the result shape, the args template
    (sizes and strides in elements), and how often it ran (``calls``)."""

    key: tuple
    dtype: np.dtype
    out_shape: tuple[int, ...]
    roles: Roles
    args: np.ndarray
    flops: int
    #: (operand, axis order) of an operand copied into C order with its M letter last, or None
    copy: tuple[int, tuple[int, ...]] | None = None
    _calls: itertools.count = field(default_factory=itertools.count, repr=False)
    _seconds: list[float] = field(default_factory=lambda: [0.0], repr=False)  # kernel seconds, all calls
    _queued: threading.Event = field(default_factory=threading.Event, repr=False)

    def execute(self, a0: np.ndarray, a1: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """Run on ``a0``, ``a1`` (the shapes and strides of `key`); a fresh C-order result, or
        ``out`` (C-contiguous, the result's shape and dtype: checked by `usable_out`)."""
        if out is None:
            out = np.empty(self.out_shape, self.dtype)
        if out.size:
            if self.copy is not None:  # the operand whose M letter runs down the result, made unit-stride
                op, order = self.copy
                moved = np.ascontiguousarray((a0, a1)[op].transpose(order))
                a0, a1 = (moved, a1) if op == 0 else (a0, moved)
            ka, kb = (a1, a0) if self.roles.swap else (a0, a1)
            fn = jit.generic_kernel(self.dtype)
            start = time.perf_counter()
            fn(ka.ctypes.data, kb.ctypes.data, out.ctypes.data, self.args.ctypes.data)
            # kernel seconds so far (a race between threads may lose an addition: an estimate)
            self._seconds[0] += time.perf_counter() - start
        return out

    def note_call(self, build) -> None:
        """Count a call; once `jit.due` says the kernel time spent here would have paid for code
        generation (or at once for large work), queue ``build`` (which makes and caches the
        specialised plan) on the background thread, once."""
        next(self._calls)
        if self._queued.is_set():
            return
        if jit.due(self.flops, self._seconds[0]):
            self._queued.set()
            jit.specialise(build)


def usable_out(out: np.ndarray | None, plan: GenericPlan) -> bool:
    """Whether the generic tier can write ``out`` (None: it allocates): C-contiguous, the result's
    shape and dtype, writable (`minijit.einsum` has already routed an ``out`` that overlaps an
    operand through a buffer)."""
    if out is None:
        return True
    return (
        type(out) is np.ndarray
        and out.dtype == plan.dtype
        and out.shape == plan.out_shape
        and out.flags.c_contiguous
        and out.flags.writeable
    )


def plan_for(subscripts: str, arrays: list[np.ndarray], dtype: np.dtype, key: tuple) -> GenericPlan | None:
    """The generic plan of explicit ``subscripts`` on ``arrays`` with result ``dtype`` (cached by
    ``key``, which fixes the shapes and strides), or None where the generic tier does not apply."""
    plan = _PLANS.get(key)
    if plan is None:
        plan = _build(subscripts, arrays, dtype, key)
        if plan is None:
            return None
        _PLANS.put(key, plan)
    return plan


def _strides(x: np.ndarray) -> tuple[int, ...] | None:
    """Element strides of ``x`` (None where a byte stride is not a multiple of the item size)."""
    item = x.itemsize
    out = []
    for s in x.strides:
        if s % item:
            return None
        out.append(s // item)
    return tuple(out)


def _build(subscripts: str, arrays: list[np.ndarray], dtype: np.dtype, key: tuple) -> GenericPlan | None:
    if len(arrays) != 2 or dtype not in (np.float32, np.float64):
        return None
    if any(x.dtype != dtype for x in arrays):
        return None
    groups = _groups(subscripts)
    if groups is None:
        return None
    s0, s1, out, batch, only0, only1, contracted = groups
    x0, x1 = arrays
    if x0.ndim != len(s0) or x1.ndim != len(s1):
        return None
    sizes: dict[str, int] = {}
    for s, x in ((s0, x0), (s1, x1)):
        for c, n in zip(s, x.shape, strict=True):
            if sizes.setdefault(c, n) != n:
                return None  # numpy's broadcasting of size-1 letters: the specialised path
    st = [_strides(x0), _strides(x1)]
    if st[0] is None or st[1] is None:
        return None
    picks = [_one(g, sizes) for g in (batch, only0, only1, contracted)]
    if not all(ok for ok, _ in picks):
        return None
    b, f0, f1, kk = (c for _, c in picks)
    out_shape = tuple(sizes[c] for c in out)
    # the bound the specialised plan checks too, before any allocation
    limits.check_alloc(math.prod(out_shape) * np.dtype(dtype).itemsize, f"einsum result {out_shape}")
    out_strides = {c: int(np.prod(out_shape[i + 1 :], dtype=np.int64)) for i, c in enumerate(out)}
    stride = [dict(zip(s, t, strict=True)) for s, t in ((s0, st[0]), (s1, st[1]))]

    def unit(letter: str | None, op: int) -> bool:
        return letter is None or (stride[op][letter] == 1 and out_strides[letter] == 1)

    copy = None
    if f0 is not None and unit(f0, 0):
        roles = Roles(False, f0, f1, kk, b)
    elif f1 is not None and unit(f1, 1):
        roles = Roles(True, f1, f0, kk, b)
    elif out and out[-1] in (f0, f1):
        # no letter runs down both an operand and the result (A times B transposed, F-order
        # operands): copy the operand of the result's unit-stride letter with that letter last
        op = 0 if out[-1] == f0 else 1
        s_op = (s0, s1)[op]
        order = tuple(i for i, c in enumerate(s_op) if c != out[-1]) + (s_op.index(out[-1]),)
        copy = (op, order)
        moved = "".join(s_op[i] for i in order)
        shape = tuple(sizes[c] for c in moved)
        stride[op] = {c: int(np.prod(shape[i + 1 :], dtype=np.int64)) for i, c in enumerate(moved)}
        roles = Roles(op == 1, out[-1], f1 if op == 0 else f0, kk, b)
    else:
        return None
    if roles.n is None:
        # one column: the specialised plan runs the GEMV kernel, which may reduce a transposed
        # matrix across vector lanes (another rounding order): not generic
        return None
    ka, kb = (1, 0) if roles.swap else (0, 1)

    def size(c: str | None) -> int:
        return 1 if c is None else sizes[c]

    def st_of(op: int, c: str | None) -> int:
        return 0 if c is None else stride[op][c]

    args = spec.pack_args(
        m=size(roles.m),
        n=size(roles.n),
        k=size(roles.k),
        lda=st_of(ka, roles.k),
        ldb_k=st_of(kb, roles.k),
        ldb_n=st_of(kb, roles.n),
        ldc=0 if roles.n is None else out_strides[roles.n],
        batch=size(roles.batch),
        batch_a=st_of(ka, roles.batch),
        batch_b=st_of(kb, roles.batch),
        batch_c=0 if roles.batch is None else out_strides[roles.batch],
        accumulate=0,
    )
    flops = 2 * size(roles.m) * size(roles.n) * size(roles.k) * size(roles.batch)
    return GenericPlan(key, np.dtype(dtype), out_shape, roles, args, flops, copy)
