"""`EinsumPlan` on the CPU: a contraction tree whose nodes are `TensorOperation`s, built once and run
many times. `minijit.einsum.lowering` lowers the expression (path and contraction tree, shared with
the CUDA plan); `minijit.einsum.builder` makes the nodes and chooses the intermediate layouts.
Every tensor of a plan is C-contiguous in its own index order (the last index has unit stride).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minijit import limits, targets
from minijit.arrays import address as _address
from minijit.cache import LRUCache, ScratchPool
from minijit.einsum.builder import _DTYPES, SMALL_GEMM_FLOPS, _Builder, _layout
from minijit.einsum.cached import PLANS
from minijit.einsum.cached import check_target as _check_target
from minijit.einsum.dtypes import compiled_dtype as _dtype
from minijit.einsum.lowering import lower
from minijit.einsum.parse import _LETTERS, TreeNode, parse_subscripts, parse_tree, tree_subscripts
from minijit.einsum.views import checked_view, view_of_base, view_strides
from minijit.errors import SetupError
from minijit.operation import Operation
from minijit.runtime.device_arrays import host_array, host_result, is_torch_tensor

__all__ = ["SMALL_GEMM_FLOPS", "EinsumPlan", "view_of_base"]

#: set-up TensorOperations shared by every plan with that configuration (`cached_op`): at most
#: this many, least recently used out first (plans keep the operations they use alive)
OPS_CACHE_SIZE = 1024
_OPS = LRUCache(lambda: OPS_CACHE_SIZE, name="einsum.operations")


def _plan_target(target: str) -> str:
    """A CPU plan's target: "auto" (a plan is built from shapes, before any data) is the native CPU."""
    target = _check_target(target)
    return "native" if target == "auto" else target


def cached_op(target: str, num_threads: int | None, *args: Any):
    """A set-up TensorOperation for ``setup(*args)``, shared by every plan with that configuration."""
    from minijit.tensor_operation import TensorOperation

    key = (target, num_threads, *(tuple(a) if isinstance(a, list) else a for a in args))

    def create() -> TensorOperation:
        op = TensorOperation(target=target, num_threads=num_threads)
        op.setup(*args)
        return op

    return _OPS.get_or_create(key, create)


class EinsumPlan(Operation):
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
    element strides of the arrays or strided views the plan will be called with (any sign, 0 for
    broadcast dims; an F-order or axis-permuted array is one such layout): such an operand is read
    in place, and each call checks that it has those strides and lies inside a base array that is
    one dense block (`minijit.arrays`). `strides` after construction lists what the plan reads in
    place (all None where the kernels cannot take some view, which is then copied).
    """

    @classmethod
    def _implementation(cls, subscripts: str = "", *shapes: Any, target: str = "auto", **kwargs: Any):
        """The class serving ``target`` (`minijit.operation.OperationMeta`): `CudaEinsumPlan` for
        "cuda", or for "auto" with a ``driver=``; this class otherwise."""
        if target == "cuda" or (target == "auto" and kwargs.get("driver") is not None):
            return targets.get("cuda").operation_class(cls), (subscripts, *shapes), kwargs
        return cls, (subscripts, *shapes), {"target": target, **kwargs}

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
        self.strides = view_strides(strides, self.shapes)
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
        b = _Builder(self.dtype, self.target, self.num_threads, sizes, make_op=cached_op)
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
        out_bytes = math.prod(self.out_shape) * self.dtype.itemsize
        limits.check_alloc(out_bytes, f"einsum result {self.out_shape}")
        limits.check_alloc(sum(n or 0 for n in self._buffer_sizes) * self.dtype.itemsize, "einsum intermediates")
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
        # the intermediates belong to a call: each call takes a set from the pool
        # (docs/decisions.md, "Plans are immutable and shareable")
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
        low = lower(self.expr, self.shapes, optimize, self.dtype.itemsize)
        ins, out_ids, sets = low.inputs, self._out_ids, low.sets
        n = len(ins)
        slots: list[int] = list(range(n))
        if n == 1:
            self._single(b, ins[0], out_ids)
            self._finish(b)
            return
        self.path = list(low.path)
        # the tree as nested pairs; index sets per node (contract() sums the indices one operand
        # alone has out right before their first use, in the layout that node reads)
        nodes: list[Any] = list(range(n))
        ids_of = {id(nodes[i]): sets[i] for i in range(n)}
        batch_of = {id(nodes[i]): frozenset() for i in range(n)}
        summed_of: dict[int, frozenset] = {}
        for st in low.steps:
            nb, na = nodes.pop(st.right), nodes.pop(st.left)
            node = (na, nb)
            ids_of[id(node)], batch_of[id(node)], summed_of[id(node)] = st.kept, st.batch, st.summed
            nodes.append(node)
        root = nodes[0]
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
                    raise TypeError(f"einsum: operand {i} has dtype {x.dtype} (float32/float64/int32/int64 only)")
                x = x.astype(self.dtype)
            if self.strides[i] is not None:
                views[i] = checked_view(i, x, self.strides[i])
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
            if out.dtype not in _DTYPES or (out.dtype.kind == "i") != (self.dtype.kind == "i"):
                kinds = "int32/int64" if self.dtype.kind == "i" else "float32/float64"
                raise TypeError(f"einsum: out has dtype {out.dtype} ({kinds} for this plan)")
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

    def setup(self) -> None:
        """Nothing to do: a plan is set up by its constructor (the `Operation` protocol)."""

    def info(self) -> dict[str, Any]:
        """Target, dtype, operand shapes, node kinds and main kernels, path, flops."""
        return {
            "target": self.target,
            "dtype": self.dtype.name,
            "shapes": list(self.shapes),
            "kernel": [s.op.info()["kernel"] for s in self.steps],
            "nodes": [s.kind for s in self.steps],
            "path": list(self.path),
            "flops": self.flops,
        }

    def __str__(self) -> str:
        return self.listing()

    def __repr__(self) -> str:
        return f"EinsumPlan({self.subscripts!r}, shapes={self.shapes}, dtype={self.dtype}, nodes={len(self.steps)})"


#: the plans einsum() keeps: `minijit.einsum.cached.PLANS` (sized by its PLAN_CACHE_SIZE and
#: PLAN_CACHE_MAX_BYTES)
_PLANS = PLANS
