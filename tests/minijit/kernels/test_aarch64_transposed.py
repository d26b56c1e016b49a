"""Transposed BRGEMM forms on AArch64: NEON ``trans_c`` and SVE ``trans_a``/``trans_b``/``trans_c``.

``trans_a`` reads ``a[k + m*lda]``, ``trans_b`` ``b[n + k*ldb]``, ``trans_c``
writes ``c[n + m*ldc]`` (as the x86-64 generator). Every kernel runs (natively
on AArch64, else in the qemu worker; SVE at 128, 256 and 512 bits) against a
float64 numpy reference; C sits in a buffer of sentinels (padding between its
rows/columns and a guard after it) that must survive the call.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.aarch64.brgemm import NeonBrgemm as neon_brgemm
from minijit.kernels.aarch64.brgemm import SveBrgemm as sve_brgemm
from minijit.runtime import load, runs_natively
from tests.conftest import examples

VLS = [128] if runs_natively("aarch64") else [128, 256, 512]
NP = {"fp32": np.float32, "fp64": np.float64}
GUARD = 9
SENTINEL = -7777.0
FLAGS = [(ta, tb, tc) for ta in (False, True) for tb in (False, True) for tc in (False, True)]

_kernels: dict = {}


def kernels(isa: str, m: int, n: int, k: int, br: int, flags: tuple[bool, bool, bool], dtype: str) -> list:
    """The kernel (NEON) or one per vector length (SVE), from bytes whose listing reassembles to them."""
    key = (isa, m, n, k, br, flags, dtype)
    if key not in _kernels:
        module = neon_brgemm if isa == "neon" else sve_brgemm
        a = module.program(m, n, k, br, *flags, dtype)
        a = a[0] if isinstance(a, tuple) else a
        assert llvm.assemble(a.listing()) == a.code()
        vls = VLS if isa == "sve" else [128]
        sig = module.signature(dtype)
        _kernels[key] = [load(a.code(), sig, isa="aarch64", name=a.name, listing=a.listing(), sve_vl=vl) for vl in vls]
    return _kernels[key]


def strided(buf: np.ndarray, rows: int, cols: int, ld: int, trans: bool) -> np.ndarray:
    """The rows x cols matrix in ``buf``: column-major (``x[r + c*ld]``) or transposed (``x[c + r*ld]``)."""
    s = buf.itemsize
    strides = (ld * s, s) if trans else (s, ld * s)
    return np.lib.stride_tricks.as_strided(buf, (rows, cols), strides)


def extent(rows: int, cols: int, ld: int, trans: bool) -> int:
    """Elements from the first to one past the last element of the matrix."""
    return ld * (rows - 1) + cols if trans else ld * (cols - 1) + rows


def check(isa, m, n, k, br, flags, dtype, pads=(1, 2, 3), seed=0) -> None:
    ta, tb, tc = flags
    t = NP[dtype]
    rng = np.random.default_rng(seed)
    lda = (k if ta else m) + pads[0]
    ldb = (n if tb else k) + pads[1]
    ldc = (n if tc else m) + pads[2]
    size_a, size_b = extent(m, k, lda, ta), extent(k, n, ldb, tb)
    stride_a, stride_b = size_a + 3, size_b + 1
    a = rng.standard_normal(stride_a * (br - 1) + size_a).astype(t)
    b = rng.standard_normal(stride_b * (br - 1) + size_b).astype(t)
    c0 = np.full(extent(m, n, ldc, tc) + GUARD, SENTINEL, t)
    strided(c0, m, n, ldc, tc)[...] = rng.standard_normal((m, n))
    inside = np.zeros(c0.size, bool)
    strided(inside, m, n, ldc, tc)[...] = True
    want = strided(c0, m, n, ldc, tc).astype(np.float64)
    for r in range(br):
        ar = strided(a[r * stride_a :], m, k, lda, ta).astype(np.float64)
        br_ = strided(b[r * stride_b :], k, n, ldb, tb).astype(np.float64)
        want = want + ar @ br_
    tol = (1e-6 if dtype == "fp32" else 1e-14) * 4 * (k * br + 2)
    for kern in kernels(isa, m, n, k, br, flags, dtype):
        c = c0.copy()
        kern(a, b, c, lda, ldb, ldc, stride_a, stride_b)
        np.testing.assert_allclose(strided(c, m, n, ldc, tc), want, rtol=tol, atol=tol, err_msg=str(kern))
        assert np.all(c[~inside] == SENTINEL), f"{kern}: wrote outside C"


sizes = st.integers(1, 40)
pads = st.tuples(*[st.integers(0, 4)] * 3)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=examples(12), deadline=None)
@given(m=sizes, n=sizes, k=sizes, br=st.integers(1, 3), ta=st.booleans(), tb=st.booleans(), pads=pads)
@example(m=17, n=5, k=9, br=2, ta=False, tb=False, pads=(1, 0, 3))
@example(m=1, n=1, k=1, br=1, ta=True, tb=True, pads=(0, 0, 0))
def test_neon_trans_c(dtype, m, n, k, br, ta, tb, pads):
    check("neon", m, n, k, br, (ta, tb, True), dtype, pads, seed=m * n + k)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=examples(10), deadline=None)
@given(m=sizes, n=sizes, k=sizes, br=st.integers(1, 3), flags=st.sampled_from(FLAGS[1:]), pads=pads)
@example(m=37, n=13, k=6, br=2, flags=(False, False, True), pads=(1, 2, 3))  # 3 vectors at 128 bits, ragged
@example(m=33, n=9, k=5, br=3, flags=(True, False, False), pads=(2, 0, 1))
@example(m=7, n=20, k=9, br=1, flags=(False, True, False), pads=(0, 3, 0))
def test_sve_transposed(dtype, m, n, k, br, flags, pads):
    check("sve", m, n, k, br, flags, dtype, pads, seed=m + n * k)


@pytest.mark.parametrize("flags", FLAGS)
def test_sve_every_form_at_the_edges(flags):
    """All eight flag combinations, with M past 4 vectors at 128 bits and ragged N and K."""
    check("sve", 19, 11, 7, 2, flags, "fp32", seed=sum(flags))


def test_sve_orientation():
    """Each combination runs as one of the four emitted forms, never two transpositions at once."""
    got = {f: sve_brgemm.orientation(*f) for f in FLAGS}
    for (swap, form), f in zip(got.values(), FLAGS, strict=True):
        assert sum(form) <= 1
        assert form == ((not f[1], not f[0], not f[2]) if swap else f)
    assert got[(True, True, True)] == (True, (False, False, False))
    assert got[(False, True, True)] == (True, (False, True, False))
    assert got[(True, True, False)] == (True, (False, False, True))
    assert got[(False, False, True)] == (False, (False, False, True))


def test_flags_must_be_bools():
    for module in (neon_brgemm, sve_brgemm):
        with pytest.raises(ValueError, match="trans_c"):
            module.program(4, 4, 4, trans_c=1)
        with pytest.raises(ValueError, match="trans_b"):
            module.program(4, 4, 4, trans_b="yes")
