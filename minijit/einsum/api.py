"""`einsum` and `contract_path`: numpy's interface over cached `EinsumPlan`s (CPU and CUDA)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from minijit import jit as _jit
from minijit.einsum import cached as _cached
from minijit.einsum import dtypes as _dtypes
from minijit.einsum import generic as _generic
from minijit.einsum import grammar as _grammar
from minijit.einsum import keywords as _keywords
from minijit.einsum.cached import check_target as _check_target
from minijit.einsum.dtypes import compiled_dtype as _dtype
from minijit.einsum.parse import parse_subscripts
from minijit.einsum.views import view_of_base
from minijit.runtime.device_arrays import device_kind, host_array, host_result, like_input

if TYPE_CHECKING:
    from minijit.einsum.plan import EinsumPlan

__all__ = ["contract_path", "einsum"]


def _widen():
    """`minijit.einsum.widen`, imported at the first call that needs it (not at ``import minijit``)."""
    from minijit.einsum import widen

    return widen


def contract_path(subscripts: str, *shapes, optimize: Any = True, itemsize: int = 4):
    """``(path, info)`` like ``np.einsum_path``: the numpy-style path and a text with its cost.

    ``shapes``: shapes or arrays; numpy's grammar and ``optimize`` forms as `einsum` (a repeated
    index within an operand counts as its diagonal; an explicit path comes back pairwise)."""
    subscripts, shapes, optimize = _grammar.canonicalize(subscripts, shapes, optimize, shapes_only=True)
    expr = parse_subscripts(subscripts, *shapes)
    from minijit.einsum import path as _path  # noqa: PLC0415 - the planner loads on first use
    from minijit.einsum.lowering import lower  # noqa: PLC0415

    low = lower(expr, [tuple(getattr(s, "shape", s)) for s in shapes], optimize, itemsize)
    sizes, ins, out, path = expr.sizes, list(low.sets), frozenset(low.output), list(low.path)
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


def einsum(
    subscripts: Any = _dtypes.MISSING,
    *operands,
    out=None,
    optimize: Any = _dtypes.AUTO,
    target: str = "auto",
    dtype=None,
    order: Any = None,
    casting: str | None = None,
    driver=None,
    explain: bool = False,
):
    """numpy-compatible einsum on minijit's kernels (float32/float64, int32/int64), numpy's for the rest.

    The result dtype is ``dtype`` or numpy's result type of the operands. float32 and float64 run
    on minijit's kernels, and so do int32/int64 numpy arrays with an int32/int64 result (wrapping
    as numpy's, on targets with integer kernels). Other dtypes run on those kernels too
    (`minijit.einsum.widen`): complex64/complex128 on the float32/float64 kernels (3M, three real
    products, for steps whose m, n, k reach `widen.GAUSS_MIN`; the real 4M formulation below),
    float16 (and torch CPU bfloat16 tensors) widened to float32 and rounded once, bool as 0/1
    float32, and int8/int16/uint8-uint64 and mixed integer kinds on
    int32/int64 (numpy's wrap-around, bit for bit). What remains (longdouble, clongdouble, object,
    integers mixed with floats or complex, an ``out`` of another dtype, a one-operand view) runs on
    numpy's einsum, with numpy's result and errors (`minijit.einsum.dtypes`). ``order`` ('C', 'F',
    'A', 'K') and ``casting``
    ('no', 'equiv', 'safe', 'same_kind', 'unsafe') as numpy's (`minijit.einsum.keywords`). Their
    defaults (None): numpy's 'K' (C-contiguous operands give a C-order result; others the layout
    numpy's einsum gives, following their strides), and numpy's 'safe' casting except that float32
    and float64 convert to each other for ``dtype=`` and ``out=``. A
    call numpy refuses by its keywords (no operands, an unknown order or casting, a cast the rule
    forbids) raises numpy's error. ``explain=True`` returns, instead of the result, a text saying
    which path the call takes (numpy's and why, the compiled plan's listing, or the route of
    `minijit.einsum.widen` in words with the real einsums it runs).

    numpy's whole grammar (`minijit.einsum.grammar`): ``...`` with
    broadcasting, repeated indices within one operand (read as a diagonal view), implicit outputs,
    the sublist form, and ``optimize`` as numpy takes it (a bool, "greedy", "optimal", or an
    explicit path as ``np.einsum_path`` gives it; by default True, but numpy's own default for a
    call numpy's einsum runs); ValueError where numpy refuses the subscripts.
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
    a device operand that fills one dense block in any axis order (F order, permuted) is read in
    place, one with gaps raises ValueError naming it;
    ``driver``: `ptx.simdriver` runs it in the PTX simulator.

    Sparse operands (`minijit.sparseauto.SparseTensor`, scipy.sparse CSR/CSC/COO, pydata
    ``sparse.COO``/``GCXS``) run on the SparseAuto path (`minijit.sparseauto.sparse_einsum`,
    native x86-64; ``target="aarch64-neon"``/``"aarch64-sve"`` or an `AArch64Target`: AArch64
    code, emulated on other hosts): the planner's schedule (``optimize=False``: TACO's default linear schedule),
    compiled once per subscripts, formats, shapes and dtype. The result comes back in the
    operands' own types (`minijit.sparseauto.interop`): pydata inputs get what ``sparse.einsum``
    returns, scipy inputs scipy's conventions (a sampled SDDMM-like output as the sampled
    operand's class), `SparseTensor` inputs a numpy array or a sampled `SparseTensor`.
    """
    if _is_sparse(subscripts) or any(_is_sparse(x) for x in operands):
        opt = True if optimize is _dtypes.AUTO else optimize
        return _einsum_sparse(subscripts, operands, out, opt, target, dtype, driver)
    first_plain = operands and type(operands[0]) is np.ndarray
    if operands and not first_plain and dtype is None and all(map(_widen().is_torch_bf16, operands)):
        return _einsum_bf16(subscripts, operands, out, optimize, target, order, casting, explain)
    why = _dtypes.numpy_reason(subscripts, operands, out, dtype, order, casting, target, driver)
    # other dtypes on the compiled kernels of a wider or real dtype (ints, bool, float16, complex)
    route = None if why is None else _widen().route(subscripts, operands, out, dtype, order, casting, target)
    if route is not None:
        return _einsum_widened(route, subscripts, operands, out, optimize, target, order, explain, dtype, casting)
    if explain:
        return _dtypes.explain(why, subscripts, operands, optimize=optimize, target=target, dtype=dtype)
    if why is not None:  # no compiled path: numpy's einsum, numpy's result or error
        return _dtypes.numpy_einsum(
            subscripts, operands, out=out, dtype=dtype, order=order, casting=casting, optimize=optimize
        )
    if out is None and _keywords.layout_needed(order, operands):  # C order is what the kernels write
        result = einsum(
            subscripts, *operands, optimize=optimize, target=target, dtype=dtype, order="C", casting=casting
        )
        return _keywords.apply_order(result, order, subscripts, list(operands))
    optimize = True if optimize is _dtypes.AUTO else optimize  # the default: True (numpy's: False)
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
    why = None if numpy_only else _dtypes.host_reason(arrays, out, dtype, casting)
    route = None if why is None else _widen().route(subscripts, arrays, out, dtype, None, casting, target)
    if route is not None:  # torch CPU or DLPack operands of a dtype computed on wider kernels
        result = _einsum_widened(route, subscripts, arrays, out, optimize, target, None, False, dtype, casting)
        return caller_out if caller_out is not None else host_result(result, like)
    if why is not None:  # torch CPU or DLPack operands of a dtype without a compiled path
        result = _dtypes.numpy_einsum(subscripts, arrays, out=out, dtype=dtype, casting=casting, optimize=optimize)
        return caller_out if caller_out is not None else host_result(result, like)
    if out is not None and any(np.may_share_memory(out, x) for x in arrays):
        # out is (a view of) an operand: the kernels would read what they already wrote. numpy
        # computes into a buffer first; so does this call
        result = einsum(subscripts, *arrays, optimize=optimize, target=target, dtype=dtype)
        np.copyto(out, result, casting="same_kind")
        return caller_out
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
    plan = _cached.PLANS.get(key)
    if plan is None:
        shapes = [x.shape for x in arrays]  # the background build holds no array

        def build() -> EinsumPlan:
            from minijit.einsum.plan import EinsumPlan  # noqa: PLC0415 - the planner loads on first use

            return _cached.PLANS.get_or_create(
                key,
                lambda: EinsumPlan(subscripts, *shapes, dtype=dt, target=target, optimize=optimize, strides=strides),
                admit=_small_enough,  # a plan keeps a set of intermediates
            )

        if target == "native" and _jit.mode() == "tiered":
            # the generic tier: a new shape runs at once; the specialised plan is built in the background
            generic = _generic.plan_for(subscripts, arrays, dt, key)
            if generic is not None and _generic.usable_out(out, generic):
                result = generic.execute(arrays[0], arrays[1], out)
                generic.note_call(build)
                return caller_out if caller_out is not None else host_result(result, like)
        plan = build()
    result = plan.execute(*arrays, out=out)
    return caller_out if caller_out is not None else host_result(result, like)


def _einsum_widened(route, subscripts, operands, out, optimize, target, order, explain, dtype=None, casting=None):
    """`einsum` of a call `minijit.einsum.widen` computes on wider or real kernels (``route``):
    numpy's result dtype and layout for ``order``, written to ``out`` (numpy's error when its
    shape is not the result's); ``explain``: the route in words and the real einsums it runs."""
    opt = True if optimize is _dtypes.AUTO else optimize
    subs, arrays, opt = _grammar.canonicalize(subscripts, operands, opt)
    arrays = [np.asarray(x) for x in arrays]

    def call(s, *xs, optimize=True, explain=False):
        c_order = None if all(x.flags.c_contiguous for x in xs) else "C"  # None: numpy_reason's quick check
        return einsum(s, *xs, optimize=optimize, target=target, order=c_order, explain=explain)

    if explain:
        return _widen().explain(route, subs, arrays, opt, call)
    result = _widen().run(route, subs, arrays, opt, call)
    if out is not None:
        if out.shape != result.shape:  # numpy's error
            kw = {"dtype": dtype, "casting": casting, "order": order, "optimize": optimize}
            return _dtypes.numpy_einsum(subscripts, operands, out=out, **kw)
        np.copyto(out, result)
        return out
    if _keywords.layout_needed(order, operands):
        return _keywords.apply_order(result, order, subscripts, list(operands))
    return result


