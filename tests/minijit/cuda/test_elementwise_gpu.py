"""Elementwise CUDA kernels against numpy, in the PTX simulator (always) and on a GPU (``gpu``
mark; the big shapes and device arrays there only): trus -> turs and other
permutations, the CPU path's unary configs, binary ops with broadcast and touches, NaN / -0.0 /
inf / subnormal semantics, negative strides, the grid-stride loop and the 64-bit index variant,
device arrays; every output buffer carries a guard zone after out."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from minijit import TensorOperation
from minijit.cuda import CudaTensorOperation
from minijit.cuda import elementwise as ew
from ptx import driver
from tests.conftest import CudaBackend
from tests.minijit.cuda.test_elementwise_ptx import CASES, config, perm_args, special_values
from tests.minijit.helpers import UFUNCS, trus_args

GUARD = 256
SENTINEL = np.float32(-12345.0)
TRUS = list(itertools.product((3, 4, 7), repeat=4))


def guarded(n: int, fill: float = 7.0) -> np.ndarray:
    """A flat out buffer: ``n`` elements of ``fill``, then GUARD sentinels (staged with it)."""
    buf = np.full(n + GUARD, SENTINEL, np.float32)
    buf[:n] = fill
    return buf


def run(be, args, in0, in1, shape, fill: float = 7.0) -> np.ndarray:
    """Set up ``args`` on backend ``be``, execute into a guarded buffer laid out row-major as
    ``shape``, check the guard, return the output."""
    op = CudaTensorOperation(driver=be.driver)
    op.setup(*args)
    n = math.prod(shape)
    buf = guarded(n, fill)
    op.execute(in0, in1, buf)
    assert (buf[n:] == SENTINEL).all(), "store past out"
    return buf[:n].reshape(shape)


def assert_bits(got, want) -> None:
    """Equal bit patterns (signed zeros and NaN payloads included)."""
    want = np.broadcast_to(np.asarray(want, np.float32), got.shape)
    np.testing.assert_array_equal(got.view(np.uint32), np.ascontiguousarray(want).view(np.uint32))


def assert_values(got, want) -> None:
    """NaN where numpy has NaN (any payload: GPU arithmetic returns the canonical NaN), the same
    bits everywhere else (signed zeros included)."""
    want = np.ascontiguousarray(np.broadcast_to(np.asarray(want, np.float32), got.shape))
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert_bits(got[~nan], want[~nan])


def sample(rng, shape, specials: bool = True) -> np.ndarray:
    """Uniform values in [-10, 10), with -0.0, +0.0 and NaN sprinkled in."""
    x = rng.uniform(-10, 10, shape).astype(np.float32)
    if specials and x.size > 3:
        flat = x.reshape(-1)
        flat[:: max(1, flat.size // 7)] = -0.0
        flat[1 :: max(1, flat.size // 5)] = np.nan
        flat[2 :: max(1, flat.size // 3)] = 0.0
    return x


def unary_expected(ptype: str, a: np.ndarray) -> np.ndarray:
    if ptype == "zero":
        return np.zeros_like(a)
    return np.maximum(a, np.float32(0)) if ptype == "relu" else a


# --------------------------------------------------------------------------- unary permutations


@pytest.mark.parametrize("ptype", ["identity", "copy", "relu", "zero"])
def test_trus_to_turs(cuda_backend, ptype):
    """out[t, u, r, s] = op(in0[t, r, u, s]) for T, R, U, S in {3, 4, 7}
    (docs/seeds/004_mini_jit_backend.txt section 5.6.2)."""
    rng = np.random.default_rng(5)
    for T, R, U, S in TRUS:
        a = sample(rng, (T, R, U, S))
        got = run(cuda_backend, trus_args(ptype, T, R, U, S), None if ptype == "zero" else a, None, (T, U, R, S))
        assert_bits(got, unary_expected(ptype, a.transpose(0, 2, 1, 3)))


@pytest.mark.parametrize("T,R,U,S", [(64, 128, 96, 33), (5, 1000, 3, 257), (2, 2048, 1024, 1), (1, 1, 1, 1)])
@pytest.mark.parametrize("ptype", ["copy", "relu"])
@pytest.mark.gpu
def test_trus_to_turs_bigger(dev, ptype, T, R, U, S):
    a = sample(np.random.default_rng(6), (T, R, U, S))
    got = run(CudaBackend("gpu", driver, dev), trus_args(ptype, T, R, U, S), a, None, (T, U, R, S))
    assert_bits(got, unary_expected(ptype, a.transpose(0, 2, 1, 3)))


def test_all_permutations_of_four_dims(cuda_backend):
    rng = np.random.default_rng(7)
    sizes = (6, 7, 8, 9)
    a = sample(rng, sizes)
    for perm in itertools.permutations(range(4)):
        for ptype in ("copy", "relu"):
            got = run(cuda_backend, perm_args(ptype, sizes, perm), a, None, tuple(sizes[i] for i in perm))
            assert_bits(got, unary_expected(ptype, a.transpose(perm)))


@pytest.mark.parametrize("ptype", ["copy", "relu"])
def test_cpu_unary_transpositions_of_prim_dims(cuda_backend, ptype):
    """The CPU path's transposing unary configs: out[x, z, y] = op(A[x, y, z])."""
    rng = np.random.default_rng(8)
    shapes = [(2, 5, 3), (3, 17, 9), (1, 33, 4), (4, 1, 8)]
    for a_, b_, c_ in shapes + ([] if cuda_backend.simulated else [(16, 1000, 999)]):
        a = sample(rng, (a_, b_, c_))
        args = (
            "fp32", "none", ptype, "none", "ccc", ("seq", "prim", "prim"), (a_, b_, c_),
            (b_ * c_, c_, 1), (0, 0, 0), (b_ * c_, 1, b_),
        )  # fmt: skip
        got = run(cuda_backend, args, a, None, (a_, c_, b_))
        assert_bits(got, unary_expected(ptype, a.transpose(0, 2, 1)))


