"""TCA-SpMM PTX kernels: ptxas for sm_80/sm_90 without spills; results vs scipy in the PTX
simulator (always) and on a GPU (``gpu`` mark)."""

from __future__ import annotations

import numpy as np
import pytest

import ptx
from minijit.sparse import SpMM, tca
from minijit.sparse import layout as L
from ptx import toolchain
from tests.minijit.sparse.helpers import quantized_reference, skewed

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="ptxas not found")


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("n, seg", [(8, 2), (64, 2), (100, 2), (256, 1), (512, 4), (13, 3)])
def test_kernels_assemble_without_spills(arch, n, seg):
    cub = ptx.compile(tca.build(n, seg).text(), arch=arch)
    assert set(cub.functions) == {"tca_spmm", "tca_reduce"}
    for f in cub.functions.values():
        assert f.spills == 0 and f.stack_frame == 0, (f.name, f.spill_stores, f.spill_loads)
    assert cub["tca_spmm"].shared_bytes >= 8 * L.RHS_HALVES * 2


def test_kernel_text_has_the_scheme():
    text = tca.build(256).text()
    for needle in (
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
        "ld.global.nc.v4.b32",  # 128-bit B loads (N % 8 == 0)
        "shfl.sync.idx.b32",
        "shfl.sync.bfly.b32",
        ".shared .align 16 .b16 s_val",
        "$multiblock_per_row",
        "bar.sync 0",
    ):
        assert needle in text, needle
    assert text.count("mma.sync") == 4
    odd = tca.build(100).text()
    assert "ld.global.nc.v4.b32" not in odd and "ld.global.nc.b16" in odd  # predicated scalar edge loads


def test_ptx_ops_fold_like_int_ops():
    m = ptx.Module()
    k = m.kernel("t")
    o = tca.PtxOps(k)
    for lq in range(4):
        for g in range(8):
            assert L.out_col(o, g, lq, 1) == L.out_col(L.IntOps, g, lq, 1)
            assert L.rhs_slot(o, 5, 3, lq) == L.rhs_slot(L.IntOps, 5, 3, lq)
    assert k.body == []  # all constant


def test_bad_build_arguments():
    with pytest.raises(ValueError):
        tca.build(0)
    with pytest.raises(ValueError):
        tca.build(8, seg_chunks=5)


# ---------------------------------------------------------------------------- GPU


def _spmm(be, s, n):
    return SpMM(s, n, target="cuda", driver=be.driver, strategy="tca")  # seed 003's plan (test_window: the other)


@pytest.mark.parametrize("n", [8, 64, 100, 256, 512])
@pytest.mark.parametrize("density", [1e-4, 1e-3, 1e-2, 0.1, 0.3])
def test_cuda_vs_scipy(cuda_backend, n, density):
    """Skewed (power-law, empty) rows; in the simulator a smaller matrix of the same kind."""
    rng = np.random.default_rng(int(n + 1e5 * density))
    m, k = (700, 3000) if not cuda_backend.simulated else (48, 1500 if density < 0.05 else 400)
    if cuda_backend.simulated and density >= 0.05:
        m, k = 32, 200  # dense rows: fewer rows and columns of the same kind keep the simulator's time down
    s = skewed(m, k, density, rng)
    b = rng.standard_normal((k, n)).astype(np.float32)
    op = _spmm(cuda_backend, s, n)
    c = np.full((m, n), np.nan, np.float32)
    op.execute(b, c)
    ref = quantized_reference(s, b)
    scale = (np.abs(s).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    assert np.all(np.abs(c - ref) <= 1e-4 * scale + 1e-5)
    np.testing.assert_allclose(c, op.model(b), rtol=1e-4, atol=1e-4 * float(scale.max()))


def test_cuda_update_values_and_long_rows(cuda_backend):
    """Rows of every plan class (1/2/4/8 warps, several blocks, > 1000 nnz); new values, same plan."""
    rng = np.random.default_rng(5)
    from tests.minijit.sparse.helpers import csr_with_lengths

    s = csr_with_lengths([0, 3, 64, 65, 129, 1000, 4000, 0, 9, 17, 33], 5000, rng)
    b = rng.standard_normal((5000, 72)).astype(np.float16)
    op = _spmm(cuda_backend, s, 72)
    for _ in range(2):
        c = np.empty((11, 72), np.float32)
        op.execute(b, c)
        ref = quantized_reference(s, b.astype(np.float32))
        np.testing.assert_allclose(c, ref, rtol=2e-3, atol=2e-2)
        s.data = rng.standard_normal(s.nnz).astype(np.float32)
        op.update_values(s.data)


def test_cuda_target_rejects_a_bad_driver():
    s = skewed(8, 64, 0.1, np.random.default_rng(0))
    with pytest.raises(TypeError, match="lacks"):
        SpMM(s, 8, target="cuda", driver="not a driver")


class _Cai:
    """A bare ``__cuda_array_interface__`` over a driver buffer (what cupy / torch CUDA expose)."""

    def __init__(self, ptr: int, shape, typestr: str, strides=None, read_only: bool = False):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (ptr, read_only), "version": 3, "strides": strides,
        }  # fmt: skip


