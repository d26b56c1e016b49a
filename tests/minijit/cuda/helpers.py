"""The batched-reduce GEMM problems shared by the simulated (numpy model) and the GPU tests, and
the reference + error bound that GEMM results on a GPU are held to.

Reference: the operands as the tensor cores read them (:func:`tensor_core_operand`: f16/bf16 as
stored; fp32 for tf32 either rounded by ``cvt.rna.tf32.f32`` in the kernel, as the mma.sync family
does, or truncated to 10 mantissa bits, as an sm_90a ``wgmma`` reads raw fp32 from shared memory),
multiplied exactly and summed in float64. What remains between a GPU and that reference is the fp32
accumulation: :func:`accumulation_bound` (`minijit.cuda.hwrecord`'s, shared).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minijit.cuda import gemm, hwrecord
from minijit.cuda.gemm import GemmSpec
from ptx import mma

#: probability that a correct launch has any element outside the bound (`hwrecord.accumulation_bound`)
FALSE_ALARM = hwrecord.FALSE_ALARM
#: how a GEMM family's tensor cores see fp32 (tf32) operands: "rna" (cvt.rna.tf32.f32 in the
#: kernel: mma.sync) or "truncate" (sm_90a wgmma reads raw fp32 from shared memory and ignores
#: the low 13 mantissa bits: recorded on an H200, issue 34, where two launches matched the
#: truncating reference to 1e-4 and the rounding one only to 6e-2)
TF32_ROUNDING = {"mma.sync": "rna", "sm90a": "truncate"}


def tensor_core_operand(dtype: str, x: np.ndarray, tf32: str = "rna") -> np.ndarray:
    """``x`` (fp32 values, or f16/bf16 values already representable) as the tensor core reads
    it, in float64: f16/bf16 rounded to nearest even, tf32 by ``tf32`` ("rna" or "truncate")."""
    if dtype != "tf32":
        return mma.quantize(dtype, x).astype(np.float64)
    if tf32 == "rna":
        return mma.round_tf32(x).astype(np.float64)
    if tf32 == "truncate":
        return mma.quantize("tf32", x).astype(np.float64)
    raise ValueError(f"tf32 rounding {tf32!r}: 'rna' or 'truncate'")


def expected_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, first: str = "zero", last: str = "none"):
    """(want, scale) of ``last(first(c) + a @ b)`` for operands ``a`` (M x K) and ``b`` (K x N)
    as the tensor core reads them: ``want`` in float64, ``scale`` = ``|first(c)| + |a| @ |b|``,
    which bounds every partial sum of any summation order."""
    old = np.zeros(c.shape) if first == "zero" else c.astype(np.float64)
    if first == "relu":
        old = np.maximum(old, 0.0)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    out = old + a @ b
    return (np.maximum(out, 0.0) if last == "relu" else out), np.abs(old) + np.abs(a) @ np.abs(b)


def accumulation_bound(scale: np.ndarray, terms: int, checked: int) -> np.ndarray:
    """Bound on ``|got - want|`` per element for sums of ``terms`` exact products (and C) that a
    GPU accumulates in fp32 in an order of its own, when ``checked`` elements are compared: the
    one bound of `minijit.cuda.hwrecord.accumulation_bound` (which `hwrecord` holds recorded
    launches to), derived in docs/decisions.md. A ReLU last touch only shrinks differences."""
    return hwrecord.accumulation_bound(terms, scale, checked)


def assert_gemm_close(got: np.ndarray, want: np.ndarray, scale: np.ndarray, terms: int, checked: int, err_msg=""):
    """``got`` against :func:`expected_gemm`'s ``want`` within :func:`accumulation_bound`."""
    bound = accumulation_bound(scale, terms, checked)
    err = np.abs(np.asarray(got, np.float64) - want)
    bad = ~(err <= bound)  # NaN fails
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, err / np.maximum(bound, 1e-300), -1.0))), err.shape)
        raise AssertionError(
            f"{err_msg}: {int(bad.sum())} of {err.size} elements outside the fp32 accumulation bound "
            f"({terms} terms, {checked} elements checked); worst at {tuple(int(x) for x in i)}: got {got[i]!r}, "
            f"want {want[i]!r}, |diff| {err[i]:.3g} > bound {bound[i]:.3g}"
        )


@dataclass
class Problem:
    """Z batches of R reduction blocks: A[z, r] (k x lda), B[z, r] (n x ldb), C[z] (n x ldc), all
    column-major with the leading dims padded; ``bt``/``rt`` the batch and reduction byte offsets."""

    m: int
    n: int
    k: int
    r: int
    z: int
    lda: int
    ldb: int
    ldc: int
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    bt: list[tuple[int, int, int]]
    rt: list[tuple[int, int]]


def gemm_problem(spec: GemmSpec, m, n, k, r, z, seed=0, pad=(0, 0, 0)) -> tuple[GemmSpec, Problem]:
    """Random A, B, C blocks packed one after another (leading dims padded by ``pad``), and
    ``spec`` aligned to the widest copies their offsets allow."""
    rng = np.random.default_rng(seed)
    es = spec.es
    lda, ldb, ldc = m + pad[0], k + pad[1], m + pad[2]
    A = rng.standard_normal((z, r, k, lda)).astype(np.float32)
    B = rng.standard_normal((z, r, n, ldb)).astype(np.float32)
    C = rng.standard_normal((z, n, ldc)).astype(np.float32)
    bt = [(zz * r * k * lda * es, zz * r * n * ldb * es, zz * n * ldc * 4) for zz in range(z)]
    rt = [(rr * k * lda * es, rr * n * ldb * es) for rr in range(r)]
    va = gemm.choose_vec(es, lda * es, *(x[0] for x in bt), *(x[0] for x in rt))
    vb = gemm.choose_vec(es, ldb * es, *(x[1] for x in bt), *(x[1] for x in rt))
    return spec.aligned(va, vb), Problem(m, n, k, r, z, lda, ldb, ldc, A, B, C, bt, rt)


def check_result(spec: GemmSpec, p: Problem, out: np.ndarray, rtol: float, atol: float) -> None:
    """``out`` (shaped like C) against ``gemm.reference`` per batch; C's padding rows untouched.
    tf32 (mma.sync: operands rounded by cvt.rna in the kernel) is held to :func:`expected_gemm`
    within :func:`accumulation_bound` instead of ``rtol``/``atol``."""
    m, k, r = p.m, p.k, p.r
    for zz in range(p.z):
        a = np.concatenate([p.A[zz, rr, :, :m].T for rr in range(r)], axis=1)
        b = np.concatenate([p.B[zz, rr, :, :k].T for rr in range(r)], axis=0)
        if spec.dtype == "tf32":
            q = TF32_ROUNDING["mma.sync"]
            want, scale = expected_gemm(
                tensor_core_operand("tf32", a, q),
                tensor_core_operand("tf32", b, q),
                p.C[zz, :, :m].T,
                spec.first,
                spec.last,
            )
            assert_gemm_close(out[zz, :, :m].T, want, scale, k * r + 1, p.z * m * p.n, f"z={zz}")
        else:
            ref = gemm.reference(spec.dtype, a, b, p.C[zz, :, :m].T, spec.first, spec.last)
            np.testing.assert_allclose(out[zz, :, :m].T, ref, rtol=rtol, atol=atol)
        np.testing.assert_array_equal(out[zz, :, m:], p.C[zz, :, m:])  # padding untouched
