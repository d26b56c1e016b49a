"""The CPU einsum plan's nodes: a lowered contraction tree (`minijit.einsum.lowering`) made
`TensorOperation` nodes (``make_op`` asks the CPU target for each one, `minijit.einsum.plan.cached_op`).

Every tensor of a plan is C-contiguous in its own index order (the last index has unit stride).
Node kinds:

* ``contract``: a GEMM/BRGEMM `TensorOperation` (dim types c/m/n/k from where an index occurs, exec
  types undefined so the optimizer fuses, splits, picks the primitive and the shared loops);
  first touch ``zero`` overwrites the node's result.
* ``reduce``: indices that occur in one tensor only and not in its result are summed out by a
  contraction with a ones tensor (a GEMV through the same kernels).
* ``permute``: the unary ``copy`` primitive (a transposing copy) where a layout must change.
* ``multiply``: a product without summed indices whose result has a batch index innermost runs
  on the binary ``mul`` primitive (broadcasting through stride 0) instead of 1-wide GEMM blocks;
  batched dot products (only batch and summed indices) multiply, then reduce with a GEMV.

Intermediate layouts are chosen top-down (einsum_ir's approach): the result's order is fixed; each
child is laid out with the batch (c) indices outermost, then so that the kernel reads it without
transposition (in0 = the operand holding the result's unit-stride index, as ``[c, k, m]``; in1
as ``[c, n, k]``), with the child's own batch indices kept away from its innermost position.
When a configuration is still rejected (`SetupError`), the node falls back to canonical layouts
through permute nodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minijit.einsum import blocked as _blocked
from minijit.einsum.dtypes import COMPILED
from minijit.errors import SetupError
from minijit.tensor_operation import PARALLEL_MIN_ELEMENTS

__all__ = ["SMALL_GEMM_FLOPS", "Step"]

#: a BRGEMM kernel name of one column (``..._<m>x1x<k>_...``)
_ONE_COLUMN = re.compile(r"_\d+x1x\d+_")

_DTYPES = COMPILED  # float32/float64 and the integer dtypes, minijit names
#: contraction and multiply nodes below this many flops run on one thread; a plan's ``num_threads``
#: is the most any node uses. It matches `minijit.tensor_operation.PARALLEL_MIN_ELEMENTS` (2^20
#: multiply-adds), under which an operation runs on the calling thread anyway
#: (bench/results/model_constants_measurements.md)
SMALL_GEMM_FLOPS = 2 * PARALLEL_MIN_ELEMENTS


def _strides(ids: tuple[str, ...], sizes: dict[str, int]) -> dict[str, int]:
    out, s = {}, 1
    for c in reversed(ids):
        out[c] = s
        s *= sizes[c]
    return out


@dataclass
class Step:
    kind: str  # contract | reduce | permute | multiply
    op: Any
    slots: tuple[int, int | None, int]  # in0, in1 (None: none; -1: the node's ones), out
    ids: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
    ones: np.ndarray | None = None

    def describe(self, sizes: dict[str, int], names=None) -> str:
        a, b, o = ("".join(x) for x in self.ids)
        expr = f"{a},{b}->{o}" if self.kind != "permute" else f"{a}->{o}"
        n = math.prod(sizes[c] for c in self.ids[2])
        text = f"{self.kind} {expr}: flops {self.op.config.flops()}, result {n} elements"
        if names is not None:
            s0, s1, so = self.slots
            args = [names(s0)] + ([] if s1 is None else [names(s1)])
            text = f"{names(so)} = {self.kind}({', '.join(args)}) {expr}: flops {self.op.config.flops()}"
            text += f", result {n} elements"
        return text


@dataclass
class _Builder:
    dtype: np.dtype
    target: str
    num_threads: int | None
    sizes: dict[str, int]
    steps: list[Step] = field(default_factory=list)
    shapes: list[tuple[str, ...] | None] = field(default_factory=list)  # per slot: ids (None: input/output)
    #: input slots read in place through a strided view: slot -> (its ids, element stride per index)
    views: dict[int, tuple[tuple[str, ...], dict[str, int]]] = field(default_factory=dict)
    #: ``make_op(target, num_threads, *setup_args)``: a set-up operation (shared by configuration)
    make_op: Callable[..., Any] | None = None

    def strides_of(self, slot: int | None, ids) -> dict[str, int]:
        """Element strides of tensor ``ids`` in ``slot``: a view's own strides when ``slot`` is a
        strided input read in its own index order, else C order."""
        view = self.views.get(slot) if slot is not None else None
        if view is not None and view[0] == tuple(ids):
            return view[1]
        return _strides(tuple(ids), self.sizes)

    def new_slot(self, ids: tuple[str, ...]) -> int:
        self.shapes.append(ids)
        return len(self.shapes) - 1

    def _op(self, main: str, types, st0, st1, sto, dims):
        sizes = [self.sizes[c] for c in dims]
        exec_types = ["undefined"] * len(dims)
        first = "zero" if main == "gemm" else "none"
        threads = self.num_threads
        if main in ("gemm", "mul") and 2 * math.prod(sizes) < SMALL_GEMM_FLOPS:
            threads = 1
        return self.make_op(
            self.target, threads, _DTYPES[self.dtype], first, main, "none", types, exec_types, sizes,
            st0, st1, sto,
        )  # fmt: skip

    # -- node kinds ----------------------------------------------------------------------------
    def permute(self, slot: int, ids, out_ids, out_slot: int | None = None) -> int:
        ids, out_ids = tuple(ids), tuple(out_ids)
        for st in self.steps:  # a permute of a permute reads the original (the first one dies)
            if st.kind == "permute" and st.slots[2] == slot:
                slot, ids = st.slots[0], st.ids[0]
                break
        if ids == out_ids and out_slot is None:
            return slot
        if out_slot is None:
            out_slot = self.new_slot(out_ids)
        s0, so = self.strides_of(slot, ids), _strides(out_ids, self.sizes)
        dims = list(out_ids)
        op = self._op("copy", ["c"] * len(dims), [s0[c] for c in dims], [0] * len(dims), [so[c] for c in dims], dims)
        self.steps.append(Step("permute", op, (slot, None, out_slot), (ids, (), out_ids)))
        return out_slot

    def _gemm(self, a_ids, b_ids, o_ids, slot_a: int | None = None, slot_b: int | None = None):
        """The GEMM node ``o = a · b`` (all C order, except inputs read in place from a view slot)."""
        a, b, o = set(a_ids), set(b_ids), set(o_ids)
        sa, sb, so = self.strides_of(slot_a, a_ids), self.strides_of(slot_b, b_ids), _strides(o_ids, self.sizes)
        dims = list(o_ids) + [c for c in a_ids if c not in o] + [c for c in b_ids if c not in o and c not in a]
        types = []
        for c in dims:
            if c in a and c in b:
                types.append("c" if c in o else "k")
            elif c in o:
                types.append("m" if c in a else "n")
            else:
                raise AssertionError(f"index {c} in one operand only")
        return self._op(
            "gemm", types, [sa.get(c, 0) for c in dims], [sb.get(c, 0) for c in dims], [so.get(c, 0) for c in dims],
            dims,
        )  # fmt: skip

    def _reads_transposed_a(self, a_ids, b_ids, out_ids, ks, slot_a: int, slot_b: int) -> bool:
        """True when A has a summed index innermost (transposed) and the GEMM node reads it well as
        it is: it packs A anyway (its packing copy absorbs the transpose, so a permute node first
        would copy A twice), or it runs a GEMV kernel (one column, x86-64 ``gemv_``, AArch64
        ``neon_gemv_`` / ``sve_gemv_``: it streams a transposed A row by row, and a permute would
        copy the whole A to save nothing), or, for integers, one column of the transposed BRGEMM
        (``..._<m>x1x<k>_..._ta``: a dot product per row)."""
        if not ks or a_ids[-1] not in ks:
            return False
        try:
            op = self._gemm(a_ids, b_ids, out_ids, slot_a, slot_b)
        except SetupError:
            return False
        main = getattr(op, "primitives", {}).get("main")
        name = getattr(main, "name", "")
        # integers: one column with A transposed is the scalar kernel's dot products of A's rows
        # (unrolled: faster than a copy of A and 1-wide vector blocks)
        int_dots = self.dtype.kind == "i" and "_ta" in name and _ONE_COLUMN.search(name) is not None
        return "in0" in getattr(op, "packed_operands", ()) or "gemv_" in name or int_dots

    def _multiply(self, sa: int, a_ids, sb: int, b_ids, out_ids, out_slot: int | None) -> int | None:
        """``out = a * b`` (no summed index) with the result's unit-stride index, which both operands
        hold, innermost in all three (the binary kernel's rule); None when setup refuses it."""
        x = out_ids[-1]
        ta = tuple(c for c in a_ids if c != x) + (x,)
        tb = tuple(c for c in b_ids if c != x) + (x,)
        s0, s1, so = self.strides_of(sa, ta), self.strides_of(sb, tb), _strides(out_ids, self.sizes)
        dims = list(out_ids)
        try:
            op = self._op(
                "mul", ["c"] * len(dims), [s0.get(c, 0) for c in dims], [s1.get(c, 0) for c in dims],
                [so[c] for c in dims], dims,
            )  # fmt: skip
        except SetupError:
            return None
        xa = sa if ta == a_ids else self.permute(sa, a_ids, ta)
        xb = sb if tb == b_ids else self.permute(sb, b_ids, tb)
        xo = out_slot if out_slot is not None else self.new_slot(out_ids)
        self.steps.append(Step("multiply", op, (xa, xb, xo), (ta, tb, out_ids)))
        return xo

    def reduce(self, slot: int, ids, drop, out_slot: int | None = None, order=None) -> tuple[int, tuple[str, ...]]:
        """Sum ``drop`` out of tensor ``ids``; the result in ``order`` (default: ``ids`` without ``drop``).
        A long sum (a C-order tensor, not a view) runs in levels of short chains (`minijit.einsum.blocked`)."""
        ids = tuple(ids)
        out_ids = tuple(order) if order is not None else tuple(c for c in ids if c not in drop)
        # integers wrap exactly in any order: one chain
        flat = slot in self.views or self.dtype.kind == "i"
        cut = None if flat else _blocked.levels(ids, set(drop), self.sizes)
        if cut is not None:  # the same memory, its summed indices as factors; one node per level
            ids, new_sizes, stages = cut
            self.sizes.update(new_sizes)
            for stage in stages[:-1]:
                slot, ids = self._reduce(slot, ids, stage)
            drop = stages[-1]
        return self._reduce(slot, ids, drop, out_slot, out_ids)

    def _reduce(self, slot: int, ids, drop, out_slot: int | None = None, order=None) -> tuple[int, tuple[str, ...]]:
        """One reduce node: ``drop`` summed out of tensor ``ids`` in one chain per result element."""
        ids = tuple(ids)
        out_ids = tuple(order) if order is not None else tuple(c for c in ids if c not in drop)
        red = tuple(c for c in ids if c in drop)
        if out_slot is None:
            out_slot = self.new_slot(out_ids)
        ones = np.ones(math.prod(self.sizes[c] for c in red), self.dtype)
        if ids[-1] in drop and out_ids:  # summed index innermost: ones as A (M = 1), the tensor as B (K unit)
            try:
                op = self._gemm(red, ids, out_ids, None, slot)
                self.steps.append(Step("reduce", op, (-1, slot, out_slot), (red, ids, out_ids), ones))
                return out_slot, out_ids
            except SetupError:
                pass
        op = self._gemm(ids, red, out_ids, slot, None)
        self.steps.append(Step("reduce", op, (slot, -1, out_slot), (ids, red, out_ids), ones))
        return out_slot, out_ids

    def contract(self, sa: int, a_ids, sb: int, b_ids, out_ids, out_slot: int | None = None) -> int:
        """Steps computing tensor ``out_ids`` (C order) from tensors in slots ``sa``/``sb``."""
        a_ids, b_ids, out_ids = tuple(a_ids), tuple(b_ids), tuple(out_ids)
        o = set(out_ids)
        # indices only one operand has and the result drops are summed out first (a reduce node)
        drop_a = [c for c in a_ids if c not in o and c not in b_ids]
        drop_b = [c for c in b_ids if c not in o and c not in a_ids]
        ka = [c for c in a_ids if c not in drop_a]
        kb = [c for c in b_ids if c not in drop_b]
        swap = bool(out_ids) and out_ids[-1] in kb and out_ids[-1] not in ka
        # a batch index innermost in the result leaves the kernel 1-wide blocks: A should hold an M index
        inner_batch = bool(out_ids) and out_ids[-1] in ka and out_ids[-1] in kb
        if inner_batch and not any(c in o and c not in kb for c in ka):
            swap = True
        if swap:
            sa, a_ids, sb, b_ids, drop_a, drop_b, ka, kb = sb, b_ids, sa, a_ids, drop_b, drop_a, kb, ka
        if drop_a:  # write the reduced A with its M indices innermost, as the GEMM reads A fastest
            m_a = [c for c in out_ids if c in ka and c not in kb]
            sa, a_ids = self.reduce(sa, a_ids, drop_a, order=[c for c in ka if c not in m_a] + m_a)
        if drop_b:
            sb, b_ids = self.reduce(sb, b_ids, drop_b, order=kb)
        a, b = set(a_ids), set(b_ids)
        batch = [c for c in out_ids if c in a and c in b]
        ks = [c for c in a_ids if c in b and c not in o]
        m = [c for c in out_ids if c in a and c not in b]
        n = [c for c in out_ids if c in b and c not in a]
        canon_a, canon_b, canon_o = (*batch, *ks, *m), (*batch, *n, *ks), (*batch, *n, *m)
        if inner_batch and not ks:  # a broadcast product: the binary mul kernel along the batch index
            done = self._multiply(sa, a_ids, sb, b_ids, out_ids, out_slot)
            if done is not None:
                return done
        if batch and ks and not m and not n and out_ids[-1] in batch:
            # batched dot products (GEMMs would be 1x1): multiply into [k..., batch...], then sum the
            # k indices out with a GEMV that reads the batch indices at unit stride
            t_ids = (*ks, *out_ids)
            if a_ids[-1] == b_ids[-1]:  # both read along one index: keep A's order, copy neither
                t_ids = a_ids
            t = self._multiply(sa, a_ids, sb, b_ids, t_ids, None)
            if t is not None:
                return self.reduce(t, t_ids, ks, out_slot, order=out_ids)[0]
        tries = []
        if inner_batch and m:  # compute with the batch outermost, then one permute of the result
            tries.append((a_ids if a_ids[-1] in m else canon_a, b_ids, canon_o))
        # A's unit-stride index must be C's (an M index) for the vector kernels: a transposed A, or
        # one whose innermost M index is not C's, that the GEMM does not pack runs on the scalar
        # kernel: copy A with its M indices innermost, in C's order, first
        a_off = bool(m) and (a_ids[-1] not in m or (out_ids[-1] in m and a_ids[-1] != out_ids[-1]))
        if a_off and not self._reads_transposed_a(a_ids, b_ids, out_ids, ks, sa, sb):
            tries.append((tuple(c for c in a_ids if c not in m) + tuple(m), b_ids, out_ids))
        for t in [
            (a_ids, b_ids, out_ids),
            (a_ids, b_ids, canon_o),
            (canon_a, canon_b, out_ids),
            (canon_a, canon_b, canon_o),
        ]:
            if t not in tries:
                tries.append(t)
        err = None
        for ta, tb, to in tries:
            try:
                op = self._gemm(ta, tb, to, sa, sb)
            except SetupError as e:
                err = e
                continue
            xa = sa if ta == a_ids else self.permute(sa, a_ids, ta)
            xb = sb if tb == b_ids else self.permute(sb, b_ids, tb)
            if to == out_ids:
                xo = out_slot if out_slot is not None else self.new_slot(out_ids)
            else:
                xo = self.new_slot(to)
            self.steps.append(Step("contract", op, (xa, xb, xo), (ta, tb, to)))
            if to != out_ids:
                xo = self.permute(xo, to, out_ids, out_slot)
            return xo
        if err is not None:  # every layout refused: the node's own reason (sizes, bounds)
            raise SetupError(err.code, f"einsum node {a_ids},{b_ids}->{out_ids}: {err.message}", dim=err.dim) from err
        raise AssertionError(f"einsum: no layout of {a_ids},{b_ids}->{out_ids} was tried")


def _layout(node, order: tuple[str, ...], ids_of, leaf_order, batch_of, summed_of=None) -> dict[int, tuple[str, ...]]:
    """Top-down order of every internal node of ``node`` (a leaf index or a pair).

    A child that is a GEMM gets its own batch indices away from the innermost position; a child
    without summed indices (a broadcast product for the binary kernel) gets one innermost."""
    result: dict[int, tuple[str, ...]] = {id(node): order}
    if not isinstance(node, tuple):
        return result
    left, right = node
    li, ri = ids_of[id(left)], ids_of[id(right)]
    o = set(order)
    first, second = (right, left) if order and order[-1] in ri and order[-1] not in li else (left, right)
    batch = [c for c in order if c in li and c in ri]
    ks = sorted(c for c in li & ri if c not in o)
    for leaf in (left, right):
        if not isinstance(leaf, tuple):  # a leaf's order is fixed: the other side follows it
            ks = [c for c in leaf_order[leaf] if c in ks]
            break
    for child, role in ((first, 0), (second, 1)):
        if not isinstance(child, tuple):
            continue
        ci = ids_of[id(child)]
        free = [c for c in order if c in ci and c not in batch]
        cb = batch_of[id(child)]
        product = bool(cb) and summed_of is not None and not summed_of.get(id(child))

        def grp(g, cb=cb, product=product):
            inner = [c for c in g if c in cb]
            outer = [c for c in g if c not in cb]
            return outer + inner if product else inner + outer

        pref = grp(batch) + (grp(ks) + grp(free) if role == 0 else grp(free) + grp(ks))
        alt = grp(batch) + (grp(free) + grp(ks) if role == 0 else grp(ks) + grp(free))
        chosen = pref
        if pref and alt and (pref[-1] in cb) != product and (alt[-1] in cb) == product:
            chosen = alt
        sibling = second if role == 0 else first
        if not isinstance(sibling, tuple) and set(leaf_order[sibling]) == set(ci):
            same = list(leaf_order[sibling])  # the indices of a fixed input: matching it copies nothing
            if same and (same[-1] in cb) == product:  # unless that puts a GEMM's batch index innermost
                chosen = same
        result.update(_layout(child, tuple(chosen), ids_of, leaf_order, batch_of, summed_of))
    return result
