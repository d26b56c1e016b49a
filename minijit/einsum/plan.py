"""Einsum plans: a contraction tree whose nodes are `TensorOperation`s, built once and run many times.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minijit.arrays import address as _address
from minijit.cache import LRUCache, ScratchPool
from minijit.einsum import grammar as _grammar
from minijit.einsum import path as _path
from minijit.einsum.parse import _LETTERS, TreeNode, parse_subscripts, parse_tree, tree_subscripts
from minijit.errors import SetupError
from minijit.runtime.device_arrays import device_kind, host_array, host_result, is_torch_tensor, like_input
from minijit.tensor_operation import PARALLEL_MIN_ELEMENTS

__all__ = ["EinsumPlan", "contract_path", "einsum"]

_DTYPES = {np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64"}
#: set-up TensorOperations shared by every plan with that configuration (`cached_op`): at most
#: this many, least recently used out first (plans keep the operations they use alive)
OPS_CACHE_SIZE = 1024
_OPS = LRUCache(lambda: OPS_CACHE_SIZE, name="einsum.operations")
#: contraction and multiply nodes below this many flops run on one thread; a plan's ``num_threads``
#: is the most any node uses. It matches `minijit.tensor_operation.PARALLEL_MIN_ELEMENTS` (2^20
#: multiply-adds), under which an operation runs on the calling thread anyway. Measured on the
#: 2-core Zen 3 host with the native thread team, 2 threads against 1 (same process, alternating):
#: 128^3 GEMM 1.06x, 192^3 1.73x, GEMV 1024^2 1.37x, 2048^2 2.26x, 512^2 0.98x; the bench rows
#: `tucker` 1.47x, `matrix-chain` 1.53x, `tensor-train` 1.02x. (Before the team, with the Python
#: pool's hand-offs, the threshold was 2^25: a 128^3 GEMM took 89 us on one thread, 225 us on two.)
SMALL_GEMM_FLOPS = 2 * PARALLEL_MIN_ELEMENTS


def _check_target(target: str) -> str:
    if not isinstance(target, str):
        raise TypeError(f"einsum: target must be a str, got {type(target).__name__}")
    return target


def _plan_target(target: str) -> str:
    """A CPU plan's target: "auto" (a plan is built from shapes, before any data) is the native CPU."""
    target = _check_target(target)
    return "native" if target == "auto" else target


def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise TypeError(f"einsum: dtype {dt} is not supported (float32 or float64)")
    return dt


