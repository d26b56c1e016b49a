"""CUDA elementwise generator without a GPU: magic division, the kernel's index and offset math
(numpy model) against numpy strided views, planning (sort, fuse, width), ptxas for sm_80 and
sm_90 with no spills for every kernel variant, CudaTensorOperation setup/validation/reference."""

from __future__ import annotations

import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import ptx
from minijit import SetupError, TensorConfig, error_t
from minijit.cuda import CudaTensorOperation
from minijit.cuda import elementwise as ew
from tests.minijit.helpers import UFUNCS, seed_layout, trus_args

HAVE_PTXAS = ptx.find_ptxas() is not None


# --------------------------------------------------------------------------- configurations


def dense(sizes, order, pad: int = 0) -> list[int]:
    """Element strides of a tensor stored with dims ``order`` (outermost first), each stride
    padded by ``pad`` elements (padding keeps neighbours from fusing)."""
    st, acc = [0] * len(sizes), 1
    for i in reversed(order):
        st[i] = acc
        acc = acc * sizes[i] + pad
    return st


def ew_args(main, sizes, s0, s1, so, *, first="none", last="none", types=None) -> tuple:
    """setup() arguments of an elementwise op (fp32; seq loops around one or two prim dims)."""
    n = len(sizes)
    execs = ("seq",) * max(0, n - 2) + ("prim",) * min(n, 2)
    return ("fp32", first, main, last, types or "c" * n, execs, tuple(sizes), tuple(s0), tuple(s1), tuple(so))


def perm_args(main, sizes, perm, *, bcast=(), pad=0, last="none") -> tuple:
    """in0 (and in1) row-major, out stored in the dim order ``perm``; in1 broadcast (stride 0)
    over the dims in ``bcast``; unary ops get in1 strides 0."""
    n = len(sizes)
    s0 = dense(sizes, range(n), pad)
    s1 = [0 if (i in bcast or main in ew.UNARY) else s for i, s in enumerate(s0)]
    return ew_args(main, sizes, s0, s1, dense(sizes, perm, pad), last=last)


def cases() -> dict[str, tuple]:
    """Named setup arguments: permutations of 1..8 dims, broadcast, negative strides, padding,
    size-1 dims, K dims of zero, touches, for every primitive."""
    rng = np.random.default_rng(11)
    out = {}
    for T, R, U, S in ((3, 4, 7, 5), (1, 4, 1, 5), (7, 3, 4, 3)):
        for p in ("copy", "relu", "zero", "identity"):
            out[f"trus_{p}_{T}{R}{U}{S}"] = trus_args(p, T, R, U, S)
    for rank in range(1, 9):
        sizes = [int(x) for x in rng.integers(2, 4 if rank > 5 else 6, rank)]
        perm = [int(x) for x in rng.permutation(rank)]
        for main in (*ew.UNARY, *ew.BINARY):
            bcast = (int(rng.integers(rank)),) if main in ew.BINARY else ()
            out[f"r{rank}_{main}"] = perm_args(main, sizes, perm, bcast=bcast, pad=rank % 2)
    out["contiguous_copy"] = perm_args("copy", (4, 5, 6), (0, 1, 2))
    out["transpose_2d"] = perm_args("relu", (33, 17), (1, 0))
    out["bcast_all_but_one"] = perm_args("add", (3, 4, 5), (0, 1, 2), bcast=(0, 2))
    out["bcast_relu_last"] = perm_args("max", (6, 5), (1, 0), bcast=(1,), last="relu")
    out["zero_last"] = perm_args("div", (6, 5), (0, 1), last="zero")
    out["negative"] = ew_args("sub", (3, 4, 5), (-20, 5, -1), (1, -3, 12), (20, -5, 1))
    out["zero_k_dims"] = ew_args("zero", (3, 4, 5), (0, 0, 0), (0, 0, 0), (5, 0, 1), types="ckc")
    out["size_one"] = ew_args("mul", (1, 1, 1), (7, 3, 1), (0, 0, 0), (9, 9, 1))
    out["rank8_reversed"] = perm_args("copy", (2,) * 8, range(7, -1, -1))
    return out