@pytest.mark.parametrize("strategy", ["tca", "window"])
def test_cuda_device_arrays_in_and_out(cuda_backend, strategy):
    """B (fp16) and C (fp32) as device arrays, read and written in place (C starts as NaN, so
    every element must be written), also mixed with numpy; bad device arrays rejected first;
    seed 003's kernel and the row windows."""
    drv = cuda_backend.driver
    rng = np.random.default_rng(21)
    m, k, n = 40, 96, 24
    s = skewed(m, k, 0.2, rng)
    b = rng.standard_normal((k, n)).astype(np.float16)
    want = quantized_reference(s, b.astype(np.float32))
    op = SpMM(s, n, target="cuda", driver=drv, strategy=strategy)
    assert op.strategy == strategy
    db = drv.to_device(b)
    dc = drv.to_device(np.full((m, n), np.nan, np.float32))
    B, C = _Cai(db.ptr, (k, n), "<f2"), _Cai(dc.ptr, (m, n), "<f4")
    assert op.execute(B, C) is C
    np.testing.assert_allclose(dc.to_host(np.float32, (m, n)), want, rtol=2e-3, atol=2e-3)
    c_host = np.full((m, n), np.nan, np.float32)  # device B, numpy C
    np.testing.assert_allclose(op.execute(B, c_host), want, rtol=2e-3, atol=2e-3)
    c_f = np.full((n, m), np.nan, np.float32).T  # device B, F-order numpy C: written as its matrix
    assert op.execute(B, c_f) is c_f
    np.testing.assert_allclose(c_f, want, rtol=2e-3, atol=2e-3)
    dc.copy_from(np.full((m, n), np.nan, np.float32))  # numpy B, device C
    op.execute(b, C)
    np.testing.assert_allclose(dc.to_host(np.float32, (m, n)), want, rtol=2e-3, atol=2e-3)
    bad = [
        (_Cai(db.ptr, (k, n), "<f4"), C, TypeError, "float16"),
        (_Cai(db.ptr, (k, n + 1), "<f2"), C, ValueError, "shape mismatch"),
        (_Cai(db.ptr, (k, n), "<f2", strides=(4 * n, 2)), C, ValueError, "B is not one dense block"),  # gaps
        (_Cai(db.ptr + 2, (k, n), "<f2"), C, ValueError, "16-byte"),
        (B, _Cai(dc.ptr, (m, n), "<f4", read_only=True), ValueError, "C is read-only"),
        (B, _Cai(dc.ptr, (m, n), "<f2"), TypeError, "float32"),
        (B, np.zeros((m, n), np.float64), TypeError, "float32"),
    ]
    before = dc.to_host(np.float32, (m, n))
    for bb, cc, exc, text in bad:
        with pytest.raises(exc, match=text):
            op.execute(bb, cc)
    np.testing.assert_array_equal(dc.to_host(np.float32, (m, n)), before)  # nothing launched
    with pytest.raises(TypeError, match="target='cuda'"):
        SpMM(s, n, target="native").execute(B, C)


# ---------------------------------------------------------------------------- bf16 and tf32 inputs