def cached_op(target: str, num_threads: int | None, *args: Any):
    """A set-up TensorOperation for ``setup(*args)``, shared by every plan with that configuration."""
    from minijit.tensor_operation import TensorOperation

    key = (target, num_threads, *(tuple(a) if isinstance(a, list) else a for a in args))

    def create() -> TensorOperation:
        op = TensorOperation(target=target, num_threads=num_threads)
        op.setup(*args)
        return op

    return _OPS.get_or_create(key, create)


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
        return cached_op(
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
        copy the whole A to save nothing)."""
        if not ks or a_ids[-1] not in ks:
            return False
        try:
            op = self._gemm(a_ids, b_ids, out_ids, slot_a, slot_b)
        except SetupError:
            return False
        main = getattr(op, "primitives", {}).get("main")
        return "in0" in getattr(op, "packed_operands", ()) or "gemv_" in getattr(main, "name", "")

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
        """Sum ``drop`` out of tensor ``ids``; the result in ``order`` (default: ``ids`` without ``drop``)."""
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
        raise AssertionError(f"einsum: no layout of {a_ids},{b_ids}->{out_ids} sets up: {err}")


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


class EinsumPlan:
    """An einsum compiled for fixed shapes, dtype and target; call it (or `execute`) many times.

    ``EinsumPlan("bhqd,bhkd->bhqk", (2, 4, 64, 32), (2, 4, 64, 32), dtype="float32")`` parses the
    subscripts, searches a contraction path (``optimize``: True = optimal up to 8 operands else
    greedy, "greedy", "optimal", False = left to right, or an explicit numpy-style path list),
    lays out the intermediates, sets up one `TensorOperation` per node (shared through a cache
    keyed by configuration) and allocates one set of intermediates. ``print(plan)`` shows the tree.
    ``target``: "auto" (default) builds a plan for the native CPU, or a `CudaEinsumPlan` when a
    ``driver=`` is given; "native", a CPU target name, or "cuda" (a `CudaEinsumPlan`). Host
    operands of any kind are taken (torch CPU tensors are read in place; torch in, torch out).
    A plan is immutable once built: each call takes a set of intermediates from the plan's pool
    (or makes one while other calls hold them all), so one plan may run from many threads at once.

    ``num_threads`` is the most threads a node uses (nodes under `SMALL_GEMM_FLOPS` run on one).
    ``strides``: per operand None (C-contiguous; other layouts are copied at each call) or the
    element strides of the strided views the plan will be called with (any sign, 0 for broadcast
    dims): such an operand is read in place, and each call checks that it has those strides and
    lies inside a C-contiguous base array. `strides` after construction lists what the plan reads in
    place (all None where the kernels cannot take some view, which is then copied).
    """

    def __new__(cls, subscripts: str = "", *shapes, target: str = "auto", **kwargs: Any):
        if target == "cuda" or (target == "auto" and kwargs.get("driver") is not None):
            # a CudaEinsumPlan (same calls; not an EinsumPlan subclass)
            from minijit.einsum.cuda import CudaEinsumPlan

            return CudaEinsumPlan(subscripts, *shapes, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        subscripts: str,
        *shapes,
        dtype="float32",
        target: str = "auto",
        optimize: Any = True,
        num_threads: int | None = None,
        strides=None,
    ) -> None:
        self.target = _plan_target(target)
        self.dtype = _dtype(dtype)
        self.num_threads = num_threads
        self.shapes = [tuple(int(s) for s in (sh.shape if hasattr(sh, "shape") else sh)) for sh in shapes]
        self.expr = parse_subscripts(subscripts, *self.shapes)
        self.subscripts = str(self.expr)
        self.out_shape = tuple(self.expr.sizes[c] for c in self.expr.output)
        self.path: list[tuple[int, int]] = []
        self._empty = any(n == 0 for n in self.expr.sizes.values())
        self.strides = _view_strides(strides, self.shapes)
        try:
            self._build(optimize)
        except (SetupError, AssertionError):
            if not any(self.strides):
                raise
            self.strides = [None] * len(self.shapes)  # the kernels cannot read some view: copy them all
            self._build(optimize)

    @classmethod
    def from_tree(
        cls, tree: str | TreeNode, sizes, *, dtype="float32", target: str = "native", num_threads: int | None = None
    ) -> EinsumPlan:
        """A plan from the lab's bracket notation (each tensor's ids outermost first) and dim sizes."""
        root = parse_tree(tree) if isinstance(tree, str) else tree
        subs, shapes = tree_subscripts(root, sizes)
        letter = {i: _LETTERS[i] for i in range(len(sizes))}
        self = cls.__new__(cls)
        self.target = _plan_target(target)
        self.dtype = _dtype(dtype)
        self.num_threads = num_threads
        self.shapes = shapes
        self.expr = parse_subscripts(subs, *shapes)
        self.subscripts = str(self.expr)
        self.out_shape = tuple(self.expr.sizes[c] for c in self.expr.output)
        self.path = []
        self._empty = any(n == 0 for n in self.expr.sizes.values())
        self.strides = [None] * len(shapes)
        self._build_tree(root, letter)
        return self

    # -- building ------------------------------------------------------------------------------
    def _start(self) -> _Builder:
        sizes = {c: n for c, n in self.expr.sizes.items()}
        b = _Builder(self.dtype, self.target, self.num_threads, sizes)
        # slots 0..n-1: the inputs (their size-1 dims dropped); slot n: the output
        self._inputs_ids = [
            tuple(c for c, s in zip(sub, sh, strict=True) if s != 1)
            for sub, sh in zip(self.expr.inputs, self.shapes, strict=True)
        ]
        for i, (sub, sh, st) in enumerate(zip(self.expr.inputs, self.shapes, self.strides, strict=True)):
            b.shapes.append(None)
            if st is not None:
                b.views[i] = (self._inputs_ids[i], {c: s for c, n, s in zip(sub, sh, st, strict=True) if n != 1})
        b.shapes.append(None)
        self._out_slot = len(self.shapes)
        self._out_ids = tuple(c for c in self.expr.output if sizes[c] != 1)
        return b

    def _finish(self, b: _Builder) -> None:
        self._builder = b
        # drop steps whose result nothing reads (left behind by permute folding)
        needed, live = {self._out_slot}, []
        for st in reversed(b.steps):
            if st.slots[2] in needed:
                live.append(st)
                needed.update(x for x in st.slots[:2] if x is not None and x >= 0)
        b.steps = live[::-1]
        self.steps = b.steps
        #: elements of each intermediate slot (None: an input, the output, or a dead slot)
        self._buffer_sizes: list[int | None] = [
            None if ids is None or i not in needed else math.prod(b.sizes[c] for c in ids)
            for i, ids in enumerate(b.shapes)
        ]
        self._calls = [(s.op, s.slots, s.ones) for s in self.steps]
        # native fast path: execute() checks the user's arrays (shape, dtype, C order) once, so the
        # nodes run through execute_ptr on addresses: slots (inputs, output, the call's
        # intermediates), then the ones tensors (read only, shared by every call)
        self._native = all(s.op.native for s in self.steps)
        ones: list[int] = []
        ptr_calls = []
        n_slots = len(self._buffer_sizes)
        for st in self.steps:
            s0, s1, so = st.slots
            if -1 in (s0, s1):
                ones.append(st.ones.ctypes.data)
                s0, s1 = (n_slots + len(ones) - 1 if x == -1 else x for x in (s0, s1))
            ptr_calls.append((st.op.execute_ptr, s0, s0 if s1 is None else s1, so))
        self._ones_addrs, self._ptr_calls = ones, ptr_calls
        # the intermediates belong to a call: each call takes a set from the pool (DESIGN.md 12)
        self._scratch = ScratchPool(self._new_scratch, items=(self._new_scratch(),))

    def _new_scratch(self) -> tuple[list[np.ndarray | None], list[int]]:
        """One call's intermediates: the arrays per slot (None where the slot is not one) and the
        address list the native path fills in (intermediates and ones set; inputs/output per call)."""
        bufs = [None if n is None else np.empty(n, self.dtype) for n in self._buffer_sizes]
        addrs = [0 if x is None else x.ctypes.data for x in bufs] + self._ones_addrs
        return bufs, addrs

    def _build(self, optimize) -> None:
        b = self._start()
        if self._empty:
            self._finish(b)
            return
        ins = list(self._inputs_ids)
        out_ids = self._out_ids
        n = len(ins)
        # leaf reductions: indices in one operand only and not in the output
        slots: list[int] = list(range(n))
        counts: dict[str, int] = {}
        for ids in ins:
            for c in ids:
                counts[c] = counts.get(c, 0) + 1
        if n == 1:
            self._single(b, ins[0], out_ids)
            self._finish(b)
            return
        # (contract() sums them out right before their first use, in the layout that node reads)
        sets = [frozenset(c for c in x if counts[c] > 1 or c in out_ids) for x in ins]
        isz = self.dtype.itemsize
        if isinstance(optimize, (list, tuple)):
            path = [tuple(p) for p in optimize if p != "einsum_path"]
        elif optimize is False or optimize is None:
            path = [(0, 1)] * (n - 1)
        elif optimize == "greedy" or (optimize is True and n > _path.OPTIMAL_LIMIT):
            path = _path.greedy_path(sets, frozenset(out_ids), b.sizes, isz)
        elif optimize in (True, "optimal"):
            path = _path.optimal_path(sets, frozenset(out_ids), b.sizes, isz)
        else:
            raise ValueError(f"einsum: optimize must be True/False/'greedy'/'optimal' or a path, got {optimize!r}")
        self.path = path
        # the tree; ids per node
        nodes: list[Any] = list(range(n))
        ids_of: dict[int, frozenset] = {}
        batch_of: dict[int, frozenset] = {}
        summed_of: dict[int, frozenset] = {}
        leaf_ids = {i: sets[i] for i in range(n)}
        live: list[frozenset] = list(sets)
        for i in range(n):
            ids_of[id(nodes[i])] = sets[i]
            batch_of[id(nodes[i])] = frozenset()
        keep_nodes = []
        for i, j in path:
            i, j = _path.checked_step(i, j, len(nodes))
            nb, na = nodes.pop(j), nodes.pop(i)
            sb, sa = live.pop(j), live.pop(i)
            need = set(out_ids)
            for x in live:
                need |= x
            kept = frozenset((sa | sb) & need)
            node = (na, nb)
            keep_nodes.append(node)
            ids_of[id(node)] = kept
            batch_of[id(node)] = frozenset(sa & sb & kept)
            summed_of[id(node)] = frozenset((sa & sb) - kept)
            nodes.append(node)
            live.append(kept)
        if len(nodes) != 1:
            raise ValueError(f"einsum: path {path} leaves {len(nodes)} operands, not one")
        root = nodes[0]
        del leaf_ids
        leaf_order = {i: tuple(c for c in ins[i] if c in sets[i]) for i in range(n)}
        orders = _layout(root, out_ids, ids_of, leaf_order, batch_of, summed_of)

        def emit(node, out_slot=None) -> tuple[int, tuple[str, ...]]:
            if not isinstance(node, tuple):
                return slots[node], ins[node]
            sa, a_ids = emit(node[0])
            sb, b_ids = emit(node[1])
            order = orders[id(node)]
            return b.contract(sa, a_ids, sb, b_ids, order, out_slot), order

        if isinstance(root, tuple):
            emit(root, self._out_slot)
        else:  # one operand after all (cannot happen for n >= 2)
            raise AssertionError("einsum: empty path")
        self._finish(b)

    def _single(self, b: _Builder, ids, out_ids) -> None:
        drop = [c for c in ids if c not in out_ids]
        if drop:
            kept = tuple(c for c in ids if c not in drop)
            if kept == out_ids:
                b.reduce(0, ids, drop, self._out_slot)
            else:
                s, kept = b.reduce(0, ids, drop)
                b.permute(s, kept, out_ids, self._out_slot)
        else:
            b.permute(0, ids, out_ids, self._out_slot)

    def _build_tree(self, root: TreeNode, letter) -> None:
        b = self._start()
        if self._empty:
            self._finish(b)
            return
        leaves = root.leaves()
        sizes = b.sizes

        def ids_of(node: TreeNode) -> tuple[str, ...]:
            return tuple(letter[i] for i in node.ids if sizes[letter[i]] != 1)

        counter = iter(range(len(leaves)))

        def emit(node: TreeNode, out_slot=None) -> int:
            if node.is_leaf:
                return next(counter)
            kids = [(emit(c), ids_of(c)) for c in node.children]
            if len(kids) == 1:
                (s, ids), out = kids[0], ids_of(node)
                drop = [c for c in ids if c not in out]
                if drop:
                    s, ids = b.reduce(s, ids, drop)
                return b.permute(s, ids, out, out_slot)
            (sa, a), (sb, bb) = kids
            return b.contract(sa, a, sb, bb, ids_of(node), out_slot)

        if root.is_leaf:
            self._single(b, ids_of(root), self._out_ids)
        else:
            emit(root, self._out_slot)
        self._finish(b)

    # -- running -------------------------------------------------------------------------------
    def execute(self, *operands, out: np.ndarray | None = None) -> np.ndarray:
        """Run the plan on ``operands`` (host arrays; shapes and dtype as planned); returns ``out``
        or a new array (a torch tensor when an operand is one, over the same memory)."""
        if len(operands) != len(self.shapes):
            raise ValueError(f"einsum plan: expected {len(self.shapes)} operands, got {len(operands)}")
        arrays = []
        views: dict[int, tuple[np.ndarray, int]] = {}  # operand -> (its base, flat; element offset)
        like = caller_out = None  # a torch operand (the result's type) / the caller's out
        if out is not None and not isinstance(out, np.ndarray):
            caller_out, out = out, host_array(out, "einsum plan: out")  # a torch CPU tensor's memory
        for i, (x, shape) in enumerate(zip(operands, self.shapes, strict=True)):
            if not isinstance(x, np.ndarray):
                if like is None and is_torch_tensor(x):
                    like = x
                x = host_array(x, f"einsum plan: operand {i}")  # device arrays: build target="cuda"
            if x.shape != shape:
                raise ValueError(f"einsum plan: operand {i} has shape {x.shape}, the plan was built for {shape}")
            if x.dtype != self.dtype:
                if x.dtype.kind not in "fiub" or x.dtype.kind == "c":
                    raise TypeError(f"einsum: operand {i} has dtype {x.dtype} (float32/float64 only)")
                x = x.astype(self.dtype)
            if self.strides[i] is not None:
                views[i] = _checked_view(i, x, self.strides[i])
            elif not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            arrays.append(x)
        direct = (
            out is not None
            and isinstance(out, np.ndarray)
            and out.dtype == self.dtype
            and out.flags.c_contiguous
            and out.flags.writeable
        )
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"einsum: out must be a numpy array, got {type(out).__name__}")
            if out.shape != self.out_shape:
                raise ValueError(f"einsum: out has shape {out.shape}, the result has shape {self.out_shape}")
            if out.dtype not in _DTYPES:
                raise TypeError(f"einsum: out has dtype {out.dtype} (float32/float64 only)")
        result = out if direct else np.empty(self.out_shape, self.dtype)
        if self._empty:
            result[...] = 0
        elif self._native:
            pool = self._scratch
            scratch = pool.acquire()  # this call's intermediates, its own address list
            try:
                addrs = scratch[1]
                for i, x in enumerate(arrays):
                    addrs[i] = _address(x)  # numpy's data pointer, at half the cost of x.ctypes.data
                addrs[self._out_slot] = _address(result)
                for run, s0, s1, so in self._ptr_calls:
                    run(addrs[s0], addrs[s1], addrs[so])
            finally:
                pool.release(scratch)
        else:
            scratch = self._scratch.acquire()
            try:
                local = list(scratch[0])
                local[: len(arrays)] = arrays
                local[self._out_slot] = result
                origin = [0] * len(local)
                for i, (base, offset) in views.items():  # a view: its base array and first element
                    local[i], origin[i] = base, offset
                for op, (s0, s1, so), ones in self._calls:
                    in0 = ones if s0 == -1 else local[s0]
                    in1 = ones if s1 == -1 else (in0 if s1 is None else local[s1])
                    o0 = 0 if s0 == -1 else origin[s0]
                    o1 = 0 if s1 in (-1, None) else origin[s1]
                    op.execute(in0, in1, local[so], offsets=(o0, o1, origin[so]) if o0 or o1 else None)
            finally:
                self._scratch.release(scratch)
        if out is not None and not direct:
            np.copyto(out, result, casting="same_kind")
            result = out
        if caller_out is not None:
            return caller_out
        return result if like is None else host_result(result, like)

    __call__ = execute  # plan(*operands, out=None): no extra Python frame per call

    # -- printing ------------------------------------------------------------------------------
    @property
    def intermediate_shapes(self) -> list[int | None]:
        """Elements of each slot's intermediate (None: an input, the output or no intermediate)."""
        return list(self._buffer_sizes)

    @property
    def intermediate_bytes(self) -> int:
        """Bytes one call's intermediates take, plus the plan's ones tensors (read only, shared).
        A call takes a set of intermediates from the plan's pool (one set is made at build; calls
        running at once make more, `minijit.cache.SCRATCH_POOL_SIZE` of them are kept)."""
        own = sum(n for n in self._buffer_sizes if n is not None) * self.dtype.itemsize
        return own + sum(s.ones.nbytes for s in self.steps if s.ones is not None)

    @property
    def flops(self) -> int:
        return sum(s.op.config.flops() for s in getattr(self, "steps", []))

    def listing(self, configs: bool = True) -> str:
        """The tree (one line per node), each node's optimized TensorConfig, flops and sizes."""
        lines = [
            f"EinsumPlan {self.subscripts} shapes {self.shapes} {self.dtype} target {self.target}",
            f"path {self.path}; {len(self.steps)} nodes; {self.flops} flops;"
            f" intermediates {sum(n for n in self._buffer_sizes if n is not None)} elements",
        ]
        n_in = len(self.shapes)

        def name(slot: int) -> str:
            if slot == -1:
                return "ones"
            if slot < n_in:
                return f"in{slot}"
            return "out" if slot == self._out_slot else f"t{slot - n_in - 1}"

        for i, s in enumerate(self.steps):
            lines.append(f"node {i}: {s.describe(self._builder.sizes, name)}")
            if configs:
                lines.append("  " + str(s.op.config).replace("\n", "\n  "))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.listing()

    def __repr__(self) -> str:
        return f"EinsumPlan({self.subscripts!r}, shapes={self.shapes}, dtype={self.dtype}, nodes={len(self.steps)})"