@pytest.mark.parametrize("name", sorted(n for n in CASES if n.startswith("r")))
def test_generated_cases(cuda_backend, name):
    """The CI cases (1..8 dims, permutations, padding, broadcast) against CudaTensorOperation.reference."""
    args = CASES[name]
    op = CudaTensorOperation(driver=cuda_backend.driver)
    op.setup(*args)
    cfg = op.config
    rng = np.random.default_rng(9)
    arrays = []
    for t in ("in0", "in1"):
        lo, hi = cfg.offset_range(t)
        used = cfg.uses_in0 if t == "in0" else cfg.uses_in1
        arrays.append(sample(rng, hi + 1) if used and lo == 0 else None)
    n = cfg.offset_range("out")[1] + 1
    want = np.full(n, 7.0, np.float32)
    op.reference(*arrays, want)
    buf = guarded(n)
    op.execute(*arrays, buf)
    assert (buf[n:] == SENTINEL).all(), "store past out"
    assert_values(buf[:n], want)


# --------------------------------------------------------------------------- binary ops


@pytest.mark.parametrize("last", ["none", "relu", "zero"])
@pytest.mark.parametrize("ptype", sorted(UFUNCS))
def test_binary_with_broadcast(cuda_backend, ptype, last):
    """out[c, n, m] = last(in0 (op) in1), in1 full or broadcast (stride 0) over n or over c."""
    rng = np.random.default_rng(10)
    shapes = [(3, 17, 5), (2, 4, 64), (1, 1, 1), (5, 33, 7)]
    for s0, s1, s2 in shapes + ([] if cuda_backend.simulated else [(64, 300, 257)]):
        x, y = sample(rng, (s0, s1, s2)), sample(rng, (s0, s1, s2))
        for bcast in ((), (1,), (0,), (0, 2)):
            args = perm_args(ptype, (s0, s1, s2), (0, 1, 2), bcast=bcast, last=last)
            yb = y[tuple(slice(0, 1) if i in bcast else slice(None) for i in range(3))]
            got = run(cuda_backend, args, x, y, (s0, s1, s2))  # in1 strides as y's, 0 on the broadcast dims
            with np.errstate(all="ignore"):
                want = UFUNCS[ptype](x, yb)
            want = np.maximum(want, np.float32(0)) if last == "relu" else want
            want = np.zeros_like(x) if last == "zero" else want
            (assert_bits if ptype in ("min", "max") else assert_values)(got, want)


@pytest.mark.parametrize("ptype", sorted(UFUNCS))
def test_binary_special_values(cuda_backend, ptype):
    """All pairs of NaN (payloads, signs), +-0, +-inf, subnormals, finite values: min/max bit for
    bit as np.minimum/np.maximum (first NaN propagates, the second of two equal zeros), IEEE
    arithmetic otherwise."""
    v = special_values()
    x, y = np.repeat(v, v.size), np.tile(v, v.size)
    n = x.size
    got = run(cuda_backend, perm_args(ptype, (n,), (0,)), x, y, (n,))
    with np.errstate(all="ignore"):
        want = UFUNCS[ptype](x, y)
    (assert_bits if ptype in ("min", "max") else assert_values)(got, want)


