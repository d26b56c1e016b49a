"""JIT'd CPU SpMM (x86-64 natively, AArch64 NEON natively or emulated) vs scipy."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.runtime.features import host
from minijit.sparse import SpMM, cpu, spmm
from tests.minijit.sparse.helpers import quantized_reference, skewed

HOST = host()
ON_X86 = HOST.isa == "x86_64"
X86_ISAS = [
    pytest.param("avx512", marks=pytest.mark.skipif(not (ON_X86 and HOST.avx512f), reason="no AVX-512F")),
    pytest.param("avx2", marks=pytest.mark.skipif(not (ON_X86 and HOST.avx2), reason="no AVX2")),
]
kernel = functools.lru_cache(maxsize=128)(cpu.generate)


def _random_csr(rng, m, k, density, empty_frac):
    s = sp.random(m, k, density=density, format="csr", dtype=np.float32, random_state=rng)
    s = s.tolil()
    for r in np.flatnonzero(rng.random(m) < empty_frac):
        s.rows[r], s.data[r] = [], []
    s = s.tocsr()
    s.sort_indices()
    return s


def _run(isa, s, b):
    n = b.shape[1]
    c = np.full((s.shape[0], n), np.nan, np.float32)
    ip, ix, d = s.indptr.astype(np.int32), s.indices.astype(np.int32), s.data.astype(np.float32)
    if ix.size == 0:
        ix, d = np.zeros(1, np.int32), np.zeros(1, np.float32)
    kernel(n, isa)(ip, ix, d, b, c, s.shape[0])
    return c


@pytest.mark.parametrize("isa", X86_ISAS)
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 60),
    k=st.integers(1, 80),
    n=st.integers(1, 300),
    density=st.sampled_from([0.0, 0.01, 0.1, 0.5, 1.0]),
    empty=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**31),
)
def test_x86_vs_scipy(isa, m, k, n, density, empty, seed):
    rng = np.random.default_rng(seed)
    s = _random_csr(rng, m, k, density, empty)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(_run(isa, s, b), s @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", X86_ISAS)
def test_x86_wide_rows_and_guard(isa):
    rng = np.random.default_rng(1)
    s = _random_csr(rng, 9, 40, 0.3, 0.2)
    for n in (383, 384, 385, 1000):
        b = rng.standard_normal((40, n)).astype(np.float32)
        big = np.full((9 * n + 16,), 7.0, np.float32)  # the tail guard must stay untouched
        c = big[: 9 * n].reshape(9, n)
        ip, ix, d = s.indptr, s.indices, s.data
        kernel(n, isa)(ip, ix, d, b, c, 9)
        np.testing.assert_allclose(c, s @ b, rtol=1e-5, atol=1e-5)
        assert (big[9 * n :] == 7.0).all()


@settings(max_examples=8, deadline=None)
@given(
    m=st.integers(1, 20),
    k=st.integers(1, 30),
    n=st.integers(1, 80),
    density=st.sampled_from([0.0, 0.2, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_neon_vs_scipy(m, k, n, density, seed):
    """AArch64 NEON kernel: natively on ARM, under qemu elsewhere."""
    rng = np.random.default_rng(seed)
    s = _random_csr(rng, m, k, density, 0.2)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(_run("neon", s, b), s @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 64, 65, 66, 67, 1000])
def test_listings_reassemble(n):
    for isa in ("avx512", "avx2"):
        prog = cpu.x86_program(n, isa)
        assert llvm.assemble(prog.listing(), triple="x86_64", mattr="") == prog.code(), (isa, n)
    prog = cpu.neon_program(n)
    assert llvm.assemble(prog.listing()) == prog.code(), n


def test_bad_n():
    for bad in (0, -1, cpu.MAX_N + 1, 2.0, True):
        with pytest.raises(ValueError):
            cpu.x86_program(bad)


@pytest.mark.skipif(not (ON_X86 or HOST.isa == "aarch64"), reason="no native kernel")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_api_native(threads):
    rng = np.random.default_rng(threads)
    s = skewed(200, 500, 0.02, rng)
    b = rng.standard_normal((500, 70)).astype(np.float32)
    op = SpMM(s, 70, target="native", threads=threads)
    c = np.empty((200, 70), np.float32)
    np.testing.assert_allclose(op.execute(b, c), s @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(op.execute(np.asfortranarray(b), c), s @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        op.execute(b.astype(np.float16), c), s @ b.astype(np.float16).astype(np.float32), rtol=1e-5, atol=1e-5
    )
    s2 = s.copy()
    s2.data = rng.standard_normal(s.nnz).astype(np.float32)
    op.update_values(s2.data)
    np.testing.assert_allclose(op.execute(b, c), s2 @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(spmm(s2, b), s2 @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not (ON_X86 or HOST.isa == "aarch64"), reason="no native kernel")
def test_api_native_fp16_and_model():
    rng = np.random.default_rng(7)
    s = skewed(120, 900, 0.05, rng)
    b = rng.standard_normal((900, 40)).astype(np.float32)
    op = SpMM(s, 40, dtype="fp16", target="native")
    ref = quantized_reference(s, b)
    np.testing.assert_allclose(op.execute(b, np.empty((120, 40), np.float32)), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(op.model(b), ref, rtol=1e-4, atol=1e-4)
    empty = SpMM((np.zeros(4, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), (3, 5)), 4, target="native")
    c = np.full((3, 4), np.nan, np.float32)
    assert (empty.execute(np.ones((5, 4), np.float32), c) == 0).all()


@pytest.mark.parametrize(
    ("profile", "isa"), [("zen3", "avx2"), ("cascadelake", "avx512"), ("zen4", "avx512"), ("neoverse-v1", "neon")]
)
def test_native_spmm_kernel_is_the_native_targets(pin_host, profile, isa):
    """The native SpMM runs the kernel of `minijit.targets.native` in its `spmm_isa`: AVX2,
    AVX-512, and NEON on an SVE host (the SpMM generator has no SVE kernel; the target says so).
    Decisions only: an x86-64 host's kernel is built and loaded on an x86-64 machine, not run."""
    from minijit import targets
    from minijit.sparse.spmm_cpu import spmm_target

    pin_host(profile)
    t = spmm_target()
    assert t == targets.native() and t.spmm_isa == isa
    if t.native and isa != "neon":
        op = SpMM(skewed(30, 20, 0.2, np.random.default_rng(1)), 20, target="native", threads=1)
        assert op.target_info == t and op.isa == isa and op.info()["kernel"] == f"csr_spmm_{isa}_n20"
        assert ("zmm" in op._kernel.listing) == (isa == "avx512")


def test_spmm_isa_override_names_a_kernel_and_a_host_without_one_is_refused():
    from dataclasses import replace

    from minijit.runtime import features, profiles
    from minijit.sparse.spmm_cpu import spmm_target
    from minijit.targets import AArch64Target, X86Target

    assert spmm_target("avx2") == X86Target("avx2") and spmm_target("avx512") == X86Target("avx512")
    assert spmm_target("neon") == AArch64Target("neon")
    for bad in ("sve", "sse4", "x86_64-avx2"):
        with pytest.raises(ValueError, match="isa must be 'avx512', 'avx2' or 'neon', got"):
            spmm_target(bad)
    bare = replace(profiles.get("zen3"), key="no-avx2", info=features.HostInfo(isa="x86_64", os="linux"))
    with (
        features.pinned(bare),
        pytest.raises(RuntimeError, match=r"no native SpMM kernel .*x86_64-avx2 needs AVX2\+FMA"),
    ):
        spmm_target()