def _view_strides(strides, shapes) -> list[tuple[int, ...] | None]:
    """The ``strides`` argument of `EinsumPlan`: per operand None or its element strides; None
    where the view has no unit-stride dim (every kernel reads one dim at unit stride)."""
    if strides is None:
        return [None] * len(shapes)
    strides = list(strides)
    if len(strides) != len(shapes):
        raise ValueError(f"einsum plan: strides has {len(strides)} entries for {len(shapes)} operands")
    out: list[tuple[int, ...] | None] = []
    for i, (st, sh) in enumerate(zip(strides, shapes, strict=True)):
        if st is None:
            out.append(None)
            continue
        st = tuple(st)
        if len(st) != len(sh) or not all(isinstance(s, (int, np.integer)) for s in st):
            raise ValueError(f"einsum plan: strides[{i}] must be {len(sh)} ints (elements), got {st!r}")
        st = tuple(int(s) for s in st)
        big = [s for s, n in zip(st, sh, strict=True) if n != 1]
        if big and 1 not in big:
            out.append(None)
        else:
            out.append(st)
    return out


def view_of_base(x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``(base, offset)`` when ``x`` is a view into a C-contiguous array whose every element lies
    inside it, with byte strides that are multiples of the itemsize: ``base`` is that array's memory
    as a flat array of ``x``'s dtype and ``offset`` the element of it that is ``x``'s first
    element. None otherwise (then the view must be copied)."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not root.flags.c_contiguous:
        return None
    item = x.itemsize
    delta = x.ctypes.data - root.ctypes.data
    if delta % item or any(s % item for s in x.strides):
        return None
    lo = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s > 0)
    usable = root.nbytes - root.nbytes % item  # whole elements of x's dtype
    if x.size and (delta + lo < 0 or delta + hi + item > usable):
        return None
    flat = root.reshape(-1).view(np.uint8)[:usable].view(x.dtype)
    return flat, delta // item