PRECISION_DTYPES = ["fp16", "bf16", "tf32"]


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
@pytest.mark.parametrize("n, seg", [(8, 2), (100, 2), (512, 4), (13, 3)])
def test_bf16_tf32_kernels_assemble_without_spills(arch, dtype, n, seg):
    text = tca.build(n, seg, dtype=dtype).text()
    mma = "bf16.bf16" if dtype == "bf16" else "tf32.tf32"
    assert text.count(f"mma.sync.aligned.m16n8k8.row.col.f32.{mma}.f32") == 4
    if dtype == "tf32":
        assert "cvt.rna.tf32.f32" in text and ".shared .align 16 .b32 s_val" in text
    cub = ptx.compile(text, arch=arch)
    for f in cub.functions.values():
        assert f.spills == 0 and f.stack_frame == 0, (f.name, f.spill_stores, f.spill_loads)
    assert cub["tca_spmm"].shared_bytes >= 8 * L.RHS_HALVES * (4 if dtype == "tf32" else 2)


def _skewed_cases(rng):
    """(name, scipy CSR): empty rows + one very long row, all non-zeros in one column, all empty."""
    import scipy.sparse as sp

    from tests.minijit.sparse.helpers import csr_with_lengths

    long_row = csr_with_lengths([0, 5, 0, 300, 0, 12, 1, 40, 0], 320, rng)
    m = 24
    one_col = sp.csr_matrix(
        (rng.standard_normal(m).astype(np.float32), np.full(m, 7, np.int32), np.arange(m + 1, dtype=np.int32)),
        shape=(m, 16),
    )
    empty = sp.csr_matrix((np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(6, np.int32)), shape=(5, 9))
    return [("long_row", long_row), ("one_column", one_col), ("all_empty", empty)]


#: per-value input rounding of each type, |x_q - x| <= u |x| + eta: u half an ulp of the
#: significand (fp16 and tf32 10 bits, bf16 7), eta half the smallest subnormal of the type
INPUT_ROUNDING = {"fp16": (2.0**-11, 2.0**-25), "bf16": (2.0**-8, 2.0**-134), "tf32": (2.0**-11, 2.0**-137)}


def _bounds(s, b, dtype):
    """Per element of C = S B: (the fp32 accumulation bound around S_q B_q, with S_q and B_q the
    operands rounded to ``dtype`` as the kernel rounds them; the input-rounding bound around the
    unrounded S B), both from the sums of absolute values of the products (float64)."""
    import scipy.sparse as sp

    from minijit.cuda.hwrecord import accumulation_bound
    from minijit.sparse.precision import precision

    p = precision(dtype)
    sq = sp.csr_matrix((np.abs(p.quantize(s.data)), s.indices, s.indptr), shape=s.shape)
    terms = np.diff(s.indptr)[:, None]  # products per element: the row's non-zeros
    acc = accumulation_bound(terms, sq @ np.abs(p.quantize(b)))
    u, eta = INPUT_ROUNDING[dtype]
    a_abs = sp.csr_matrix((np.abs(s.data).astype(np.float64), s.indices, s.indptr), shape=s.shape)
    pattern = sp.csr_matrix((np.ones(s.nnz), s.indices, s.indptr), shape=s.shape)
    b_abs = np.abs(b).astype(np.float64)
    # |a_q b_q - a b| <= (2u + u^2) |a| |b| + eta (2 + u) (|a| + |b|) + eta^2, summed over the row
    rows = np.asarray(a_abs.sum(axis=1))
    inputs = (2 * u + u * u) * (a_abs @ b_abs) + eta * (2 + u) * (rows + pattern @ b_abs) + eta * eta * terms
    return acc, inputs + acc