def test_unary_special_values(cuda_backend):
    """ReLU keeps NaN (with its payload), turns -0.0 into +0.0; copy moves bits (signalling NaN too)."""
    v = special_values()
    n = v.size
    for ptype in ("copy", "relu"):
        assert_bits(run(cuda_backend, perm_args(ptype, (n,), (0,)), v, None, (n,)), unary_expected(ptype, v))
    for last in ("relu", "none"):  # a ReLU last touch after min, with NaN from either side
        x, y = np.repeat(v, n), np.tile(v, n)
        got = run(cuda_backend, perm_args("min", (n * n,), (0,), last=last), x, y, (n * n,))
        want = np.minimum(x, y)
        assert_bits(got, np.maximum(want, np.float32(0)) if last == "relu" else want)


def test_first_touch_is_overwritten_and_touches_match_the_cpu_path(cuda_backend):
    """Same results as the CPU TensorOperation (x86/AArch64 JIT) for every touch combination."""
    rng = np.random.default_rng(11)
    x, y = sample(rng, (6, 20)), sample(rng, (6, 20))
    for first, main, last in itertools.product(["none", "zero", "relu"], ["sub", "max", "relu"], ["none", "relu"]):
        args = ("fp32", first, main, last, "nm", ("prim", "prim"), (6, 20), (20, 1),
                (0, 0) if main == "relu" else (20, 1), (20, 1))  # fmt: skip
        cpu = TensorOperation("native", num_threads=1)
        cpu.setup(*args)
        want = np.full((6, 20), -3.0, np.float32)
        cpu.execute(x, None if main == "relu" else y, want)
        got = run(cuda_backend, args, x, None if main == "relu" else y, (6, 20), fill=-3.0)
        assert_values(got, want)


# --------------------------------------------------------------------------- layouts and launches


def origin(view: np.ndarray, buf: np.ndarray) -> int:
    """Element offset of ``view``'s first element in C-contiguous ``buf``."""
    return (view.ctypes.data - buf.ctypes.data) // buf.itemsize