def _einsum_bf16(subscripts, operands, out, optimize, target, order, casting, explain):
    """`einsum` on torch CPU bfloat16 tensors (`minijit.einsum.widen.is_torch_bf16`): widened to
    float32 in torch, contracted on the float32 kernels, a bfloat16 result (``out``: a bfloat16
    torch tensor written in place, as torch's ``out=``)."""
    import torch  # noqa: PLC0415 - the operands are torch tensors: torch is there

    wide = [x.float() for x in operands]
    kw = {"optimize": optimize, "target": target, "order": order, "casting": casting}
    if explain:
        return f"minijit compiled: {_widen().BF16_ROUTE}\n{einsum(subscripts, *wide, explain=True, **kw)}"
    result = einsum(subscripts, *wide, **kw).to(torch.bfloat16)
    if out is None:
        return result
    if not (isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == result.shape):
        shape = tuple(result.shape)
        raise TypeError(f"einsum: out must be a bfloat16 torch tensor of shape {shape} for bfloat16 operands")
    out.copy_(result)
    return out


def _is_sparse(x: Any) -> bool:
    """A sparse operand, recognised by its type without importing scipy or pydata sparse."""
    if type(x) is np.ndarray:
        return False
    mod = type(x).__module__ or ""
    return mod.startswith(("scipy.sparse", "minijit.sparseauto")) or (
        mod.startswith("sparse") and hasattr(x, "fill_value")
    )


