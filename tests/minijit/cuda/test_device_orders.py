"""Dense device arrays in any axis order (issue 36, `minijit.arrays`): SpMM's device B and C and a
CudaEinsumPlan's device operands and ``out`` in C order, F order and permuted order give numpy's
result, reordered on the device by the elementwise copy kernel (`minijit.cuda.reorder`; 2-byte
elements as .b16 bits); the caller's output is written exactly within its block (guard elements
around it in the same allocation stay untouched); views with gaps are refused before any launch.
In the PTX simulator always, on a GPU with the ``gpu`` mark (`cuda_backend`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from minijit.cuda import elementwise as ew
from minijit.cuda import reorder
from minijit.einsum.cuda import CudaEinsumPlan
from minijit.runtime.device_arrays import describe
from minijit.sparse import SpMM
from minijit.sparse.precision import precision
from ptx.mma import f32_to_bf16_bits
from tests.minijit.einsum.test_cuda import _check, _host
from tests.minijit.sparse.helpers import skewed

GUARD = 16  #: elements of guard before and after a device block (64 bytes for fp32: 16-byte aligned)
SENTINEL = -12345.0


class _Cai:
    """A bare ``__cuda_array_interface__`` with explicit byte strides (what cupy / torch CUDA expose)."""

    def __init__(self, ptr: int, shape, typestr: str, strides=None, read_only: bool = False):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (ptr, read_only), "version": 3, "strides": strides,
        }  # fmt: skip


def held(x: np.ndarray, order: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """The memory of ``x`` stored with its axes in ``order`` (outermost first), C-contiguous, and the
    byte strides of ``x``'s own axes over that memory."""
    mem = np.ascontiguousarray(x.transpose(order))
    strides = [0] * x.ndim
    for pos, ax in enumerate(order):
        strides[ax] = mem.strides[pos]
    return mem, tuple(strides)


class Guarded:
    """A device allocation: GUARD sentinel elements, a block of ``shape`` held in axis ``order``
    (filled with ``fill``), GUARD sentinels; ``cai`` is the caller's view of the block."""

    def __init__(self, drv, shape, order, dtype=np.float32, typestr="<f4", fill=np.nan, host=None):
        self.shape, self.order, self.dtype = tuple(shape), tuple(order), np.dtype(dtype)
        block = np.full(self.shape, fill, dtype) if host is None else host
        self.mem, self.strides = held(block, self.order)
        self.size = self.mem.size
        whole = np.full(self.size + 2 * GUARD, SENTINEL, dtype)
        whole[GUARD : GUARD + self.size] = self.mem.reshape(-1)
        self.buf = drv.to_device(whole)
        self.ptr = self.buf.ptr + GUARD * self.dtype.itemsize
        self.cai = _Cai(self.ptr, self.shape, typestr, strides=self.strides)

    def read(self) -> np.ndarray:
        """The block as its logical ``shape``; asserts the guards are untouched."""
        whole = self.buf.to_host(self.dtype, (self.size + 2 * GUARD,))
        guards = np.concatenate([whole[:GUARD], whole[GUARD + self.size :]])
        np.testing.assert_array_equal(guards, np.full(2 * GUARD, SENTINEL, self.dtype), err_msg="write outside out")
        mem = whole[GUARD : GUARD + self.size].reshape(tuple(self.shape[a] for a in self.order))
        return np.ascontiguousarray(mem.transpose(np.argsort(self.order)))


# --------------------------------------------------------------------------- the reorder copy