def _checked_view(i: int, x: np.ndarray, strides: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """ValueError naming operand ``i`` unless ``x`` has the planned element ``strides`` (on dims of
    size > 1) and lies inside a C-contiguous base array; returns its base (flat) and offset."""
    item = x.itemsize
    got = tuple(s // item if s % item == 0 else None for s in x.strides)
    if any(n != 1 and g != w for n, g, w in zip(x.shape, got, strides, strict=True)):
        raise ValueError(
            f"einsum plan: operand {i} has byte strides {x.strides}, the plan reads it in place with element"
            f" strides {strides} (build a plan for this layout, or pass a copy to a plan built without strides)"
        )
    found = view_of_base(x)
    if found is None:
        raise ValueError(
            f"einsum plan: operand {i} is not a view inside a C-contiguous base array, so it cannot be read"
            " in place with the planned strides"
        )
    return found


def contract_path(subscripts: str, *shapes, optimize: Any = True, itemsize: int = 4):
    """``(path, info)`` like ``np.einsum_path``: the numpy-style path and a text with its cost.

    ``shapes``: shapes or arrays; numpy's grammar and ``optimize`` forms as `einsum` (a repeated
    index within an operand counts as its diagonal; an explicit path comes back pairwise)."""
    subscripts, shapes, optimize = _grammar.canonicalize(subscripts, shapes, optimize, shapes_only=True)
    expr = parse_subscripts(subscripts, *shapes)
    sizes = expr.sizes
    ins = [frozenset(c for c in sub if sizes[c] != 1) for sub in expr.inputs]
    counts: dict[str, int] = {}
    for s in ins:
        for c in s:
            counts[c] = counts.get(c, 0) + 1
    out = frozenset(c for c in expr.output if sizes[c] != 1)
    ins = [frozenset(c for c in s if counts[c] > 1 or c in out) for s in ins]
    n = len(ins)
    if n == 1:
        path = []
    elif isinstance(optimize, list):  # an explicit path (canonicalize made it pairwise)
        path = optimize
    elif optimize == "greedy" or (optimize is True and n > _path.OPTIMAL_LIMIT):
        path = _path.greedy_path(ins, out, sizes, itemsize)
    elif optimize in (True, "optimal"):
        path = _path.optimal_path(ins, out, sizes, itemsize)
    elif optimize is False:
        path = [(0, 1)] * (n - 1)
    else:
        raise ValueError(f"einsum: optimize must be True/False/'greedy'/'optimal', got {optimize!r}")
    info = _path.path_cost(ins, out, sizes, path, itemsize)
    lines = [
        f"  Complete contraction:  {expr}",
        f"  Path: {path}",
        f"  Cost (flops + {_path.BYTE_WEIGHT}*bytes): {info.cost:.4g}",
        f"  Flops: {info.flops}",
    ]
    for a, bb, o, c, f in info.steps:
        lines.append(f"  {''.join(sorted(a))},{''.join(sorted(bb))}->{''.join(sorted(o))}  flops {f}  cost {c:.4g}")
    return path, "\n".join(lines)


def einsum(subscripts: str, *operands, out=None, optimize: Any = True, target: str = "auto", dtype=None, driver=None):
    """numpy-compatible einsum on minijit's kernels (float32/float64).

    The result dtype is ``dtype`` or numpy's result type of the operands (float32 or float64; other
    dtypes raise TypeError). numpy's whole grammar (`minijit.einsum.grammar`): ``...`` with
    broadcasting, repeated indices within one operand (read as a diagonal view), implicit outputs,
    the sublist form, and ``optimize`` as numpy takes it (a bool, "greedy", "optimal", or an
    explicit path as ``np.einsum_path`` gives it); ValueError where numpy refuses the subscripts.
    Plans are cached by subscripts, shapes, strides, dtype, target and optimize (`minijit.cache_info`).

    The device follows the data (``target="auto"``, the default): host arrays (numpy, torch CPU
    tensors, host DLPack producers, lists) run on the native CPU; CUDA device arrays (torch CUDA
    tensors, cupy, ``__cuda_array_interface__``, DLPack on a CUDA device) run on the GPU, as
    ``target="cuda"``. Operands on both raise TypeError naming them. The result follows the input:
    numpy in, numpy out; a torch tensor in, a torch tensor out on its device (on the CPU over the
    result's memory, no copy; torch CPU operands are read in place where numpy can view them).
    An explicit ``target`` ("native", a CPU target name, or "cuda") wins.

    ``target="cuda"``: float32 (as tf32), float16 or bfloat16 inputs (numpy arrays, or
    torch/cupy/``__cuda_array_interface__``/DLPack device arrays), a float32 result (torch in:
    a torch tensor on its device; cupy in: cupy; bare device arrays: numpy) (`minijit.einsum.cuda`);
    ``driver``: `ptx.simdriver` runs it in the PTX simulator.
    """
    subscripts, operands, optimize = _grammar.canonicalize(subscripts, operands, optimize)
    numpy_only = out is None or type(out) is np.ndarray  # the common case: no device or type to look up
    for x in operands:
        if type(x) is not np.ndarray:
            numpy_only = False
            break
    if target == "auto" and numpy_only:
        target = "native"
    else:
        target = _device_target(_check_target(target), operands, out)
    if target == "cuda":
        return _einsum_cuda(subscripts, operands, out, optimize, dtype, driver)
    if driver is not None:
        raise TypeError("einsum: driver= applies to target='cuda' only (or to CUDA device arrays)")
    caller_out = out
    if numpy_only:
        like, arrays = None, list(operands)
    else:
        like = None if out is not None else like_input(operands)  # a torch operand: a torch result
        arrays = [host_array(x, f"einsum: operand {i}") for i, x in enumerate(operands)]
        if out is not None and not isinstance(out, np.ndarray):
            out = host_array(out, "einsum: out")  # a torch CPU tensor: its memory, written in place
    for i, x in enumerate(arrays):
        if x.dtype not in _DTYPES:
            raise TypeError(f"einsum: operand {i} has dtype {x.dtype}; only float32 and float64 are supported")
    if dtype is None:
        dt = np.result_type(*arrays) if arrays else np.dtype(np.float64)
    else:
        dt = _dtype(dtype)
    dt = _dtype(dt)
    # a strided view is read in place: its indices relabelled outermost (largest |stride|, broadcast
    # dims first) to innermost, so a transpose or a Fortran-order array is a C-order array, and a
    # view of a C-contiguous base gets its element strides planned; anything else is copied
    strides: list[tuple[int, ...] | None] = [None] * len(arrays)
    if any(not x.flags.c_contiguous for x in arrays):
        expr = parse_subscripts(subscripts, *arrays)  # errors name the caller's operands
        subs = list(expr.inputs)
        for i, x in enumerate(arrays):
            if x.flags.c_contiguous or x.dtype != dt:
                continue
            perm = sorted(range(x.ndim), key=lambda ax, x=x: -abs(x.strides[ax]) if x.strides[ax] else -math.inf)
            y = x.transpose(perm)
            if not y.flags.c_contiguous and view_of_base(y) is None:
                continue  # copied by execute
            arrays[i], subs[i] = y, "".join(subs[i][ax] for ax in perm)
            if not y.flags.c_contiguous:
                strides[i] = tuple(st // y.itemsize for st in y.strides)
        subscripts = ",".join(subs) + "->" + expr.output
    key = (
        subscripts,
        tuple(x.shape for x in arrays),
        tuple(strides),
        dt,
        target,
        optimize if not isinstance(optimize, list) else tuple(optimize),
    )
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS.get_or_create(
            key,
            lambda: EinsumPlan(
                subscripts, *[x.shape for x in arrays], dtype=dt, target=target, optimize=optimize, strides=strides
            ),
            admit=_small_enough,  # a plan keeps a set of intermediates
        )
    result = plan.execute(*arrays, out=out)
    return caller_out if caller_out is not None else host_result(result, like)


def _device_target(target: str, operands, out) -> str:
    """``target``, or for "auto" the device the arrays are on: "cuda" when they are CUDA device
    arrays, "native" when they are host arrays; TypeError naming the operands when both occur."""
    if target != "auto":
        return target
    gpu, host = [], []
    named = [(f"operand {i}", x) for i, x in enumerate(operands)] + ([("out", out)] if out is not None else [])
    for name, x in named:
        (gpu if device_kind(x, f"einsum: {name}") == "cuda" else host).append(name)
    if gpu and host:
        raise TypeError(
            f"einsum: {', '.join(gpu)} on a CUDA device and {', '.join(host)} in host memory: put them on one"
            " device, or pass target='cuda' (host arrays are uploaded) or target='native'"
        )
    return "cuda" if gpu else "native"


def _small_enough(plan: EinsumPlan) -> bool:
    return plan.intermediate_bytes <= PLAN_CACHE_MAX_BYTES


def _einsum_cuda(subscripts, operands, out, optimize, dtype, driver):
    from minijit.einsum.cuda import CudaEinsumPlan, cuda_dtype, operand_info

    infos = [operand_info(i, x) for i, x in enumerate(operands)]
    if dtype is None:
        names = {name for _, name in infos}
        if len(names) > 1:
            i = next(i for i, (_, name) in enumerate(infos) if name != infos[0][1])
            raise TypeError(f"einsum (cuda): operand {i} holds {infos[i][1]}, operand 0 {infos[0][1]}: pass dtype=")
        dt = cuda_dtype(names.pop() if names else "float32")
    else:
        dt = cuda_dtype(dtype)
    key = (
        "cuda", subscripts, tuple(shape for shape, _ in infos), dt, driver,
        optimize if not isinstance(optimize, list) else tuple(optimize),
    )  # fmt: skip
    shapes = [shape for shape, _ in infos]
    plan = _PLANS.get_or_create(
        key, lambda: CudaEinsumPlan(subscripts, *shapes, dtype=dt, optimize=optimize, driver=driver)
    )
    return plan.execute(*operands, out=out)


#: einsum() keeps up to this many plans (least recently used out first), CPU plans only when one
#: call's intermediates take at most PLAN_CACHE_MAX_BYTES
PLAN_CACHE_SIZE = 128
PLAN_CACHE_MAX_BYTES = 64 << 20
_PLANS = LRUCache(lambda: PLAN_CACHE_SIZE, name="einsum.plans")
