"""SVE idioms of the vector-length agnostic kernels: counted loops of whole steps, ``whilelt``
remainders, strided copies through vector offsets, software-pipelined load/FMA streams, and
`column_sweep`, an element-wise op down every column (the unary and binary kernels).

The element counts are run-time values (``cntw``/``cntd`` elements a vector), so a loop counts
elements down and the remainder is predicated: nothing outside the operands is read or written
at any vector length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from asm.aarch64 import Assembler, P, Z, mem, x8, x9, x10, x11
from asm.aarch64.registers import XReg
from minijit.kernels.aarch64.common import DType

__all__ = ["MIN_VL_BITS", "TAIL_P", "column_sweep", "counted", "max_vectors", "remainder", "stream", "strided_copy"]

XZR = XReg(31)  # whilelt from 0
TAIL_P = tuple(P[1:8])  # remainder predicates (rotating; loads and stores take p0..p7)
MIN_VL_BITS = 128  # the narrowest SVE vector: bounds the vectors a given count can need


def max_vectors(m: int, t: DType) -> int:
    """Vectors of ``m`` elements a step can need: at 128 bits at most ceil(m / lanes), capped at 4."""
    lanes = MIN_VL_BITS // (8 * t.size)
    return min(4, -(-m // lanes))


def counted(
    a: Assembler, t: DType, cnt: XReg, step: XReg, count: int, vectors: int, body: Callable[[], None], name: str
) -> None:
    """``cnt`` = ``count`` elements; ``body`` (a step of ``vectors`` vectors, ``step`` elements)
    while whole steps fit (a loop labelled ``name``, emitted when one fits at 128 bits), then
    ``cnt`` = the elements left."""
    a.mov(cnt, count)
    if count < vectors * t.lanes:
        return
    rest = a.new_label(name + "_rest")
    a.subs(cnt, cnt, step)
    a.b_lt(rest)
    top = a.label(name)
    body()
    a.subs(cnt, cnt, step)
    a.b_ge(top)
    a.bind(rest)
    a.add(cnt, cnt, step)


def remainder(a: Assembler, t: DType, cnt: XReg, count: int, vectors: int, body: Callable[[int, Any], None]) -> None:
    """The ``cnt`` elements left (fewer than ``vectors`` vectors of at most ``count``):
    ``body(v, pred)`` for vector v under ``whilelt`` (``cnt`` counts down by the vector length),
    ending at the first empty one."""
    done = a.new_label("rem_done")
    used = min(vectors, -(-count // t.lanes))  # at 128 bits ``count`` fills at most this many
    for v in range(used):
        pred = TAIL_P[v % len(TAIL_P)]
        a.whilelt(getattr(pred, t.es), XZR, cnt)
        a.b_none(done)
        body(v, pred)
        if v + 1 < used:
            getattr(a, "dec" + t.suffix)(cnt)
    a.bind(done)


def strided_copy(
    a: Assembler,
    t: DType,
    strided: XReg,
    stride: XReg,
    buf: XReg,
    count: int,
    gather: bool,
    scratch: tuple[XReg, XReg, XReg, XReg],
) -> None:
    """``count`` elements between ``strided`` (``stride`` bytes apart) and the contiguous ``buf``:
    into ``buf`` (``gather``) or back. 64-bit lanes (ld1w/st1w widen fp32 to them), a vector offset
    of lane x stride (any int64 stride), ``cntd`` elements a step; uses z0, z1, p1 and the four
    ``scratch`` registers (walking pointer, its step, element index, count)."""
    ptr, span, idx, total = scratch
    data, offs, pred = Z[0].d, Z[1].d, P[1]
    a.index(offs, 0, stride)
    a.cntd(span)
    a.mul(span, span, stride)  # bytes per step of the strided run
    a.mov(ptr, strided)
    a.mov(idx, 0)
    a.mov(total, count)
    done = a.new_label("copy_done")
    top = a.label("copy")
    a.whilelt(pred.d, idx, total)
    a.b_none(done)
    near = mem(buf, idx, "lsl", t.shift)
    if gather:
        t.ld1(a, data, pred.z, mem(ptr, offs))
        t.st1(a, data, pred, near)
    else:
        t.ld1(a, data, pred.z, near)
        t.st1(a, data, pred, mem(ptr, offs))
    a.add(ptr, ptr, span)
    a.incd(idx)
    a.b(top)
    a.bind(done)


def stream(a: Assembler, t: DType, units: list[tuple], pool: tuple[int, ...], advance: int) -> None:
    """Loads and their FMAs, software pipelined. A unit ``(pointer, v, acc, mul)`` is the load of
    vector v at ``pointer`` and ``z<acc> += it x z<mul>``; a pointer moves on by ``advance`` vectors
    after its last load. Loads run ``len(pool) - 1`` units ahead of their FMAs, unit i in
    ``z<pool[i % len(pool)]>``."""
    ahead = len(pool) - 1
    last = {u[0].idx: i for i, u in enumerate(units)}
    for i in range(len(units) + ahead):
        if i < len(units):
            ptr, v = units[i][:2]
            t.ld1(a, t.z(pool[i % len(pool)]), P[0].z, mem(ptr, vl=v))
            if last[ptr.idx] == i:
                a.addvl(ptr, ptr, advance)
        j = i - ahead
        if j >= 0:
            _, _, acc, mul = units[j]
            a.fmla(t.z(acc), P[0].m, t.z(pool[j % len(pool)]), t.z(mul))


I, M_REG, COUNT, TMP = x8, x9, x10, x11  # `column_sweep`: row offset (elements), rows, columns left, scratch


def column_sweep(
    a: Assembler,
    t: DType,
    rows: int,
    cols: int,
    columns: Sequence[tuple[XReg, XReg, XReg]],
    step: Callable[[int], None],
) -> None:
    """Column by column, up to 4 predicated vectors (p1..p4) of ``rows`` per step.

    ``columns``: (column pointer, byte stride, walker) per matrix; each step sets the walker to
    the column pointer + I elements, each column moves the pointer by the stride. ``step(nv)``
    loads, transforms and stores the ``nv`` vectors at the walkers.
    """
    nv = max_vectors(rows, t)
    preds = [getattr(P[v + 1], t.es) for v in range(nv)]
    a.mov(M_REG, rows)
    a.mov(COUNT, cols)
    col = a.label("col")
    a.mov(I, 0)
    row = a.label("row")
    end = a.new_label("col_end")
    # predicates of the nv vectors at I; none active: column done
    a.whilelt(preds[0], I, M_REG)
    a.b_none(end)
    for v in range(1, nv):
        if v == 1:
            a.mov(TMP, I)
        t.inc(a, TMP)
        a.whilelt(preds[v], TMP, M_REG)
    for base, _, walker in columns:
        a.add(walker, base, I, "lsl", t.shift)
    step(nv)
    t.inc(a, I, nv)
    a.b(row)
    a.bind(end)
    for base, stride, _ in columns:  # next column
        a.add(base, base, stride)
    a.subs(COUNT, COUNT, 1)
    a.b_ne(col)