def _einsum_sparse(subscripts, operands, out, optimize, target, dtype, driver):
    """`einsum` with a sparse operand: `minijit.sparseauto.front.einsum`."""
    from minijit.sparseauto.front import einsum as sparse_front  # noqa: PLC0415 - the sparse path loads on first use

    return sparse_front(subscripts, operands, out, optimize, target, dtype, driver)


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
    return plan.intermediate_bytes <= _cached.PLAN_CACHE_MAX_BYTES


def _einsum_cuda(subscripts, operands, out, optimize, dtype, driver):
    from minijit.einsum.cuda import CudaEinsumPlan, cuda_dtype, operand_info

    infos = [operand_info(i, x) for i, x in enumerate(operands)]
    subscripts, operands, infos = _device_blocks_in_c_order(subscripts, list(operands), infos)
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
    plan = _cached.PLANS.get_or_create(
        key, lambda: CudaEinsumPlan(subscripts, *shapes, dtype=dt, optimize=optimize, driver=driver)
    )
    return plan.execute(*operands, out=out)


def _device_blocks_in_c_order(subscripts: str, operands: list, infos: list) -> tuple[str, list, list]:
    """Device operands that fill one dense block in another axis order (F order, permuted axes;
    `minijit.arrays`) as C-order views of that block, their indices relabelled outermost to
    innermost (as the CPU path relabels host arrays), so the plan reads them in place: a torch
    tensor permuted, a cupy array transposed, other device arrays as a `CudaArrayView`. C-order
    operands, host arrays and views with gaps (refused by the plan, naming them) are unchanged."""
    from minijit.arrays import dense_order, is_c_contiguous  # noqa: PLC0415 - the device path only
    from minijit.einsum.cuda import operand_info  # noqa: PLC0415
    from minijit.runtime.device_arrays import CudaArrayView, describe, is_device_array, is_torch_tensor  # noqa: PLC0415

    perms: dict[int, tuple[int, ...]] = {}
    for i, x in enumerate(operands):
        if isinstance(x, np.ndarray) or not (is_device_array(x) or is_torch_tensor(x)):
            continue
        v = describe(x, f"operand {i}")
        if not v.itemsize or is_c_contiguous(v.shape, v.strides, v.itemsize):
            continue
        order = dense_order(v.shape, v.strides, v.itemsize)
        if order is None:
            continue
        perms[i] = order
        if is_torch_tensor(x):
            operands[i] = x.permute(*order)
        elif type(x).__module__.startswith("cupy"):
            operands[i] = x.transpose(order)
        else:
            shape, strides = (tuple(t[ax] for ax in order) for t in (v.shape, v.strides))
            operands[i] = CudaArrayView(v.ptr, shape, strides, v.dtype, v.obj)
    if not perms:
        return subscripts, operands, infos
    expr = parse_subscripts(subscripts, *(shape for shape, _ in infos))
    subs = ["".join(sub[ax] for ax in perms[i]) if i in perms else sub for i, sub in enumerate(expr.inputs)]
    infos = [operand_info(i, operands[i]) if i in perms else info for i, info in enumerate(infos)]
    return ",".join(subs) + "->" + expr.output, operands, infos
