"""`Kernel` nodes: the first/main/last-touch primitives of a configuration, the calls its loop nest
makes to them, and the compiled loop nest (`minijit.kernels.loopnest`)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import cffi

from minijit import kernels
from minijit.errors import SetupError, error_t
from minijit.ir import BINARY_PTYPES, GEMM_PTYPES, UNARY_PTYPES, TensorConfig, dim_t, exec_t, ptype_t
from minijit.kernels.epilogue import Epilogue
from minijit.kernels.loopnest import Call, Loop, LoopNest
from minijit.plan.nodes import Kernel
from minijit.targets import CpuTarget
from minijit.targets.base import DtypeError

TENSORS = ("in0", "in1", "out")
RAW_SIGNATURE = "void(*)(uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t)"
_FFI = cffi.FFI()


def build(
    config: TensorConfig,
    target: CpuTarget,
    threads: int,
    *,
    native: bool,
    a_panel: int | None = None,
    b_panel: int | None = None,
    a_copy: bool = False,
    n_outer: bool = False,
    private_out: bool = False,
) -> Kernel:
    """The `Kernel` of ``config`` (its prim dims set) on ``target``, to run on ``threads`` threads
    (1 where it has one iteration). ``a_panel`` / ``b_panel``: in0 / in1 are packed in micro-panels
    that many elements apart; ``a_copy`` / ``n_outer``: BRGEMM options; ``private_out``: out is a
    private buffer that never overlaps in0 (plain copies may store whole vectors past a column)."""
    prims, calls = primitives(
        config, target, a_panel=a_panel, b_panel=b_panel, a_copy=a_copy, n_outer=n_outer, private_out=private_out
    )
    item = config.dtype.itemsize
    loops = tuple(
        Loop(d.size, tuple(s * item for s in d.strides), shared=d.exec is exec_t.shared, k=d.type is dim_t.k)
        for d in config.loop_dims
    )
    nest = LoopNest(loops, calls["main"], calls.get("first"), calls.get("last"))
    loopnest = kernels.compile_loopnest(nest, target=target)
    raw = _FFI.cast(RAW_SIGNATURE, loopnest.address) if native else None
    threads = 1 if nest.iterations == 1 else threads
    return Kernel(config, MappingProxyType(prims), nest, loopnest, raw, nest.iterations, threads, a_copy, n_outer)


def _generate(target: CpuTarget, generator: Any, *args: Any, **kwargs: Any) -> Any:
    """A cached kernel of ``generator``; the generators' refusals as `SetupError`."""
    try:  # every target generates every transposed BRGEMM form itself (no NEON stand-in on SVE)
        return generator(*args, target=target, **kwargs)
    except NotImplementedError as e:
        raise SetupError(error_t.wrong_ptype, f"target {target.name}: {e}") from None
    except DtypeError as e:  # a dtype the target has no such kernel for
        raise SetupError(error_t.wrong_dtype, f"target {target.name}: {e}") from None
    except ValueError as e:
        raise SetupError(error_t.wrong_size, f"target {target.name}: {e}") from None


class _Prims:
    """The prim dims of one config: sizes and strides per role, and the errors naming them."""

    def __init__(self, cfg: TensorConfig) -> None:
        self.dims, self.roles = cfg.dims, cfg.prim

    def stride(self, role: int | None, tensor: str) -> int:
        return 0 if role is None else self.dims[role].stride(tensor)

    def size(self, role: int | None) -> int:
        return 1 if role is None else self.dims[role].size

    def unit(self, role: int | None, tensor: str) -> bool:
        """Unit stride in ``tensor`` (a size-1 dim may have any stride)."""
        return self.size(role) == 1 or self.stride(role, tensor) == 1

    def fail(self, role: int | None, what: str) -> SetupError:
        at = f"dim {role} ({self.dims[role]})" if role is not None else "prim dims"
        return SetupError(error_t.wrong_stride, f"{at}: {what}", dim=role)


def primitives(
    cfg: TensorConfig,
    target: CpuTarget,
    *,
    a_panel: int | None = None,
    b_panel: int | None = None,
    a_copy: bool = False,
    n_outer: bool = False,
    private_out: bool = False,
) -> tuple[dict[str, Any], dict[str, Call]]:
    """The first/main/last kernels of ``cfg`` and the calls the loop nest makes to them (arguments
    as `build`'s)."""
    p, main = _Prims(cfg), cfg.prim_main
    if main in GEMM_PTYPES:
        kernel, call, fused = _gemm(cfg, p, target, a_panel, b_panel, a_copy, n_outer)
    elif main in UNARY_PTYPES:
        kernel, call, fused = *_unary(cfg, p, target, private_out), set()
    elif main in BINARY_PTYPES:
        kernel, call, fused = *_binary(cfg, p, target), set()
    else:
        raise SetupError(error_t.wrong_ptype, f"main primitive {main.name} is not supported")
    prims, calls = {"main": kernel}, {"main": call}
    # first/last touch: a unary op in place on the output block (column-major, unit stride M;
    # a transposing unary main has its unit-stride out dim in the N role)
    out_m, out_n = p.roles.m, p.roles.n
    if p.stride(out_m, "out") != 1 and p.size(out_m) > 1:
        out_m, out_n = out_n, out_m
    for which, ptype in (("first", cfg.prim_first), ("last", cfg.prim_last)):
        if ptype in (ptype_t.none, ptype_t.copy) or which in fused:  # copy in place changes nothing
            continue
        if ptype not in UNARY_PTYPES:
            raise SetupError(error_t.wrong_ptype, f"{which} touch must be none/zero/relu/copy, got {ptype.name}")
        if not p.unit(out_m, "out"):
            raise p.fail(out_m, f"{which} touch needs unit stride in out on the first prim dim")
        size_m, size_n = p.size(out_m), p.size(out_n)
        prims[which] = _generate(target, kernels.unary, size_m, size_n, ptype=ptype.name, dtype=cfg.dtype.name)
        ldo = p.stride(out_n, "out")
        calls[which] = Call(prims[which].address, ("out", "out", ldo, ldo))
    return prims, calls