@pytest.mark.parametrize("dtype", [np.float16, np.uint16, np.float32])
def test_reorder_round_trip_matches_numpy(cuda_backend, dtype):
    """Every axis order of a 3-D block to C order and back (2-byte kernels for fp16 and bf16 bits,
    4-byte for fp32), bit for bit against the numpy model (`elementwise.reference`); the C-order
    buffer and the caller's block are written only within themselves."""
    drv = cuda_backend.driver
    rng = np.random.default_rng(1)
    shape = (3, 5, 7)
    x = rng.integers(0, 2**16 if dtype is np.uint16 else 100, shape).astype(dtype)
    typestr = {np.float16: "<f2", np.uint16: "<V2", np.float32: "<f4"}[dtype]
    for order in itertools.permutations(range(3)):
        src = Guarded(drv, shape, order, dtype, typestr, host=x)
        dst = Guarded(drv, shape, (0, 1, 2), dtype, typestr, fill=0)
        reorder.to_c_order(drv, describe(src.cai, "x"), dst.ptr)
        drv.synchronize()
        want = np.zeros(shape, dtype)
        ew.reference("copy", "none", x, None, want)
        np.testing.assert_array_equal(dst.read().view(np.uint8), want.view(np.uint8))
        back = Guarded(drv, shape, order, dtype, typestr, fill=0)
        reorder.from_c_order(drv, dst.ptr, describe(back.cai, "x"))
        drv.synchronize()
        np.testing.assert_array_equal(back.read().view(np.uint8), x.view(np.uint8))


def test_reorder_refuses_gaps_and_skips_c_order():
    ptr = 1 << 20
    c = describe(_Cai(ptr, (4, 6), "<f2"), "B")
    f = describe(_Cai(ptr, (4, 6), "<f2", strides=(2, 8)), "B")
    assert not reorder.needs_reorder(c, "B") and reorder.needs_reorder(f, "B")
    for strides in ((24, 2), (2, 16), (-12, 2)):  # a row slice of a wider array, every other column, reversed
        with pytest.raises(ValueError, match="B is not one dense block"):
            reorder.needs_reorder(describe(_Cai(ptr, (4, 6), "<f2", strides=strides), "B"), "B")


# --------------------------------------------------------------------------- SpMM


def _spmm_reference(s, b, dtype) -> tuple[np.ndarray, np.ndarray]:
    """S_q @ B_q in float64 (operands rounded as the kernel rounds them) and the sums of |products|."""
    p = precision(dtype)
    sq = sp.csr_matrix((p.quantize(s.data).astype(np.float64), s.indices, s.indptr), shape=s.shape)
    bq = p.quantize(b).astype(np.float64)
    return sq @ bq, abs(sq) @ np.abs(bq)


#: (B order, C order) of a call: (0, 1) is C order, (1, 0) F order
LAYOUTS = [((1, 0), (0, 1)), ((0, 1), (1, 0)), ((1, 0), (1, 0))]


