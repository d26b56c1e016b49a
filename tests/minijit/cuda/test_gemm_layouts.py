"""All 8 orientations of A, B and C (each M/K-, K/N-, M/N-contiguous) through
CudaTensorOperation in the PTX simulator, the 4 kernel variants through ptxas, and the
layouts that stay rejected."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ptx
from minijit.cuda import CudaTensorOperation, gemm
from minijit.errors import SetupError, error_t
from ptx import mma

#: (A contiguous dim, B contiguous dim, C contiguous dim)
ORIENTATIONS = list(itertools.product("mk", "kn", "mn"))


def _store(x: np.ndarray, inner_axis: int, pad: int) -> tuple[np.ndarray, tuple[int, int]]:
    """``x`` (2-D) as a C-contiguous array whose unit-stride axis is ``inner_axis``, the other
    axis padded by ``pad`` elements; returns the array and the element strides of x's two axes."""
    t = x if inner_axis == 1 else x.T
    ld = t.shape[1] + pad
    buf = np.full((t.shape[0], ld), np.nan, np.float32)
    buf[:, : t.shape[1]] = t
    return buf, ((ld, 1) if inner_axis == 1 else (1, ld))


def _run(orient, dtype, m, n, k, first, last, pad=(0, 0, 0), seed=0, driver=None):
    """One GEMM in orientation ``orient`` through CudaTensorOperation (``driver``: the PTX
    simulator by default) against numpy; C's padding must stay untouched."""
    from ptx import simdriver

    am, bm, cm = orient
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    C = rng.standard_normal((m, n)).astype(np.float32)
    a, (sam, sak) = _store(A, 0 if am == "m" else 1, pad[0])
    b, (sbk, sbn) = _store(B, 0 if bm == "k" else 1, pad[1])
    c, (scm, scn) = _store(C, 0 if cm == "m" else 1, pad[2])
    op = CudaTensorOperation(driver=driver or simdriver, family="mma.sync")
    op.setup(dtype, first, "gemm", last, ("m", "n", "k"), ("prim",) * 3, (m, n, k),
             (sam, 0, sak), (0, sbn, sbk), (scm, scn, 0))  # fmt: skip
    ha, hb = gemm.encode(op.dtype, a), gemm.encode(op.dtype, b)
    qa, qb = (gemm.decode(op.dtype, h) if op.dtype != "tf32" else mma.round_tf32(h) for h in (ha, hb))
    qa = (qa if am == "k" else qa.T)[:m, :k]
    qb = (qb if bm == "n" else qb.T)[:k, :n]
    ref = qa.astype(np.float64) @ qb.astype(np.float64) + (C if first == "none" else 0)
    ref = np.maximum(ref, 0) if last == "relu" else ref
    before = c.copy()
    op.execute(ha, hb, c)
    got = c if cm == "n" else c.T
    np.testing.assert_allclose(got[:m, :n], ref, rtol=1e-4, atol=2e-5 * np.sqrt(k) + 1e-5)
    pad_cols = c[:, (n if cm == "n" else m) :]
    np.testing.assert_array_equal(pad_cols, before[:, (n if cm == "n" else m) :])  # padding untouched
    return op


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("orient", ORIENTATIONS, ids=lambda o: "A{}B{}C{}".format(*o))
def test_all_orientations(cuda_backend, orient, dtype):
    """Ragged M, N, K: in the simulator one 32x32 CTA tile with K over a full and an edge step;
    on a GPU several 128x128 CTAs, padded leading dims. First touch zero + last touch relu on half
    the orientations, load + none on the other half."""
    first, last = ("zero", "relu") if ORIENTATIONS.index(orient) % 2 == 0 else ("none", "none")
    if cuda_backend.simulated:
        op = _run(orient, dtype, 20, 12, 24, first, last)
    else:
        op = _run(orient, dtype, 300, 270, 150, first, last, pad=(3, 5, 1), driver=cuda_backend.driver)
    am, bm, cm = orient
    # an N-contiguous C runs swapped: A and B exchange roles and transpose
    want = (am, bm) if cm == "m" else ({"k": "k", "n": "m"}[bm], {"m": "n", "k": "k"}[am])
    assert (op.spec.a_major, op.spec.b_major) == want
    assert op.config.inputs_swapped == (cm == "n")


