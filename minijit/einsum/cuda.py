"""Einsum plans on the CUDA target: each node a `minijit.cuda.CudaTensorOperation`.

    plan = CudaEinsumPlan("bhqd,bhkd->bhqk", (2, 4, 64, 32), (2, 4, 48, 32), dtype="float16")
    S = plan(Q, K)            # numpy arrays, torch/cupy CUDA tensors, __cuda_array_interface__

Node kinds: ``gemm`` (GEMM/BRGEMM on tensor cores; a sum over an index only one operand has is a
GEMM with a ones vector) and ``copy`` (the elementwise permute kernel, fp32 only).

Types. ``dtype`` names the inputs: "float32" (GEMMs run as tf32), "float16" or "bfloat16" (numpy
bf16 data as uint16 bit patterns). Every result, intermediate and output, is float32 (the CUDA GEMM
accumulates and stores fp32). A node reading an intermediate therefore runs as tf32, and so does a
node whose fp16/bf16 input the GEMM cannot read in place (it is permuted by the fp32 copy kernel):
such inputs are widened to fp32 before the launch (numpy: on the host; torch: ``tensor.float()``;
other device arrays: TypeError naming the operand). Widening fp16/bf16 to fp32 is exact and tf32
keeps fp16's 10 and bf16's 7 mantissa bits, so the node computes what an fp16/bf16 GEMM would.

Layouts. The CUDA GEMM reads A (the operand holding the result's unit-stride index) with that
index at unit stride and B with a summed index at unit stride (`minijit.cuda.operation`). Each node
tries both operand roles in place; when neither sets up, the operands are copied into
``[batch, k, m]`` / ``[batch, n, k]`` order first. Every tensor is C-order in its own index order.
A device operand or ``out`` that fills one dense block in another axis order (F order, permuted;
`minijit.arrays`) is reordered on the device: an operand into a C-order buffer of the call
(`minijit.cuda.reorder`; a torch tensor by ``tensor.contiguous()``) before the nodes, ``out``
from a C-order buffer after them; views with gaps or negative strides are refused.

Memory. Intermediates are device buffers that belong to a call: each call takes a set from the
plan's pool (allocated by the first call that uses it; calls running at once from several threads
use sets of their own), so one plan may run from many threads; numpy inputs are uploaded once per
call; the result is ``out``, else a float32 device array like the operands
when one is a torch tensor (else cupy array), else a numpy array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from minijit.arrays import is_c_contiguous, require_dense
from minijit.cache import ScratchPool
from minijit.einsum.lowering import lower
from minijit.einsum.parse import parse_subscripts
from minijit.einsum.plan import EinsumPlan
from minijit.errors import SetupError
from minijit.operation import absent
from minijit.runtime.device_arrays import (
    CudaArrayView,
    array_library,
    buffer_array,
    describe,
    device_empty,
    is_device_array,
    is_torch_tensor,
)

__all__ = ["CUDA_DTYPES", "CudaEinsumPlan"]

#: plan dtype -> (CudaTensorOperation dtype, numpy dtype of host data)
CUDA_DTYPES = {
    "float32": ("fp32", np.dtype(np.float32)),
    "float16": ("fp16", np.dtype(np.float16)),
    "bfloat16": ("bf16", np.dtype(np.uint16)),
}
_TORCH = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16"}


def cuda_dtype(dtype) -> str:
    """The plan dtype name for ``dtype`` ("float32", "float16", "bfloat16"); TypeError otherwise."""
    name = str(getattr(dtype, "name", dtype)).removeprefix("torch.").lower()
    name = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}.get(
        name, name
    )
    if name not in CUDA_DTYPES:
        raise TypeError(f"einsum: target 'cuda' takes float32, float16 or bfloat16 inputs, got {dtype}")
    return name


def operand_info(i: int, x: Any) -> tuple[tuple[int, ...], str]:
    """``(shape, element type name)`` of operand ``i``: a numpy array (uint16 data is bf16 bits and
    needs ``dtype="bfloat16"``) or a device array (`minijit.runtime.device_arrays.describe`)."""
    if is_device_array(x) or (hasattr(x, "data_ptr") and hasattr(x, "stride")):
        v = describe(x, f"operand {i}")
        return tuple(v.shape), v.dtype.removeprefix("?")
    x = np.asarray(x)
    return x.shape, x.dtype.name


@dataclass
class _Node:
    kind: str  # gemm | copy
    op: Any
    slots: tuple[int, int | None, int]  # in0, in1 (None for copy; -1 the node's ones), out
    ids: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
    dtype: str  # the node's input type (float32 for copies and nodes reading fp32 data)
    ones: np.ndarray | None = None

    def describe(self) -> str:
        a, b, o = ("".join(x) for x in self.ids)
        expr = f"{a},{b}->{o}" if self.kind == "gemm" else f"{a}->{o}"
        return f"{self.kind} {expr} ({self.dtype})"


def _strides(ids, sizes) -> dict[str, int]:
    out, s = {}, 1
    for c in reversed(tuple(ids)):
        out[c] = s
        s *= sizes[c]
    return out


class CudaEinsumPlan(EinsumPlan):
    """An einsum compiled for the CUDA target (see the module docstring); call it many times.
    ``EinsumPlan(..., target="cuda")`` builds one; its own ``__init__`` replaces the CPU plan's.

    ``driver``: `ptx.driver` (default, a GPU) or `ptx.simdriver` (the PTX simulator); ``device``:
    the GPU ordinal. Planning needs no GPU; calls do (or the simulator).
    """

    target = "cuda"

    def __init__(self, subscripts: str, *shapes, dtype="float32", optimize: Any = True, driver=None, device: int = 0):
        self.dtype_name = cuda_dtype(dtype)
        self.dtype = CUDA_DTYPES[self.dtype_name][1]
        self.driver, self.device = driver, device
        self.shapes = [tuple(int(s) for s in (sh.shape if hasattr(sh, "shape") else sh)) for sh in shapes]
        self.expr = parse_subscripts(subscripts, *self.shapes)
        self.subscripts = str(self.expr)
        sizes = dict(self.expr.sizes)
        self.sizes = sizes
        self.out_shape = tuple(sizes[c] for c in self.expr.output)
        self._empty = any(n == 0 for n in sizes.values())
        n = len(self.shapes)
        self._ids: list[tuple[str, ...]] = [
            tuple(c for c, s in zip(sub, sh, strict=True) if s != 1)
            for sub, sh in zip(self.expr.inputs, self.shapes, strict=True)
        ]
        self._out_ids = tuple(c for c in self.expr.output if sizes[c] != 1)
        self._out_slot = n
        self.widen = [False] * n  # leaves converted to fp32 before the call
        self._slot_ids: list[tuple[str, ...] | None] = [*self._ids, self._out_ids]
        self.nodes: list[_Node] = []
        self.path: list[tuple[int, int]] = []
        self._optimize = optimize
        # a call's device intermediates (slot -> buffer, -2: the device copy of a host result),
        # allocated by the first call that uses the set; the plan itself holds none
        # (docs/decisions.md, "Plans are immutable and shareable")
        self._scratch = ScratchPool(dict)
        self._ones_dev: dict[int, Any] = {}  # read-only ones vectors, shared by every call
        if not self._empty:
            self._build()

    # -- building ------------------------------------------------------------------------------
    def _new_slot(self, ids) -> int:
        self._slot_ids.append(tuple(ids))
        return len(self._slot_ids) - 1

    def _slot_dtype(self, slot: int) -> str:
        if slot < len(self.shapes) and not self.widen[slot]:
            return self.dtype_name
        return "float32"

    def _op(self, main: str, dtype: str, types, dims, s0, s1, so):
        from minijit.cuda.operation import CudaTensorOperation

        op = CudaTensorOperation(device=self.device, driver=self.driver)
        first = "zero" if main == "gemm" else "none"
        sizes = [self.sizes[c] for c in dims]
        op.setup(CUDA_DTYPES[dtype][0], first, main, "none", types, ["undefined"] * len(dims), sizes, s0, s1, so)
        return op

    def _copy(self, slot: int, out_ids, out_slot: int | None = None) -> int:
        ids = self._slot_ids[slot]
        if slot < len(self.shapes):
            self.widen[slot] = True  # the copy kernel reads fp32
        out_slot = self._new_slot(out_ids) if out_slot is None else out_slot
        s0, so = _strides(ids, self.sizes), _strides(out_ids, self.sizes)
        dims = list(out_ids)
        op = self._op("copy", "float32", ["c"] * len(dims), dims, [s0[c] for c in dims], [0] * len(dims),
                      [so[c] for c in dims])  # fmt: skip
        self.nodes.append(_Node("copy", op, (slot, None, out_slot), (ids, (), tuple(out_ids)), "float32"))
        return out_slot

    def _gemm_op(self, a_ids, b_ids, o_ids, dtype):
        a, b, o = set(a_ids), set(b_ids), set(o_ids)
        sa, sb, so = (_strides(x, self.sizes) for x in (a_ids, b_ids, o_ids))
        dims = list(o_ids) + [c for c in a_ids if c not in o] + [c for c in b_ids if c not in o and c not in a]
        types = ["c" if c in a and c in b and c in o else "k" if c in a and c in b else "m" if c in a else "n"
                 for c in dims]  # fmt: skip
        return self._op("gemm", dtype, types, dims, [sa.get(c, 0) for c in dims], [sb.get(c, 0) for c in dims],
                        [so.get(c, 0) for c in dims])  # fmt: skip

    def _orders(self, x_ids, y_ids, keep) -> tuple[str, ...]:
        """The result order for A = x, B = y: batch indices, then y's free ones, then x's (unit
        stride in the result on x's innermost free index, as the kernel writes)."""
        batch = [c for c in x_ids if c in y_ids and c in keep]
        m = [c for c in x_ids if c not in y_ids and c in keep]
        n = [c for c in y_ids if c not in x_ids and c in keep]
        return (*batch, *n, *m)

    def _contract(self, sa: int, sb: int, keep: set[str], out_slot: int | None, where: str) -> tuple[int, tuple]:
        """Nodes computing the contraction of slots ``sa``, ``sb`` over what ``keep`` drops."""
        for s in (sa, sb):  # indices only one operand has and the result drops: sum them with ones
            other = self._slot_ids[sb if s == sa else sa]
            drop = [c for c in self._slot_ids[s] if c not in keep and c not in other]
            if drop:
                kept = tuple(c for c in self._slot_ids[s] if c not in drop)
                t = self._reduce(s, drop, kept, None, where)
                sa, sb = (t, sb) if s == sa else (sa, t)
        a_ids, b_ids = self._slot_ids[sa], self._slot_ids[sb]
        both_leaves_native = self._slot_dtype(sa) == self._slot_dtype(sb) == self.dtype_name
        dtype = self.dtype_name if both_leaves_native else "float32"
        err: Exception | None = None
        tries = []
        for x, y in ((sa, sb), (sb, sa)):  # in place, A = x; the final node tries the output order first
            xi, yi = self._slot_ids[x], self._slot_ids[y]
            if out_slot is not None and set(self._out_ids) == keep and xi and self._out_ids[-1:] == xi[-1:]:
                tries.append((x, y, self._out_ids))
            tries.append((x, y, self._orders(xi, yi, keep)))
        for x, y, order in tries:
            xi, yi = self._slot_ids[x], self._slot_ids[y]
            try:
                op = self._gemm_op(xi, yi, order, dtype)
            except SetupError as e:
                err = e
                continue
            if dtype == "float32":
                for s in (x, y):
                    if s < len(self.shapes) and self.dtype_name != "float32":
                        self.widen[s] = True
            return self._emit_gemm(op, x, y, order, out_slot, dtype), order
        # copy into [batch, k, m] and [batch, n, k] (the layouts the kernel always reads) what is not
        # read in place already: A with a free index innermost, B with a summed one; fewest copies
        best = None
        for x, y in ((sa, sb), (sb, sa)):
            xi, yi = self._slot_ids[x], self._slot_ids[y]
            batch = [c for c in xi if c in yi and c in keep]
            ks = [c for c in xi if c in yi and c not in keep]
            m = [c for c in xi if c not in yi]
            n = [c for c in yi if c not in xi]
            tx = xi if xi and xi[-1] in m else (*batch, *ks, *m)
            ty = yi if ks and yi and yi[-1] in ks else (*batch, *n, *ks)
            cost = sum(math.prod(self.sizes[c] for c in t) for t, i in ((tx, xi), (ty, yi)) if t != i)
            if best is None or cost < best[0]:
                best = (cost, x, y, tx, ty, batch, m, n)
        _, sa, sb, ta, tb, batch, m, n = best
        a_ids, b_ids = self._slot_ids[sa], self._slot_ids[sb]
        xa = sa if ta == a_ids else self._copy(sa, ta)
        xb = sb if tb == b_ids else self._copy(sb, tb)
        dtype = "float32" if self.dtype_name == "float32" or xa != sa or xb != sb else self.dtype_name
        for s in (sa, sb):
            if dtype == "float32" and s < len(self.shapes) and self.dtype_name != "float32":
                self.widen[s] = True
        order = (*batch, *n, *m)
        try:
            op = self._gemm_op(ta, tb, order, dtype)
        except SetupError as e:
            raise SetupError(e.code, f"einsum (cuda) node {where}: the CUDA GEMM takes no layout of it: {e.message}"
                             f" (in place: {err})") from None  # fmt: skip
        return self._emit_gemm(op, xa, xb, order, out_slot, dtype), order

    def _emit_gemm(self, op, x: int, y: int, order, out_slot: int | None, dtype: str) -> int:
        o = out_slot if out_slot is not None and order == self._out_ids else self._new_slot(order)
        ids = (self._slot_ids[x], self._slot_ids[y], tuple(order))
        self.nodes.append(_Node("gemm", op, (x, y, o), ids, dtype))
        return o

    def _reduce(self, slot: int, drop, kept, out_slot: int | None, where: str) -> int:
        """Sum ``drop`` out of ``slot`` as a GEMM with a ones vector (result in ``kept`` order)."""
        ids = self._slot_ids[slot]
        red = tuple(c for c in ids if c in drop)
        dtype = self._slot_dtype(slot)
        ones = np.ones(math.prod(self.sizes[c] for c in red), np.float32)
        if dtype == "float16":
            ones = ones.astype(np.float16)
        elif dtype == "bfloat16":
            ones = (ones.view(np.uint32) >> 16).astype(np.uint16)
        o = out_slot if out_slot is not None else self._new_slot(kept)
        err = None
        for a_ids, b_ids, s0, s1 in ((ids, red, slot, -1), (red, ids, -1, slot)):
            try:
                op = self._gemm_op(a_ids, b_ids, tuple(kept), dtype)
            except SetupError as e:
                err = e
                continue
            self.nodes.append(_Node("gemm", op, (s0, s1, o), (a_ids, b_ids, tuple(kept)), dtype, ones))
            return o
        # copy the summed indices innermost (fp32): the tensor is then B with K at unit stride
        t = self._copy(slot, (*[c for c in ids if c not in drop], *red))
        try:
            op = self._gemm_op(red, self._slot_ids[t], tuple(kept), "float32")
        except SetupError as e:
            raise SetupError(e.code, f"einsum (cuda) node {where}: cannot sum {''.join(red)} out of"
                             f" {''.join(ids)}: {e.message} (in place: {err})") from None  # fmt: skip
        f32 = np.ones(ones.size, np.float32)
        self.nodes.append(_Node("gemm", op, (-1, t, o), (red, self._slot_ids[t], tuple(kept)), "float32", f32))
        return o

    def _finish_to(self, slot: int, ids) -> None:
        """Bring the root result in ``slot`` (order ``ids``) to the output slot."""
        if slot == self._out_slot:
            return
        if tuple(ids) == self._out_ids:  # same order: the last node writes the output directly
            last = self.nodes[-1]
            if last.slots[2] == slot:
                last.slots = (*last.slots[:2], self._out_slot)
                return
        self._copy(slot, self._out_ids, self._out_slot)

    def _build(self) -> None:
        n = len(self.shapes)
        out = set(self._out_ids)
        low = lower(self.expr, self.shapes, self._optimize, 4)  # checks the path for one operand too
        if n == 1:
            ids = self._ids[0]
            drop = [c for c in ids if c not in out]
            if drop:
                kept = tuple(c for c in ids if c not in drop)
                s = self._reduce(0, drop, kept, None, f"0 ({''.join(ids)}->{''.join(kept)})")
                self._finish_to(s, kept)
            else:
                self._copy(0, self._out_ids, self._out_slot)
            return
        self.path = list(low.path)
        live = list(range(n))  # slots
        for step, st in enumerate(low.steps):
            sb, sa = live.pop(st.right), live.pop(st.left)
            last = not live
            a_ids, b_ids = self._slot_ids[sa], self._slot_ids[sb]
            where = f"{step} ({''.join(a_ids)},{''.join(b_ids)})"
            res, order = self._contract(sa, sb, set(st.kept), self._out_slot if last else None, where)
            if last:
                self._finish_to(res, order)
            live.append(res)

    # -- running -------------------------------------------------------------------------------
    def _drv(self):
        from ptx.driver import resolve

        return resolve(self.driver)

    def _leaf(self, i: int, x: Any, drv, keep: list, scratch: dict | None = None) -> Any:
        """Operand ``i`` as the nodes read it: checked shape and dtype; numpy data uploaded once;
        a device array in another dense order than C order reordered into ``scratch`` (``drv``
        None: check only)."""
        want = self.dtype_name
        if isinstance(x, np.ndarray) or not hasattr(x, "__cuda_array_interface__") and not hasattr(x, "data_ptr"):
            if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
                v = describe(x, f"operand {i}")
                x = v.obj
            else:
                x = np.asarray(x)
        if isinstance(x, np.ndarray):
            if x.shape != self.shapes[i]:
                raise ValueError(f"einsum plan: operand {i} has shape {x.shape}, the plan is for {self.shapes[i]}")
            host = CUDA_DTYPES[want][1]
            if x.dtype != host and not (want == "bfloat16" and x.dtype.name == "bfloat16"):
                raise TypeError(f"einsum (cuda): operand {i} has dtype {x.dtype}, the plan takes {want}"
                                f" ({host} host data)")  # fmt: skip
            if drv is None:
                return x
            x = np.ascontiguousarray(x)
            if self.widen[i]:
                x = _widen_host(x, want)
                want = "float32"
            if want == "bfloat16":
                return x.view(np.uint16)  # staged by the operation (no CAI type for bf16)
            buf = drv.to_device(x)
            keep.append(buf)
            return buffer_array(buf, x.shape, want)
        v = describe(x, f"operand {i}")
        require_dense(f"operand {i}", v.shape, v.strides, v.itemsize or 1)
        if v.shape != self.shapes[i]:
            raise ValueError(f"einsum plan: operand {i} has shape {v.shape}, the plan was built for {self.shapes[i]}")
        if v.dtype != want:
            raise TypeError(f"einsum (cuda): operand {i} holds {v.dtype.removeprefix('?')}, the plan takes {want}")
        if drv is None:
            return x
        if self.widen[i]:
            if not hasattr(v.obj, "float"):
                raise TypeError(
                    f"einsum (cuda): operand {i} must be widened to float32 for its node (it needs a permute or"
                    " meets a float32 intermediate) and is not a torch tensor: pass it as float32"
                )
            return v.obj.float().contiguous()
        if is_c_contiguous(v.shape, v.strides, v.itemsize):
            return v.obj
        if is_torch_tensor(v.obj):
            return v.obj.contiguous()  # reordered by torch, on the device
        from minijit.cuda.reorder import to_c_order  # noqa: PLC0415 - device calls only

        buf = scratch.get(("in", i))
        if buf is None:
            buf = scratch[("in", i)] = drv.DeviceBuffer(max(1, v.size * v.itemsize))
        to_c_order(drv, v, buf.ptr, self.device)
        return buffer_array(buf, v.shape, v.dtype)

    def execute(self, *operands, out=None, sync: bool = True):
        """Run the plan; returns ``out``, else a numpy array (numpy operands) or a device array.

        The nodes are launched back to back on the default stream. ``sync=False`` returns without
        waiting for them when the result is a device array (for timing with CUDA events or queuing
        more work); host operands and results always wait."""
        if len(operands) != len(self.shapes):
            raise ValueError(f"einsum plan: expected {len(self.shapes)} operands, got {len(operands)}")
        drv = self._drv()
        keep: list = []
        for i, x in enumerate(operands):  # every check before anything is uploaded or launched
            self._leaf(i, x, None, keep)
        host_result = out is None and array_library(operands) is None
        out_view = None  # a device out in another dense order than C order
        if out is not None:
            if isinstance(out, np.ndarray):
                if out.shape != self.out_shape or out.dtype != np.float32:
                    raise ValueError(f"einsum (cuda): out must be a float32 array of shape {self.out_shape}, got"
                                     f" {out.dtype} {out.shape}")  # fmt: skip
            else:
                v = describe(out, "out")
                if v.shape != self.out_shape or v.dtype != "float32":
                    raise ValueError(f"einsum (cuda): out must be float32 of shape {self.out_shape}, got {v.dtype}"
                                     f" {v.shape}")  # fmt: skip
                require_dense("out", v.shape, v.strides, v.itemsize)
                if v.read_only:
                    raise ValueError("einsum (cuda): out is read-only")
                if not is_c_contiguous(v.shape, v.strides, v.itemsize):
                    out_view = v  # written through a C-order buffer
        if self._empty:
            return self._zero_result(out, operands, drv)
        if not drv.available():
            raise RuntimeError("einsum (cuda): no CUDA device (ptx.driver.available() is False)")
        n_bytes = 4 * math.prod(self.out_shape)
        if out is not None:
            result = out
        elif host_result:
            result = np.empty(self.out_shape, np.float32)
        else:
            result = device_empty(operands, self.out_shape)
        # this call's intermediates: every node runs on the default stream, so a set given back
        # before its kernels ran (sync=False) is reused only by launches queued behind them
        scratch = self._scratch.acquire()
        try:
            leaves = [self._leaf(i, x, drv, keep, scratch) for i, x in enumerate(operands)]
            target = result
            if isinstance(result, np.ndarray) or out_view is not None:  # written on the device in C
                dev_out = scratch.get(-2)  # order, then copied back or reordered into out at the end
                if dev_out is None:
                    dev_out = scratch[-2] = buffer_array(drv.DeviceBuffer(max(4, n_bytes)), self.out_shape,
                                                         "float32")  # fmt: skip
                target = dev_out
            slots: dict[int, Any] = dict(enumerate(leaves))
            slots[self._out_slot] = target
            for node in self.nodes:
                for s in (*node.slots[:2], node.slots[2]):
                    if s is not None and s not in slots and s != -1:
                        slots[s] = self._intermediate(s, drv, scratch)
                s0, s1, so = node.slots
                a = self._ones(node, drv) if s0 == -1 else slots[s0]
                b = None if s1 is None else self._ones(node, drv) if s1 == -1 else slots[s1]
                node.op.execute(a, b, slots[so], sync=False)
            if out_view is not None:
                from minijit.cuda.reorder import from_c_order  # noqa: PLC0415 - device calls only

                from_c_order(drv, target.owner.ptr, out_view, self.device)
            host_target = target is not result and out_view is None
            if sync or host_target or any(isinstance(x, np.ndarray) for x in operands):
                drv.synchronize()  # (uploads of host operands are freed on return)
            if host_target:
                flat = result.reshape(-1) if result.flags.c_contiguous else None
                host = flat if flat is not None else np.empty(self.out_shape, np.float32)
                if host.size:
                    target.owner.copy_to(host.reshape(-1))
                if flat is None:
                    result[...] = host
        finally:
            self._scratch.release(scratch)
        return result

    __call__ = execute

    def _intermediate(self, slot: int, drv, scratch: dict) -> CudaArrayView:
        arr = scratch.get(slot)
        if arr is None:
            shape = tuple(self.sizes[c] for c in self._slot_ids[slot])
            arr = scratch[slot] = buffer_array(drv.DeviceBuffer(max(4, 4 * math.prod(shape))), shape, "float32")
        return arr

    def _ones(self, node: _Node, drv) -> Any:
        if node.dtype == "bfloat16":
            return node.ones  # host bit patterns, staged by the operation
        key = id(node)
        arr = self._ones_dev.get(key)
        if arr is None:
            arr = self._ones_dev[key] = buffer_array(drv.to_device(node.ones), node.ones.shape, node.dtype)
        return arr

    def _zero_result(self, out, operands, drv):
        if out is None and array_library(operands) is None:
            return np.zeros(self.out_shape, np.float32)
        if out is None:
            out = device_empty(operands, self.out_shape)
        if isinstance(out, np.ndarray):
            out[...] = 0
            return out
        if hasattr(out, "zero_"):
            out.zero_()
            return out
        if hasattr(out, "fill"):
            out.fill(0)
            return out
        raise TypeError("einsum (cuda): a zero-size contraction needs a numpy, torch or cupy out")

    # -- printing ------------------------------------------------------------------------------
    @property
    def flops(self) -> int:
        """Flops of the plan's nodes (2 per multiply-add of each GEMM; copies count 0)."""
        return sum(n.op.config.flops() for n in self.nodes)

    def listing(self) -> str:
        """One line per node: kind, indices, input type; then the widened operands."""
        n = len(self.shapes)

        def name(s):
            return "ones" if s == -1 else f"in{s}" if s < n else "out" if s == self._out_slot else f"t{s - n - 1}"

        lines = [f"CudaEinsumPlan {self.subscripts} shapes {self.shapes} {self.dtype_name} path {self.path}"]
        for k, node in enumerate(self.nodes):
            s0, s1, so = node.slots
            args = ", ".join(name(s) for s in (s0, s1) if s is not None)
            lines.append(f"node {k}: {name(so)} = {node.describe()}({args})")
        widened = [i for i, w in enumerate(self.widen) if w]
        if widened and self.dtype_name != "float32":
            lines.append(f"widened to float32 before the call: operands {widened}")
        return "\n".join(lines)

    def info(self) -> dict[str, Any]:
        """Target, dtype, operand shapes, node kinds and kernels, path, widened operands, flops."""
        return {
            "target": "cuda",
            "dtype": self.dtype_name,
            "shapes": list(self.shapes),
            "kernel": [n.op.info()["kernel"] for n in self.nodes],
            "nodes": [n.kind for n in self.nodes],
            "path": list(self.path),
            "widened": [i for i, w in enumerate(self.widen) if w],
            "flops": self.flops,
        }

    def __repr__(self) -> str:
        shapes, n = self.shapes, len(self.nodes)
        return f"CudaEinsumPlan({self.subscripts!r}, shapes={shapes}, dtype={self.dtype_name}, nodes={n})"


def _widen_host(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        bits = x.view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32)
    return x.astype(np.float32)


# the CPU plan's constructor from a tree and its host intermediates do not apply on the device
absent(
    CudaEinsumPlan,
    ("from_tree", "intermediate_shapes", "intermediate_bytes"),
    "a member of the CPU EinsumPlan; a CudaEinsumPlan has none",
)
