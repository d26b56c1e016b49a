"""The batched-reduce GEMM problems shared by the simulated (numpy model) and the GPU tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minijit.cuda import gemm
from minijit.cuda.gemm import GemmSpec


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
    """``out`` (shaped like C) against ``gemm.reference`` per batch; C's padding rows untouched."""
    m, k, r = p.m, p.k, p.r
    for zz in range(p.z):
        a = np.concatenate([p.A[zz, rr, :, :m].T for rr in range(r)], axis=1)
        b = np.concatenate([p.B[zz, rr, :, :k].T for rr in range(r)], axis=0)
        ref = gemm.reference(spec.dtype, a, b, p.C[zz, :, :m].T, spec.first, spec.last)
        np.testing.assert_allclose(out[zz, :, :m].T, ref, rtol=rtol, atol=atol)
        np.testing.assert_array_equal(out[zz, :, m:], p.C[zz, :, m:])  # padding untouched