@pytest.mark.parametrize("orient", [("k", "n", "m"), ("k", "k", "n")], ids=["AkBnCm", "AkBkCn"])
def test_odd_leading_dims_simulated(orient):
    """Odd padded leading dims (2-byte copies for fp16) in transposed orientations, 2 CTAs in M."""
    op = _run(orient, "fp16", 40, 9, 17, "none", "relu", pad=(0, 0, 1), seed=3)  # lda, ldb 17 or 9
    assert (op.kernel_spec().vec_a, op.kernel_spec().vec_b) == (2, 2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
def test_ptxas_orientation_variants_no_spills(arch, dtype):
    for am, bm in itertools.product("mk", "kn"):
        for spec in (
            gemm.default_spec(dtype, a_major=am, b_major=bm),
            gemm.default_spec(dtype, 20, 12, 24, a_major=am, b_major=bm),
        ):
            gk = gemm.generate(spec)
            info = ptx.compile(gk.text, arch=arch)[gk.name]
            assert info.spills == 0 and info.stack_frame == 0, (spec.name, info)


def test_spec_names_the_orientation():
    specs = {(am, bm): gemm.default_spec("f16", a_major=am, b_major=bm) for am in "mk" for bm in "kn"}
    assert len({s.name for s in specs.values()}) == 4
    assert specs[("k", "n")].name.endswith("_akbn") and "akbn" in repr(gemm.generate(specs[("k", "n")]).name)
    text = gemm.generate(specs[("k", "n")]).text
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in text and "ldmatrix.sync.aligned.m8n8.x4.shared" in text
    with pytest.raises(ValueError, match="a_major"):
        gemm.GemmSpec(a_major="n").validate()


def test_previously_rejected_orientations_accepted_and_no_unit_stride_rejected():
    op = CudaTensorOperation()
    m, n, k = 8, 6, 4
    for am, bm, cm in ORIENTATIONS:
        s0 = (1, 0, m) if am == "m" else (k, 0, 1)
        s1 = (0, k, 1) if bm == "k" else (0, 1, n)
        so = (1, m, 0) if cm == "m" else (n, 1, 0)
        assert (
            op.setup("fp16", "zero", "gemm", "none", ("m", "n", "k"), ("prim",) * 3, (m, n, k), s0, s1, so)
            is error_t.success
        )
    cases = [  # (in0, in1, out strides, dim named, tensor named)
        ((2, 0, 2 * m), (0, k, 1), (1, m, 0), 0, "in0"),
        ((1, 0, m), (0, 2 * k, 2), (1, m, 0), 2, "in1"),
        ((1, 0, m), (0, k, 1), (2, 2 * m, 0), 0, "out"),
    ]
    for s0, s1, so, dim, tensor in cases:
        with pytest.raises(SetupError) as e:
            op.setup("fp16", "zero", "gemm", "none", ("m", "n", "k"), ("prim",) * 3, (m, n, k), s0, s1, so)
        assert e.value.code is error_t.wrong_stride and f"dim {dim}" in str(e.value) and tensor in str(e.value)
        assert op.config is None


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
def test_model_default_tiles_conflict_free(dtype):
    """The numpy model of the 4 variants at the default 128x128 tiles (1 CTA, a ragged K step):
    right results, and every shared store, ldmatrix and tf32 fragment load free of bank conflicts."""
    m = n = 128
    k = 24
    rng = np.random.default_rng(1)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    ref = gemm.reference(dtype, A, B, np.zeros((m, n)))
    for am, bm in itertools.product("mk", "kn"):
        spec = gemm.default_spec(dtype, m, n, k, a_major=am, b_major=bm)
        sa, sb = (A.T if am == "m" else A).copy(), (B.T if bm == "k" else B).copy()
        lda, ldb = sa.shape[1] * spec.es, sb.shape[1] * spec.es
        spec = spec.aligned(gemm.choose_vec(spec.es, lda), gemm.choose_vec(spec.es, ldb))
        assert (spec.bm, spec.bn, spec.vec_a, spec.vec_b) == (128, 128, 16, 16)
        c = np.full((n, m), np.nan, np.float32)
        enc = (gemm.encode(dtype, x).view(np.uint8) for x in (sa, sb))
        stats = gemm.simulate(spec, *enc, c.reshape(-1), m, n, k, lda, ldb, m * 4)
        np.testing.assert_allclose(c.T, ref, rtol=1e-4, atol=2e-4, err_msg=spec.name)
        assert len(stats.conflicts) == 4 and set(stats.conflicts.values()) == {1}, (spec.name, stats.conflicts)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_brgemm_batched_transposed_simulated(dtype):
    """BRGEMM with a batch (shared) dim and a BR dim, K-contiguous A, N-contiguous B and C (so
    the operation runs swapped): batch and reduction tables in the swapped roles."""
    from ptx import simdriver

    z, r, m, n, k = 2, 2, 18, 10, 12
    rng = np.random.default_rng(5)
    A = rng.standard_normal((z, r, m, k)).astype(np.float32)  # K contiguous
    B = rng.standard_normal((z, r, k, n)).astype(np.float32)  # N contiguous
    C = rng.standard_normal((z, m, n)).astype(np.float32)  # N contiguous
    op = CudaTensorOperation(driver=simdriver, family="mma.sync")
    op.setup(dtype, "none", "brgemm", "relu", ("c", "k", "m", "n", "k"), ("shared", "prim", "prim", "prim", "prim"),
             (z, r, m, n, k), (r * m * k, m * k, k, 0, 1), (r * k * n, k * n, 0, 1, n),
             (m * n, 0, n, 1, 0))  # fmt: skip
    assert op.config.inputs_swapped and len(op.batch_table) == z and len(op.red_table) == r
    ha, hb = gemm.encode(op.dtype, A), gemm.encode(op.dtype, B)
    qa, qb = (gemm.decode(op.dtype, h) if op.dtype != "tf32" else mma.round_tf32(h) for h in (ha, hb))
    ref = np.maximum(np.einsum("zrmk,zrkn->zmn", qa.astype(np.float64), qb.astype(np.float64)) + C, 0)
    out = C.copy()
    op.execute(ha, hb, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