def _gemm(
    cfg: TensorConfig,
    p: _Prims,
    target: CpuTarget,
    a_panel: int | None,
    b_panel: int | None,
    a_copy: bool,
    n_outer: bool,
) -> tuple[Any, Call, set[str]]:
    """The BRGEMM main kernel, its call, and the touches it applies itself."""
    m, n, k, br = p.roles.m, p.roles.n, p.roles.k, p.roles.br
    trans_c = not p.unit(m, "out")  # a strided y: one column of C, the kernels' transposed C
    if trans_c and p.size(n) != 1:
        raise p.fail(
            m,
            f"prim M needs unit stride in out (column-major C), got {p.stride(m, 'out')}; only a C of one"
            " column (prim N of size 1) may be strided",
        )
    trans_a = not p.unit(m, "in0")
    if trans_a and not p.unit(k, "in0"):
        raise p.fail(m, "prim M (or prim K, transposed) needs unit stride in in0")
    trans_b = not p.unit(k, "in1")
    if trans_b and not p.unit(n, "in1"):
        raise p.fail(k, "prim K (or prim N, transposed) needs unit stride in in1")
    lda = p.stride(m if trans_a else k, "in0")
    ldb = p.stride(k if trans_b else n, "in1")
    ldc = p.stride(m, "out") if trans_c else p.stride(n, "out")
    # a first touch zero / a last touch with an elementwise epilogue (relu) runs inside the kernel
    # where the target fuses them, every K is in the prim (each call then writes its C block once,
    # final) and the kernel is the vector BRGEMM or the GEMV; C crosses memory once
    fused: set[str] = set()
    options: dict[str, Any] = {name: v for name, v in (("a_panel", a_panel), ("b_panel", b_panel)) if v is not None}
    if target.fuses_touches and not any(d.type is dim_t.k for d in cfg.loop_dims):
        if p.size(n) == 1 or not (trans_a or trans_c):
            if cfg.prim_first is ptype_t.zero:
                fused.add("first")
                options["zero_c"] = True
            epilogue = Epilogue.for_last_touch(cfg.prim_last.name)
            if epilogue is not None and set(epilogue.ops) <= target.epilogue_ops:
                fused.add("last")
                options["epilogue"] = epilogue
    if a_copy:
        options["a_copy"] = True
    if n_outer and not trans_a:
        options["n_outer"] = True
    sizes = (p.size(m), p.size(n), p.size(k), p.size(br))
    flags = {"trans_a": trans_a, "trans_b": trans_b, "trans_c": trans_c}
    kernel = _generate(target, kernels.brgemm, *sizes, **flags, dtype=cfg.dtype.name, **options)
    args = ("in0", "in1", "out", lda, ldb, ldc, p.stride(br, "in0"), p.stride(br, "in1"))
    return kernel, Call(kernel.address, args), fused


def _unary(cfg: TensorConfig, p: _Prims, target: CpuTarget, private_out: bool) -> tuple[Any, Call]:
    """The unary main kernel (zero/copy/relu, maybe transposing) and its call."""
    main, m, n = cfg.prim_main, p.roles.m, p.roles.n
    src = "out" if main is ptype_t.zero else "in0"
    if not p.unit(m, src):
        raise p.fail(m, f"the unit-stride prim dim of {src} must be the first prim role")
    trans = main is not ptype_t.zero and not p.unit(m, "out")
    if trans and not p.unit(n, "out"):
        raise p.fail(n, "a transposing unary op needs a unit-stride prim dim in out")
    ldb = p.stride(m if trans else n, "out")
    # B rows (columns) back to back, e.g. a packed panel: unmasked edge stores (plain copies only
    # into a private buffer: in place, a spill would clobber elements not yet read)
    dense = ldb == p.size(n) if trans else private_out and ldb == p.size(m) and p.size(n) > 1
    kernel = _generate(
        target, kernels.unary, p.size(m), p.size(n), trans_b=trans, ptype=main.name, dense_b=dense, dtype=cfg.dtype.name
    )
    return kernel, Call(kernel.address, (src, "out", p.stride(n, src), ldb))


def _binary(cfg: TensorConfig, p: _Prims, target: CpuTarget) -> tuple[Any, Call]:
    """The binary main kernel and its call."""
    m, n = p.roles.m, p.roles.n
    for t in TENSORS:
        if not p.unit(m, t):
            raise p.fail(m, f"binary ops need unit stride in {t} on the first prim dim, got {p.stride(m, t)}")
    kernel = _generate(target, kernels.binary, p.size(m), p.size(n), ptype=cfg.prim_main.name, dtype=cfg.dtype.name)
    args = ("in0", "in1", "out", p.stride(n, "in0"), p.stride(n, "in1"), p.stride(n, "out"))
    return kernel, Call(kernel.address, args)