@pytest.mark.parametrize("dtype", PRECISION_DTYPES)
def test_precisions_on_skewed_matrices_vs_scipy(cuda_backend, dtype):
    """Every input precision on the skewed shapes, against scipy in fp64: within the fp32
    accumulation bound of the inputs rounded as the type rounds them (and not of another
    rounding), and within the type's input rounding of the exact product; N = 24 (128-bit B
    loads) and 13 (scalar edge loads). The GPU and the simulator sum in different orders, so
    each is held to scipy, never to the other; the simulator also to the numpy model, bit for bit."""
    import scipy.sparse as sp

    from minijit.sparse.precision import precision

    rng = np.random.default_rng(16)
    prec = precision(dtype)
    other = precision("fp16" if dtype == "bf16" else "bf16")
    for name, s in _skewed_cases(rng):
        for n in (24, 13):
            b = rng.standard_normal((s.shape[1], n)).astype(np.float32)
            op = SpMM(s, n, dtype=dtype, target="cuda", driver=cuda_backend.driver, strategy="tca")
            c = np.full((s.shape[0], n), np.nan, np.float32)
            op.execute(b, c)

            def ref(p, s=s, b=b):
                return sp.csr_matrix((p.quantize(s.data), s.indices, s.indptr), shape=s.shape) @ p.quantize(b)

            acc, inputs = _bounds(s, b, dtype)
            err = np.abs(c - ref(prec))
            assert np.all(err <= acc), (name, n, float((err - acc).max()))
            exact = s.astype(np.float64) @ b.astype(np.float64)
            assert np.all(np.abs(c - exact) <= inputs), (name, n)
            if s.nnz:  # the check tells the types apart: another rounding misses the tight bound
                assert np.any(np.abs(c - ref(other)) > acc), (name, n)
            else:
                assert not c.any()
            if cuda_backend.simulated:
                np.testing.assert_array_equal(c, op.model(b))  # the numpy model, bit for bit


def test_precision_validation_names_the_dtype():
    from ptx import simdriver

    s = skewed(8, 64, 0.1, np.random.default_rng(0))
    for bad in ("fp32", "float16", "int8", "tf16"):
        with pytest.raises(ValueError, match=r"dtype must be one of \('fp16', 'bf16', 'tf32'\)"):
            SpMM(s, 8, dtype=bad, target="cuda", driver=simdriver)
    with pytest.raises(ValueError, match="dtype='tf32'"):
        SpMM(s, 8, dtype="fp32", target="cuda", driver=simdriver)
    with pytest.raises(ValueError, match=r"for target='native'"):
        SpMM(s, 8, dtype="bf16", target="native")
    with pytest.raises(ValueError, match="dtype must be one of"):
        tca.build(8, dtype="fp64")


def test_device_b_must_hold_the_kernels_type(cuda_backend):
    """Device B in each precision (bf16 as CAI typestr <V2), read in place: C within the fp32
    accumulation bound of scipy on the rounded operands; another type is rejected first."""
    import scipy.sparse as sp

    from ptx.mma import f32_to_bf16_bits

    drv = cuda_backend.driver
    rng = np.random.default_rng(3)
    m, k, n = 12, 40, 16
    s = skewed(m, k, 0.3, rng)
    b = rng.standard_normal((k, n)).astype(np.float32)
    dev = {"fp16": (b.astype(np.float16), "<f2"), "bf16": (f32_to_bf16_bits(b), "<V2"), "tf32": (b, "<f4")}
    for dtype, (host_b, typestr) in dev.items():
        op = SpMM(s, n, dtype=dtype, target="cuda", driver=drv, strategy="tca")
        db = drv.to_device(host_b)
        dc = drv.to_device(np.full((m, n), np.nan, np.float32))
        C = _Cai(dc.ptr, (m, n), "<f4")
        op.execute(_Cai(db.ptr, (k, n), typestr), C)
        got = dc.to_host(np.float32, (m, n))
        want = sp.csr_matrix((op._prec.quantize(s.data), s.indices, s.indptr), shape=s.shape) @ op._prec.quantize(b)
        acc, _ = _bounds(s, b, dtype)
        assert np.all(np.abs(got - want) <= acc), (dtype, float((np.abs(got - want) - acc).max()))
        if cuda_backend.simulated:  # the GPU's fp32 sums run in another order: scipy is its reference
            np.testing.assert_array_equal(got, op.model(b))
        for wrong in {"<f2", "<V2", "<f4"} - {typestr}:
            with pytest.raises(TypeError, match=f"B must hold {op._prec.device_dtype}"):
                op.execute(_Cai(db.ptr, (k, n), wrong), C)