def test_negative_strides(cuda_backend):
    rng = np.random.default_rng(12)
    a = sample(rng, (4, 5, 6))
    v = a[::-1, :, ::-1]  # in0 strides (-30, 6, -1) relative to its first element
    s0 = tuple(s // 4 for s in v.strides)
    oa = origin(v, a)
    for main in ("copy", "add"):
        args = ("fp32", "none", main, "none", "ccc", ("seq", "prim", "prim"), (4, 5, 6), s0,
                s0 if main == "add" else (0, 0, 0), (6, 24, 1))  # fmt: skip
        op = CudaTensorOperation(driver=cuda_backend.driver)
        op.setup(*args)
        buf = guarded(120)
        with pytest.raises(ValueError, match="in0 is not one dense block"):  # the view itself
            op.execute(v, v if main == "add" else None, buf)
        op.execute(a, a if main == "add" else None, buf, offsets=(oa, oa, 0))
        assert (buf[120:] == SENTINEL).all(), "store past out"
        want = v.transpose(1, 0, 2)
        assert_values(buf[:120].reshape(5, 4, 6), want + want if main == "add" else want)
    out = np.full((5, 4, 6), 7.0, np.float32)
    o = out[::-1, ::-1]  # out with negative strides too
    op = CudaTensorOperation(driver=cuda_backend.driver)
    op.setup("fp32", "none", "relu", "none", "ccc", ("seq", "prim", "prim"), (4, 5, 6), s0, (0, 0, 0),
             tuple(s // 4 for s in o.transpose(1, 0, 2).strides))  # fmt: skip
    with pytest.raises(ValueError, match="out is not one dense block"):
        op.execute(a, None, o, offsets=(oa, 0, 0))
    assert (out == 7.0).all()
    op.execute(a, None, out, offsets=(oa, 0, origin(o, out)))
    assert_bits(o.transpose(1, 0, 2), np.maximum(v, np.float32(0)))


def _launch_direct(be, p: ew.Plan, x: np.ndarray, y: np.ndarray, n_out: int, grid) -> np.ndarray:
    """Launch ``p``'s kernel through ptx.driver with our own grid; in0/in1/out start at element 0."""
    k = ew.generate(p.spec)
    driver = be.driver
    _, fn = be.load(k.text, k.name, k.signature)
    dx, dy, do = driver.to_device(x), driver.to_device(y), driver.to_device(guarded(n_out))
    fn.launch(grid, p.block, args=p.args({"in0": dx.ptr, "in1": dy.ptr, "out": do.ptr}))
    driver.synchronize()
    out = do.to_host(np.float32, n_out + GUARD)
    assert (out[n_out:] == SENTINEL).all(), "store past out"
    return out[:n_out]


@pytest.mark.parametrize("wide", [False, True])
def test_grid_stride_loop_and_index_widths(cuda_backend, wide):
    """Small grids loop over the whole operation; the 64-bit variant computes the same."""
    rng = np.random.default_rng(13)
    # the simulator runs the same loops over fewer elements (grids (1,1,1) and (3,1,1) still loop)
    sizes = (7, 40, 61) if cuda_backend.simulated else (7, 300, 61)
    x, y = sample(rng, sizes), sample(rng, (7, 1, 61))
    for main, perm in (("max", (2, 0, 1)), ("div", (1, 2, 0)), ("copy", (0, 2, 1))):
        cfg = config(perm_args(main, sizes, perm, bcast=(1,)))
        p = ew.plan(cfg, wide=wide)
        assert p.spec.wide == wide
        yfull = np.ascontiguousarray(np.broadcast_to(y, sizes))  # in1 strides as row-major, 0 over dim 1
        want = np.full(x.size, 7.0, np.float32)
        op = CudaTensorOperation(driver=cuda_backend.driver)
        op.setup_config(cfg)
        op.reference(x, yfull, want)
        for grid in ((1, 1, 1), (3, 1, 1), p.grid):
            got = _launch_direct(cuda_backend, p, x, yfull, x.size, grid)
            assert_values(got, want)


class _DeviceArray:
    """A bare ``__cuda_array_interface__`` over a driver buffer (what cupy/numba arrays expose)."""

    def __init__(self, buf, n: int):
        self.buf = buf
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "<f4", "data": (buf.ptr, False), "version": 3, "strides": None,
        }  # fmt: skip


@pytest.mark.gpu
def test_device_arrays(dev):
    rng = np.random.default_rng(14)
    T, R, U, S = 7, 33, 65, 129
    a = sample(rng, (T, R, U, S))
    n = a.size
    da, do = driver.to_device(a.reshape(-1)), driver.to_device(guarded(n))
    op = CudaTensorOperation()
    op.setup(*trus_args("relu", T, R, U, S))
    op.execute(_DeviceArray(da, n), None, _DeviceArray(do, n + GUARD))
    out = do.to_host(np.float32, n + GUARD)
    assert (out[n:] == SENTINEL).all(), "store past out"
    assert_bits(out[:n].reshape(T, U, R, S), np.maximum(a.transpose(0, 2, 1, 3), np.float32(0)))


def _views_follow_the_array_rule(op, x, y0, out0, y, out) -> None:
    """``op`` set up with the strides of the views ``y`` (``y0`` broadcast, stride 0) and ``out``
    (``out0`` permuted): the broadcast view is not one dense block, so it is refused naming in1
    (and so is a permuted out passed with it); the tensors the views were taken from, with the
    views described by the strides, are read and written in place."""
    with pytest.raises(ValueError, match=r"in1 is not one dense block .*np\.ascontiguousarray\(in1\)"):
        op.execute(x, y, out0)
    with pytest.raises(ValueError, match=r"in1 is not one dense block"):
        op.execute(x, y, out)
    op.execute(x, y0, out0)


def test_array_rule_for_broadcast_and_permuted_views(cuda_backend):
    """numpy arrays (copied to the device): the views of test_torch_tensors, in the simulator too."""
    shape = (8, 300, 65) if not cuda_backend.simulated else (3, 20, 9)
    rng = np.random.default_rng(15)
    x = rng.standard_normal(shape).astype(np.float32)
    y0 = rng.standard_normal((shape[0], 1, shape[2])).astype(np.float32)
    out0 = np.full((shape[1], shape[0], shape[2]), np.nan, np.float32)
    y, out = np.broadcast_to(y0, shape), out0.transpose(1, 0, 2)
    el = x.itemsize
    op = CudaTensorOperation(driver=cuda_backend.driver)
    op.setup("fp32", "none", "min", "none", "ccc", ("seq", "prim", "prim"), shape,
             tuple(t // el for t in x.strides), tuple(t // el for t in y.strides),
             tuple(t // el for t in out.strides))  # fmt: skip
    _views_follow_the_array_rule(op, x, y0, out0, y, out)
    assert_bits(out, np.minimum(x, y))


@pytest.mark.gpu
def test_torch_tensors(dev):
    """torch CUDA tensors follow the array rule (`minijit.arrays`): the expanded (stride-0) view
    is refused naming in1; the tensors the views come from, with the views in setup's strides, work."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = torch.randn((8, 300, 65), device="cuda")
    y0 = torch.randn((8, 1, 65), device="cuda")
    y = y0.expand(8, 300, 65)  # stride 0 over dim 1
    out0 = torch.full((300, 8, 65), float("nan"), device="cuda")
    out = out0.permute(1, 0, 2)  # a dense permutation of out0
    op = CudaTensorOperation()
    op.setup("fp32", "none", "min", "none", "ccc", ("seq", "prim", "prim"), tuple(x.shape), x.stride(), y.stride(),
             out.stride())  # fmt: skip
    _views_follow_the_array_rule(op, x, y0, out0, y, out)
    torch.testing.assert_close(out, torch.minimum(x, y), rtol=0, atol=0)