@pytest.mark.parametrize("strategy", ["tca", "window"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
def test_spmm_device_b_and_c_in_any_order(cuda_backend, strategy, dtype):
    drv = cuda_backend.driver
    rng = np.random.default_rng(7)
    m, k, n = 24, 40, 16
    s = skewed(m, k, 0.25, rng)
    b = rng.standard_normal((k, n)).astype(np.float32)
    device_b, typestr = {"fp16": (b.astype(np.float16), "<f2"), "bf16": (f32_to_bf16_bits(b), "<V2"),
                         "tf32": (b, "<f4")}[dtype]  # fmt: skip
    op = SpMM(s, n, dtype=dtype, target="cuda", driver=drv, strategy=strategy)
    assert op.strategy == strategy
    want, scale = _spmm_reference(s, b, dtype)
    in_place = None  # the result with B and C in C order (read and written in place)
    for b_order, c_order in [((0, 1), (0, 1)), *LAYOUTS]:
        B = Guarded(drv, (k, n), b_order, device_b.dtype, typestr, host=device_b)
        C = Guarded(drv, (m, n), c_order)
        assert op.execute(B.cai, C.cai) is C.cai
        got = C.read()
        assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6), (b_order, c_order)
        in_place = got if in_place is None else in_place
        if cuda_backend.simulated:  # the same kernel on the same values: the same bits
            np.testing.assert_array_equal(got, in_place, err_msg=f"B {b_order}, C {c_order}")
        B.read()  # the input's guards too


def test_spmm_device_gaps_refused_before_any_launch(cuda_backend):
    drv = cuda_backend.driver
    rng = np.random.default_rng(8)
    m, k, n = 16, 32, 8
    s = skewed(m, k, 0.3, rng)
    op = SpMM(s, n, target="cuda", driver=drv, strategy="tca")
    B = Guarded(drv, (k, n), (1, 0), np.float16, "<f2", host=rng.standard_normal((k, n)).astype(np.float16))
    C = Guarded(drv, (m, n), (1, 0))
    bad = [
        (_Cai(B.ptr, (k, n), "<f2", strides=(4 * n, 2)), C.cai, "B is not one dense block"),  # every other row
        (_Cai(B.ptr, (k, n), "<f2", strides=(2, 2 * k + 16)), C.cai, "B is not one dense block"),  # padded columns
        (B.cai, _Cai(C.ptr, (m, n), "<f4", strides=(4, 8 * m)), "C is not one dense block"),
        (B.cai, _Cai(C.ptr + 4 * (m - 1), (m, n), "<f4", strides=(-4, 4 * m)), "C is not one dense block"),
        (B.cai, _Cai(C.ptr, (m, n), "<f4", strides=(4, 4 * m), read_only=True), "C is read-only"),
    ]
    for bb, cc, text in bad:
        with pytest.raises(ValueError, match=text):
            op.execute(bb, cc)
    assert np.isnan(C.read()).all()  # nothing launched


# --------------------------------------------------------------------------- CudaEinsumPlan


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_einsum_plan_operands_and_out_in_any_order(cuda_backend, dtype):
    """``bij,bjk->bik`` with every axis order of operand 1 and of ``out`` (and F order of operand 0):
    numpy's result, the output written only within its block."""
    drv = cuda_backend.driver
    rng = np.random.default_rng(9)
    subs, shapes = "bij,bjk->bik", [(2, 8, 6), (2, 6, 10)]
    plan = CudaEinsumPlan(subs, *shapes, dtype=dtype, driver=drv)
    typestr = "<f2" if dtype == "float16" else "<f4"
    ops = [_host(sh, dtype, rng) for sh in shapes]
    orders = list(itertools.permutations(range(3)))
    for i, order in enumerate(orders):
        a = Guarded(drv, shapes[0], (2, 1, 0) if i % 2 else (0, 1, 2), ops[0].dtype, typestr, host=ops[0])
        b = Guarded(drv, shapes[1], order, ops[1].dtype, typestr, host=ops[1])
        out = Guarded(drv, (2, 8, 10), orders[-1 - i])
        assert plan(a.cai, b.cai, out=out.cai) is out.cai
        _check(out.read(), subs, ops, dtype)
        a.read()  # the inputs' guards too
        b.read()
        _check(plan(a.cai, b.cai), subs, ops, dtype)  # a numpy result


def test_einsum_plan_gaps_refused_before_any_launch(cuda_backend):
    drv = cuda_backend.driver
    rng = np.random.default_rng(10)
    subs, shapes = "bij,bjk->bik", [(2, 8, 6), (2, 6, 10)]
    plan = CudaEinsumPlan(subs, *shapes, dtype="float32", driver=drv)
    a, b = (Guarded(drv, sh, (2, 0, 1), host=_host(sh, "float32", rng)) for sh in shapes)
    out = Guarded(drv, (2, 8, 10), (1, 2, 0))
    with pytest.raises(ValueError, match="operand 1 is not one dense block"):  # every other element of the rows
        plan(a.cai, _Cai(b.ptr, (2, 6, 10), "<f4", strides=(480, 80, 8)), out=out.cai)
    with pytest.raises(ValueError, match="operand 0 is not one dense block"):  # reversed rows
        plan(_Cai(a.ptr + 4 * 5, (2, 8, 6), "<f4", strides=(4 * 48, 4 * 6, -4)), b.cai, out=out.cai)
    with pytest.raises(ValueError, match="out is not one dense block"):
        plan(a.cai, b.cai, out=_Cai(out.ptr, (2, 8, 10), "<f4", strides=(4 * 80, 4 * 10, 8)))
    with pytest.raises(ValueError, match="out is read-only"):
        plan(a.cai, b.cai, out=_Cai(out.ptr, (2, 8, 10), "<f4", strides=out.strides, read_only=True))
    assert np.isnan(out.read()).all()  # nothing launched