CASES = cases()


def config(args) -> TensorConfig:
    return TensorConfig.from_lists(*args)


# --------------------------------------------------------------------------- index math


class _U32Model:
    """`ew.IntModel(32)` on uint64 arrays (a 32-bit product fits in 64 bits): the same wrapping,
    vectorized, for the exhaustive divisor sweep."""

    mask = np.uint64((1 << 32) - 1)

    def _w(self, x):
        return np.asarray(x, dtype=np.uint64) & self.mask

    def add(self, a, b):
        return self._w(np.asarray(a, np.uint64) + np.uint64(b) if np.isscalar(b) else np.asarray(a) + b)

    def sub(self, a, b):
        return self._w(np.asarray(a, np.uint64) - np.asarray(b, np.uint64))

    def mul(self, a, b):
        return self._w(np.asarray(a, np.uint64) * np.uint64(b))

    def mulhi(self, a, b):
        return self._w((np.asarray(a, np.uint64) * np.uint64(b)) >> np.uint64(32))

    def shr(self, a, s):
        return self._w(np.asarray(a, np.uint64) >> np.uint64(s))


def _check_magic(bits: int, divisors, numerators, model=None) -> None:
    model = model or ew.IntModel(bits)
    n = np.array(sorted(set(numerators)), dtype=object if isinstance(model, ew.IntModel) else np.uint64)
    for d in divisors:
        m, s = ew.magic(d, bits)
        assert 0 < m < 2**bits and 0 <= s < bits
        q = ew.decompose(model, n, [(d, m, s)])
        np.testing.assert_array_equal(q[1], n // d, err_msg=f"d={d}")
        np.testing.assert_array_equal(q[0], n % d, err_msg=f"d={d}")


def test_magic_division_32():
    rng = np.random.default_rng(0)
    top = 2**31 - 1
    divisors = list(range(1, 3000)) + [2**k + j for k in range(11, 31) for j in (-1, 0, 1)] + [top]
    divisors += [int(x) for x in rng.integers(1, top, 200)]
    nums = list(range(0, 5000)) + [top, top - 1, 2**30, 2**30 - 1] + [int(x) for x in rng.integers(0, top, 2000)]
    for d in (3, 7, 641, 46341, 2**20 + 1, top):  # around multiples of the divisor
        nums += [q * d + r for q in (1, 2, top // d) for r in (-1, 0, 1) if 0 <= q * d + r <= top]
    _check_magic(32, divisors, nums, _U32Model())  # every divisor, vectorized
    _check_magic(32, divisors[:200] + divisors[-260:], nums)  # the kernel's own model agrees


def test_magic_division_64():
    rng = np.random.default_rng(1)
    top = 2**63 - 1
    divisors = list(range(1, 300)) + [2**k + j for k in range(8, 62) for j in (-1, 0, 1)]
    divisors += [int(x) for x in rng.integers(1, 2**56, 100)]
    nums = list(range(0, 300)) + [top, top - 1, 2**56 - 1] + [int(x) for x in rng.integers(0, top, 300)]
    _check_magic(64, divisors, nums)


def test_magic_rejects_out_of_range_divisors():
    for d in (0, 2**31):
        with pytest.raises(ValueError, match="divisor"):
            ew.magic(d, 32)


def kernel_offsets(p: ew.Plan, e) -> np.ndarray:
    """Element offsets (rows: elements ``e``; columns: the kernel's tensors) the kernel forms, by
    the numpy model of the same formulas the generator emits."""
    model = ew.IntModel(p.bits)
    idx = ew.decompose(model, np.asarray(e, dtype=object), p.divisors)
    cols = [ew.offsets(model, idx, p.strides[t]) for t in p.spec.tensors]
    return np.stack([np.asarray(c, dtype=np.int64) // ew.ES for c in cols], axis=1)


def view_offsets(cfg: TensorConfig, tensors) -> np.ndarray:
    """Element offsets (rows: every index tuple of the config's dims) of numpy strided views."""
    shape = tuple(d.size for d in cfg.dims)
    cols = []
    for t in tensors:
        lo, hi = cfg.offset_range(t)
        base = np.arange(lo, hi + 1, dtype=np.int64)
        strides = tuple(d.stride(t) * base.itemsize for d in cfg.dims)
        cols.append(as_strided(base[-lo:], shape, strides).ravel())
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_index_math_matches_strided_views(name, wide):
    """Every element the kernel visits is one index tuple of the config (same in0/in1/out
    elements as numpy's strided views), each output element exactly once, all of them."""
    cfg = config(CASES[name])
    p = ew.plan(cfg, wide=wide)
    assert p.spec.wide == wide
    got = kernel_offsets(p, range(p.total))
    want = view_offsets(cfg, p.spec.tensors)
    np.testing.assert_array_equal(np.unique(got, axis=0), np.unique(want, axis=0))
    assert len(np.unique(got[:, -1])) == p.total  # each output element once


@pytest.mark.parametrize(
    "sizes,perm",
    [((46341, 46340), (1, 0)), ((1290, 1291, 1289), (2, 0, 1)), ((2**20 + 7, 2**20 + 3, 33), (1, 2, 0))],
)
def test_index_math_large(sizes, perm):
    """Element counts near and beyond 2**31 (the 64-bit variant), sampled elements."""
    cfg = config(perm_args("copy", sizes, perm))
    p = ew.plan(cfg)
    assert p.spec.wide == (math.prod(sizes) > ew.LIMIT32)
    rng = np.random.default_rng(2)
    e = [0, 1, p.total - 2, p.total - 1] + [int(x) for x in rng.integers(0, p.total, 500)]
    got = kernel_offsets(p, e)
    for row, ei in zip(got, e, strict=True):
        idx = []
        for n in p.sizes:
            ei, r = divmod(ei, n)
            idx.append(r)
        want = [sum(i * s for i, s in zip(idx, p.strides[t], strict=True)) // ew.ES for t in p.spec.tensors]
        assert list(row) == want


# --------------------------------------------------------------------------- planning


def test_plan_trus_to_turs():
    T, R, U, S = 3, 4, 7, 5
    p = ew.plan(config(trus_args("copy", T, R, U, S)))
    assert p.sizes == (S, R, U, T)  # sorted by out stride: s, r, u, t
    assert p.strides["out"] == (4, 4 * S, 4 * R * S, 4 * U * R * S)
    assert p.strides["in0"] == (4, 4 * U * S, 4 * S, 4 * R * U * S)
    assert p.spec == ew.KernelSpec("copy", False, 4, False)
    assert ew.plan(config(trus_args("zero", T, R, U, S))).sizes == (T * R * U * S,)  # out alone fuses


def test_plan_fuses_contiguous_and_drops_size_one_and_k():
    assert ew.plan(config(CASES["contiguous_copy"])).sizes == (120,)
    assert ew.plan(config(CASES["bcast_all_but_one"])).sizes == (5, 4, 3)  # broadcast splits
    assert ew.plan(config(perm_args("add", (3, 4, 5), (0, 1, 2), bcast=(0,)))).sizes == (20, 3)
    assert ew.plan(config(CASES["zero_k_dims"])).sizes == (15,)  # K dropped, the rest fuses
    p = ew.plan(config(CASES["size_one"]))
    assert p.sizes == (1,) and p.divisors == () and p.grid == (1, 1, 1)
    assert ew.plan(config(CASES["rank8_reversed"])).spec.rank == 8


def test_plan_touches_and_width():
    p = ew.plan(config(CASES["zero_last"]))
    assert p.spec.op == "zero" and p.spec.tensors == ("out",)
    assert ew.plan(config(CASES["bcast_relu_last"])).spec.relu
    assert ew.plan(config(perm_args("relu", (4, 5), (0, 1), last="relu"))).spec == ew.KernelSpec("relu", True, 1)
    big_stride = ew_args("copy", (2, 3), (2**29, 1), (0, 0), (3, 1))
    assert ew.plan(config(big_stride)).spec.wide  # 2**31 bytes
    assert not ew.plan(config(ew_args("copy", (2, 3), (2**29 - 1, 1), (0, 0), (3, 1)))).spec.wide
    p = ew.plan(config(perm_args("add", (2**16, 2**15 + 1), (0, 1))))
    assert p.spec.wide and p.grid == (ew.MAX_GRID, 1, 1)


@pytest.mark.parametrize("name", ["trus_relu_3475", "r5_min", "negative", "zero_k_dims"])
def test_plan_args_follow_the_signature(name):
    p = ew.plan(config(CASES[name]))
    args = p.args({"in0": 1 << 40, "in1": 2 << 40, "out": 3 << 40})
    assert len(args) == len(p.spec.params)
    for v, (pname, t) in zip(args, p.spec.params, strict=True):
        lo, hi = ptx.types.int_range(t)
        assert lo <= v <= hi, (pname, v, t)
    assert args[len(p.spec.tensors) - 1] == 3 << 40 and args[len(p.spec.tensors)] == p.total


# --------------------------------------------------------------------------- generated PTX


def all_specs() -> list[ew.KernelSpec]:
    """Every kernel variant the generator emits (default blocking), and those of every case."""
    specs = {
        ew.KernelSpec(op, relu, rank, wide)
        for op in ew.UNARY + ew.BINARY
        for relu in ((False,) if op == "zero" else (False, True))
        for rank in range(1, ew.MAX_RANK + 1)
        for wide in (False, True)
    }
    cased = {ew.plan(config(a), wide=w).spec for a in CASES.values() for w in (False, True)}
    assert cased <= specs
    return sorted(specs, key=lambda s: s.name)


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_sweep_no_spills(arch):
    specs = all_specs()
    assert len(specs) == 17 * ew.MAX_RANK * 2
    assemble_without_spills(specs, arch)


def assemble_without_spills(specs, arch: str) -> None:
    """ptxas for ``arch`` on every spec's kernel: no spills, no stack, no shared memory, at most 96
    registers, the signature of the spec's parameters."""

    def build(spec):
        k = ew.generate(spec)
        return spec, k, ptx.compile(k.text, arch=arch)[k.name]

    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        for spec, k, info in pool.map(build, specs):
            assert info.spills == 0 and info.stack_frame == 0, (spec.name, info)
            assert info.registers <= 96, (spec.name, info.registers)  # >= 2 CTAs of 256 per SM
            assert info.shared_bytes == 0
            assert k.signature == tuple(t for _, t in spec.params)


def test_generated_text_features():
    k = ew.generate(ew.KernelSpec("div", True, 3))
    text = k.text
    assert ".reqntid 256" in text and ".version 6.0" in text
    for ins in ("div.rn.f32", "mul.hi.u32", "mad.wide.s32", "min.u32", "setp.nan.f32", "bra.uni", "cvta.to.global"):
        assert ins in text, ins
    assert text.count("ld.global.f32") == 2 * ew.EPT and text.count("st.global.f32") == ew.EPT
    assert all(line.lstrip().startswith("@%p") for line in text.splitlines() if "st.global" in line)
    assert "ld.global.nc" not in text  # inputs may be out (in place)
    assert k.signature == ("u64",) * 3 + ("s32",) * (1 + 3 * 2 + 3 * 3)
    wide = ew.generate(ew.KernelSpec("min", False, 2, True)).text
    assert "mul.hi.u64" in wide and "mad.lo.s64" in wide and "div.rn" not in wide
    for op, ins in (("add", "add.rn.f32"), ("sub", "sub.rn.f32"), ("mul", "mul.rn.f32"), ("max", "setp.gt.f32")):
        assert ins in ew.generate(ew.KernelSpec(op)).text
    zero = ew.generate(ew.KernelSpec("zero", rank=2)).text
    assert "ld.global" not in zero and zero.count("st.global.f32") == ew.EPT


def test_spec_validation():
    for bad, match in (
        (ew.KernelSpec("pow"), "op"),
        (ew.KernelSpec("add", rank=9), "rank"),
        (ew.KernelSpec("add", block=100), "block"),
        (ew.KernelSpec("add", ept=0), "ept"),
    ):
        with pytest.raises(ValueError, match=match):
            ew.generate(bad)


def _select(a, b, greater: bool):
    """The kernel's min/max/relu formula, ``(a < b or a is NaN) ? a : b`` (``>`` for max)."""
    cmp = a > b if greater else a < b
    return np.where(cmp | np.isnan(a), a, b)


def special_values() -> np.ndarray:
    """NaNs (two payloads, both signs), +-0, +-inf, subnormals, ordinary values (fp32)."""
    v = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.5, -2.5, 3e38, 1.0, -1.0], np.float32)
    return np.concatenate([v, np.array([0x7FC00123, 0xFFC00000, 0x7F800001], np.uint32).view(np.float32)])


def test_min_max_relu_formula_is_numpy_bit_for_bit():
    """The selects the kernel emits reproduce np.minimum / np.maximum / np.maximum(x, 0) exactly,
    NaN payloads and signed zeros included (the GPU tests check the PTX does the same)."""
    v = special_values()
    a, b = np.repeat(v, v.size), np.tile(v, v.size)
    for fn, greater in ((np.minimum, False), (np.maximum, True)):
        np.testing.assert_array_equal(_select(a, b, greater).view(np.uint32), fn(a, b).view(np.uint32))
    z = np.float32(0)
    np.testing.assert_array_equal(_select(v, z, True).view(np.uint32), np.maximum(v, z).view(np.uint32))


# --------------------------------------------------------------------------- CudaTensorOperation


def test_operation_setup_errors():
    op = CudaTensorOperation()
    for dtype in ("fp16", "bf16", "fp64", "tf32"):
        with pytest.raises(SetupError, match="fp32") as e:
            op.setup(*((dtype,) + CASES["r2_add"][1:]))
        assert e.value.code is error_t.wrong_dtype
    bad = {
        "stride-0 out (broadcast into out)": (ew_args("add", (3, 4), (4, 1), (0, 1), (0, 1)), "nonzero stride_out"),
        "overlapping out": (ew_args("copy", (3, 4), (4, 1), (0, 0), (1, 1)), "overlap"),
        "K dim in a copy": (ew_args("copy", (3, 4), (4, 1), (0, 0), (0, 1), types="kc"), "K dimensions"),
        "in1 of a unary op": (ew_args("relu", (3, 4), (4, 1), (4, 1), (4, 1)), "no in1"),
        "nine dims that do not fuse": (perm_args("copy", (2,) * 9, range(8, -1, -1)), "takes 8"),
        "non-integer stride": (ew_args("add", (3, 4), (4, 1.5), (4, 1), (4, 1)), "integer"),
        "size 0": (ew_args("add", (3, 0), (4, 1), (4, 1), (4, 1)), "size"),
    }
    for what, (args, match) in bad.items():
        op = CudaTensorOperation()
        with pytest.raises(SetupError, match=match):
            op.setup(*args)
        assert op.config is None and op.plan is None, what
    dims, sizes, s0, s1, so = seed_layout(2, 2, 2, 8, 8, 8)
    gemm = config(("fp32", "zero", "gemm", "none", dims, ("seq",) * 3 + ("prim",) * 3, sizes, s0, s1, so))
    with pytest.raises(SetupError, match="elementwise kernels run") as e:
        ew.plan(gemm)
    assert e.value.code is error_t.wrong_ptype


def test_operation_setup_then_gemm_then_elementwise():
    """Switching between GEMM and elementwise setups keeps the state consistent."""
    op = CudaTensorOperation()
    op.setup(*trus_args("relu", 3, 4, 3, 4))
    assert op.plan is not None and op.spec is None and op.dtype == "f32"
    assert "ew_relu_r4_i32" in op.ptx() and "ew_relu" in repr(op)
    dims, sizes, s0, s1, so = seed_layout(2, 2, 2, 32, 32, 32)
    op.setup("fp16", "zero", "gemm", "none", dims, ("seq", "seq", "seq", "prim", "prim", "prim"), sizes, s0, s1, so)
    assert op.plan is None and op.spec is not None
    assert op.launch_args(0, 0, 0, tables=(1, 2))[0] == op.kernel_spec().name
    with pytest.raises(ValueError, match="tables"):
        op.launch_args(0, 0, 0)
    op.setup_config(config(CASES["r3_max"]))
    assert op.plan.spec.op == "max" and op.spec is None


def test_operation_validates_arrays_before_launch():
    op = CudaTensorOperation()
    op.setup(*perm_args("add", (3, 4), (1, 0)))
    x = np.zeros((3, 4), np.float32)
    out = np.zeros((4, 3), np.float32)
    with pytest.raises(TypeError, match="dtype"):
        op.execute(x.astype(np.float64), x, out)
    with pytest.raises(TypeError, match="in1 is required"):
        op.execute(x, None, out)
    with pytest.raises(ValueError, match="outside"):
        op.execute(x, x[:2], out)
    with pytest.raises(TypeError, match="dtype"):
        op.execute(x, x, out.astype(np.float16))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        op.execute(x, x, out)
    relu = CudaTensorOperation()
    relu.setup(*trus_args("relu", 2, 3, 4, 5))
    with pytest.raises(TypeError, match="in0 is required"):
        relu.execute(None, None, np.zeros(120, np.float32))
    with pytest.raises(RuntimeError, match="before a successful setup"):
        CudaTensorOperation().execute(x, x, out)


def test_operation_execute_without_gpu_is_a_clear_error():
    from ptx import driver

    if driver.available():
        pytest.skip("a GPU is present")
    op = CudaTensorOperation()
    op.setup(*trus_args("zero", 2, 3, 4, 5))
    with pytest.raises(RuntimeError, match="GPU"):
        op.execute(None, None, np.zeros(120, np.float32))
    op.setup(*trus_args("copy", 2, 3, 4, 5))
    with pytest.raises(RuntimeError, match="GPU"):
        op.execute(np.zeros(120, np.float32), None, np.zeros(120, np.float32))


def test_operation_reference_and_launch_args():
    rng = np.random.default_rng(3)
    T, R, U, S = 3, 4, 7, 5
    a = rng.standard_normal((T, R, U, S)).astype(np.float32)
    op = CudaTensorOperation()
    op.setup(*trus_args("relu", T, R, U, S))
    out = np.full((T, U, R, S), 9.0, np.float32)
    op.reference(a, None, out)
    np.testing.assert_array_equal(out, np.maximum(a.transpose(0, 2, 1, 3), 0))
    name, grid, block, args = op.launch_args(4096, 0, 8192)
    assert name == op.plan.spec.name and grid == (1, 1, 1) and block == (256, 1, 1)
    assert args[:3] == (4096, 8192, T * R * U * S)
    for main in ew.BINARY:
        op.setup(*perm_args(main, (6, 5), (1, 0), bcast=(1,), last="relu"))
        x, y = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((6, 1)).astype(np.float32)
        got = np.zeros((5, 6), np.float32)
        op.reference(x, np.broadcast_to(y, (6, 5)).copy(), got)  # in1 strides (5, 0): reads column 0
        with np.errstate(divide="ignore"):
            np.testing.assert_array_equal(got, np.maximum(UFUNCS[main](x, y), 0).T)
    op.setup(*CASES["zero_k_dims"])
    out = np.ones(20, np.float32)  # the strides reach elements 0..14
    op.reference(None, None, out)
    assert (out[:15] == 0).all() and (out[15:] == 1).all()
    with pytest.raises(TypeError, match="simulate"):
        op.simulate(None, None, out)


def test_tensor_operation_cuda_target_runs_elementwise():
    from minijit import TensorOperation

    op = TensorOperation("cuda")
    assert op.setup(*trus_args("identity", 3, 4, 3, 4)) is error_t.success
    assert op.plan.spec.op == "copy"
    for p in itertools.chain(ew.UNARY, ew.BINARY):
        assert p in ew.generate(ew.KernelSpec(p)).name


# --------------------------------------------------------------------------- 2-byte copies (reorder)


def b16_copy_specs() -> list[ew.KernelSpec]:
    """Every 2-byte copy variant: rank 1..MAX_RANK, 32- and 64-bit indices."""
    return [ew.KernelSpec("copy", rank=r, wide=w, es=2) for r in range(1, ew.MAX_RANK + 1) for w in (False, True)]


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_b16_copies_no_spills(arch):
    specs = b16_copy_specs()
    assert len(specs) == ew.MAX_RANK * 2
    assemble_without_spills(specs, arch)


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_b16_copy_sass_moves_16_bit_elements(arch):
    """In the SASS (cuobjdump), every global data access of a 2-byte copy is a 16-bit load or
    store: no wider access could read or write past an element the arrays own."""
    import re

    from ptx import toolchain

    if toolchain.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    for spec in (ew.KernelSpec("copy", rank=1, es=2), ew.KernelSpec("copy", rank=3, wide=True, es=2)):
        sass = toolchain.sass(ptx.compile(ew.generate(spec).text, arch=arch))
        ops = set(re.findall(r"\b((?:LDG|STG)\.[A-Z0-9.]+)", sass))
        assert ops == {"LDG.E.U16", "STG.E.U16"}, (spec.name, ops)


def test_b16_copy_text_and_validation():
    k = ew.generate(ew.KernelSpec("copy", rank=3, es=2))
    assert "_b16_" in k.name and k.name != ew.KernelSpec("copy", rank=3).name
    assert k.text.count("ld.global.b16") == ew.EPT and k.text.count("st.global.b16") == ew.EPT
    assert ".f32" not in k.text  # a bit move: no float register, no conversion
    for bad, match in (
        (ew.KernelSpec("add", es=2), "copy only"),
        (ew.KernelSpec("copy", relu=True, es=2), "copy only"),
        (ew.KernelSpec("zero", es=2), "copy only"),
        (ew.KernelSpec("copy", es=3), "es"),
    ):
        with pytest.raises(ValueError, match=match):
            ew.generate(bad)


@pytest.mark.parametrize("es", [2, 4])
@pytest.mark.parametrize("wide", [False, True])
def test_copy_plan_index_math_matches_strided_views(es, wide):
    """`copy_plan` from a shape and two element-stride layouts (every axis order of a dense block
    to C order, and back; size-1 axes): the kernel's offsets (numpy model) visit each pair of
    elements numpy's strided views pair, each destination element once."""
    shape = (3, 1, 4, 5)
    c = dense(shape, range(4))
    for order in itertools.permutations(range(4)):
        src = dense(shape, order)
        for a, b in ((src, c), (c, src)):
            p = ew.copy_plan(shape, a, b, es, wide=wide)
            assert p.spec.es == es and p.spec.op == "copy" and p.spec.wide == wide
            model = ew.IntModel(p.bits)
            idx = ew.decompose(model, np.arange(p.total, dtype=object), p.divisors)
            got = [np.asarray(ew.offsets(model, idx, p.strides[t]), np.int64) // es for t in ("in0", "out")]
            base = np.arange(math.prod(shape), dtype=np.int64)
            want = [as_strided(base, shape, tuple(s * 8 for s in st)).ravel() for st in (a, b)]
            np.testing.assert_array_equal(np.unique(np.stack(got, 1), axis=0), np.unique(np.stack(want, 1), axis=0))
            assert len(np.unique(got[1])) == p.total


def test_copy_plan_refuses_what_the_kernel_cannot_run():
    for args, match in (
        (((3, 4), (4, 1), (1,)), "rank"),
        (((3, 0), (1, 3), (1, 3)), ">= 1"),
        (((3, 4), (4, 1), (0, 1)), "repeat"),
        (((2,) * 9, dense((2,) * 9, range(9)), dense((2,) * 9, range(8, -1, -1))), "takes 8"),
        (((2, 3), (2**61, 1), (3, 1)), "2\\*\\*62"),
    ):
        with pytest.raises(ValueError, match=match):
            ew.copy_plan(*args, 2)
    assert ew.copy_plan((4, 5), (5, 1), (5, 1), 2).sizes == (20,)  # C order to C order fuses
