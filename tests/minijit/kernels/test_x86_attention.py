"""The fused attention kernel on x86-64 (`minijit.kernels.x86_64.attention`): every size at run
time against a float64 numpy reference (causal with row offsets, odd strides, huge logits, other
tiles), NaN guard zones around the output, and its listing reassembled by llvm-mc (AVX2 and
AVX-512; AVX-512 code runs only where the host has it)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit import targets
from minijit.kernels.x86_64 import attention
from minijit.runtime import detected_host
from minijit.runtime.kernel import Kernel
from tests.conftest import examples
from tests.minijit.attention.test_api import reference as api_reference

X86 = detected_host().isa == "x86_64"
NATIVE = targets.native().isa if X86 else None
GUARD = 64  # elements of NaN before and after the output
_KERNELS: dict = {}


def reference(q, kt, v, row0: int, causal: bool, scale: float) -> np.ndarray:
    """Float64 softmax(scale q kt + causal bias) v, query i attending to keys j <= row0 + i."""
    s = (q.astype(np.float64) @ kt.astype(np.float64)) * scale
    L, S = s.shape
    if causal:
        s = np.where(np.arange(S)[None, :] <= row0 + np.arange(L)[:, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - m)
        return (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


def _raw(dtype, isa: str, g=None, s_x=None):
    key = (np.dtype(dtype).name, isa, g, s_x)
    if key not in _KERNELS:
        name, ctype = ("fp32", "float") if dtype == np.float32 else ("fp64", "double")
        kern = attention.generate(name, isa, g, s_x)
        _KERNELS[key] = Kernel(kern.code, attention.signature(ctype), unchecked=True, isa="x86_64")
    return _KERNELS[key]


def call(q, kt, v, o, row0=0, causal=False, scale=1.0, g=None, s_x=None, isa=None):
    """Run the kernel on 2-D views (row strides from the arrays) and a fresh scratch."""
    dtype = q.dtype
    name = "fp32" if dtype == np.float32 else "fp64"
    isa = isa or NATIVE
    L, E = q.shape
    S, Ev = v.shape
    scratch = np.full(attention.scratch_bytes(name, isa, E, Ev, g, s_x) // 8 + 1, np.nan)
    es = dtype.itemsize
    args = attention.pack_args(
        L=L, S=S, E=E, Ev=Ev, ldq=q.strides[0] // es, ldkt=kt.strides[0] // es, ldv=v.strides[0] // es,
        ldo=o.strides[0] // es, row0=row0, causal=int(causal), scratch=scratch.ctypes.data,
    )  # fmt: skip
    params = np.array([scale], dtype)
    _raw(dtype, isa, g, s_x)(q.ctypes.data, kt.ctypes.data, v.ctypes.data, o.ctypes.data, args, params)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_listing_reassembles_to_the_code(isa, dtype):
    try:
        llvm.find_tool("llvm-mc")
    except llvm.LlvmError as e:  # pragma: no cover - the test command installs llvm
        pytest.skip(str(e))
    vl = (32 if isa == "avx2" else 64) // (4 if dtype == "fp32" else 8)
    for g, s_x in ((None, None), (3, None), (8, 5 * vl), (18, 4 * vl), (13, 2 * vl)):
        prog = attention.program(dtype, isa, g, s_x)
        assert llvm.assemble(prog.listing(), triple="x86_64", mattr="") == prog.code()


def test_tiles_and_args_are_validated_by_name():
    with pytest.raises(ValueError, match="g must be"):
        attention.check_tiles("fp32", "avx2", g=0)
    with pytest.raises(ValueError, match="g must be"):
        attention.check_tiles("fp32", "avx2", g=attention.G_MAX + 1)
    with pytest.raises(ValueError, match="s_x must be a multiple"):
        attention.check_tiles("fp32", "avx2", s_x=12)
    with pytest.raises(ValueError, match="s_x must be a multiple"):
        attention.check_tiles("fp64", "avx512", s_x=0)
    with pytest.raises(ValueError, match="dtype"):
        attention.check_tiles("fp16", "avx2")
    assert attention.check_tiles("fp32", "avx512") == (6, 64)
    assert attention.check_tiles("fp64", "avx2") == (6, 16)
    full = {n: 1 for n in attention.ARGS} | {"causal": 0}
    with pytest.raises(ValueError, match="missing"):
        attention.pack_args(**{k: v for k, v in full.items() if k != "ldq"})
    with pytest.raises(ValueError, match="causal"):
        attention.pack_args(**(full | {"causal": 2}))
    with pytest.raises(ValueError, match="L must be"):
        attention.pack_args(**(full | {"L": -1}))


def _buffers(rng, L, S, E, Ev, pad, dtype, mag=1.0):
    q = np.full((L, E + pad), np.nan, dtype)
    q[:, :E] = rng.uniform(-1, 1, (L, E)) * mag
    kt = np.full((E, S + pad), np.nan, dtype)
    kt[:, :S] = rng.uniform(-1, 1, (E, S)) * mag
    v = np.full((S, Ev + pad), np.nan, dtype)
    v[:, :Ev] = rng.uniform(-1, 1, (S, Ev))
    obuf = np.full(2 * GUARD + L * (Ev + pad), np.nan, dtype)
    o = obuf[GUARD : GUARD + L * (Ev + pad)].reshape(L, Ev + pad)
    return q[:, :E], kt[:, :S], v[:, :Ev], obuf, o


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@settings(max_examples=examples(150), deadline=None)
@given(
    L=st.integers(1, 70),
    S=st.integers(1, 70),
    E=st.sampled_from([1, 3, 8, 17, 64]),
    Ev=st.sampled_from([1, 3, 8, 17, 64]),
    causal=st.booleans(),
    row0=st.integers(0, 40),
    scale=st.sampled_from([0.125, 0.5, 3.0]),
    pad=st.integers(0, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    big=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_kernel_matches_the_float64_reference(L, S, E, Ev, causal, row0, scale, pad, dtype, big, seed):
    rng = np.random.default_rng(seed)
    mag = 100.0 / np.sqrt(scale * max(E, 1) ** 0.5) if big else 1.0  # |scores| up to ~1e4 when big
    q, kt, v, obuf, o = _buffers(rng, L, S, E, Ev, pad, dtype, mag)
    before = obuf.copy()
    call(q, kt, v, o, row0=row0, causal=causal, scale=scale)
    want = reference(q, kt, v, row0, causal, scale)
    assert np.isfinite(o[:, :Ev]).all()
    tol = 3e-5 if dtype == np.float32 else 1e-12
    if big and dtype == np.float32:  # scores of ~1e4 carry fp32 rounding of ~1e-3 into the softmax
        tol = 3e-3
    np.testing.assert_allclose(o[:, :Ev], want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())))
    # nothing written outside L x Ev: the guards and the row padding stay NaN
    np.testing.assert_array_equal(obuf[:GUARD], before[:GUARD])
    np.testing.assert_array_equal(obuf[-GUARD:], before[-GUARD:])
    assert np.isnan(o[:, Ev:]).all()


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_the_api_reference_with_torch_causal(dtype):
    """row0 = 0 and causal: torch's top-left triangle, as tests/minijit/attention's reference."""
    rng = np.random.default_rng(1)
    L, S, E, Ev = 37, 53, 17, 9
    q, kt, v, _, o = _buffers(rng, L, S, E, Ev, 0, dtype)
    for causal in (False, True):
        call(q, kt, v, o, causal=causal, scale=0.25)
        want = api_reference(q, kt.T, v, is_causal=causal, scale=0.25)
        tol = 3e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(o, want, rtol=0, atol=tol)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize(
    "g,sx_vectors", [(1, 1), (2, 3), (5, 2), (7, 1), (8, 5), (6, 8), (12, 4), (13, 2), (18, 4), (24, 3)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_other_tiles(g, sx_vectors, dtype):
    """Tiles other than the default (the IO model's choices): query tails, key tails, causal; tiles
    of several register blocks (g > 6: blocks of 6 rows and a shorter last one)."""
    vl = 32 // np.dtype(dtype).itemsize if NATIVE == "avx2" else 64 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(g * 10 + sx_vectors)
    for L, S, E, Ev, causal, row0 in ((19, 45, 8, 17, 1, 3), (9, 70, 3, 64, 0, 0), (23, 23, 17, 5, 1, 0)):
        q, kt, v, obuf, o = _buffers(rng, L, S, E, Ev, 1, dtype)
        call(q, kt, v, o, row0=row0, causal=bool(causal), scale=0.5, g=g, s_x=sx_vectors * vl)
        tol = 3e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(o[:, :Ev], reference(q, kt, v, row0, bool(causal), 0.5), rtol=0, atol=tol)
        assert np.isnan(obuf[:GUARD]).all() and np.isnan(obuf[-GUARD:]).all()


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
def test_huge_logits_and_masked_keys_give_exact_zero_weights():
    """Scores of +-1e4 stay finite; a key far below the max gets weight exactly 0."""
    L, S, Ev = 3, 40, 2
    q = np.array([[100.0], [-100.0], [0.0]], np.float32)
    kt = np.linspace(-100, 100, S, dtype=np.float32)[None, :].copy()
    v = np.zeros((S, Ev), np.float32)
    v[:, 0] = np.arange(S)
    v[:, 1] = 1
    o = np.full((L, Ev), np.nan, np.float32)
    call(q, kt, v, o, scale=1.0)
    assert np.isfinite(o).all()
    assert o[0, 0] == S - 1 and o[1, 0] == 0  # softmax of +-1e4 gaps: one key
    np.testing.assert_allclose(o[2, 0], (S - 1) / 2, rtol=1e-6)
    np.testing.assert_array_equal(o[:, 1], 1)


@pytest.mark.skipif(NATIVE != "avx512", reason="this host has no AVX-512: its code is checked by llvm-mc only")
def test_avx512_runs():  # pragma: no cover - AVX-512 hosts only
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        q, kt, v, _, o = _buffers(rng, 29, 67, 17, 33, 2, dtype)
        call(q, kt, v, o, row0=5, causal=True, scale=0.5, isa="avx512")
        tol = 3e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(o[:, :33], reference(q, kt, v, 5, True, 0.5), rtol=0, atol=tol)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tile_major_k_transposed(dtype):
    """K^T packed tile-major (kt_tile = E * s_x, ldkt = s_x), the last tile partial: the same
    result as the plain E x S layout."""
    name, ctype = ("fp32", "float") if dtype == np.float32 else ("fp64", "double")
    _, s_x = attention.check_tiles(name, NATIVE)
    rng = np.random.default_rng(5)
    for L, S, E, Ev, causal in ((13, 2 * s_x + 5, 17, 9, True), (7, s_x, 3, 8, False), (20, 3 * s_x, 8, 5, True)):
        q, kt, v, _, o = _buffers(rng, L, S, E, Ev, 0, dtype)
        nt = -(-S // s_x)
        packed = np.full((nt, E, s_x), np.nan, dtype)
        for t in range(nt):
            w = min(s_x, S - t * s_x)
            packed[t, :, :w] = kt[:, t * s_x : t * s_x + w]
        scratch = np.full(attention.scratch_bytes(name, NATIVE, E, Ev) // 8 + 1, np.nan)
        args = attention.pack_args(
            L=L, S=S, E=E, Ev=Ev, ldq=E, ldkt=s_x, ldv=Ev, ldo=Ev, row0=0, causal=int(causal),
            scratch=scratch.ctypes.data, kt_tile=E * s_x,
        )  # fmt: skip
        params = np.array([0.5], dtype)
        _raw(dtype, NATIVE)(q.ctypes.data, packed.ctypes.data, v.ctypes.data, o.ctypes.data, args, params)
        tol = 3e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(o, reference(q, kt, v, 0, causal, 0.5), rtol=0, atol=tol)


@pytest.mark.skipif(not X86, reason="runs x86-64 code")
@settings(max_examples=examples(80), deadline=None)
@given(
    L=st.integers(1, 40),
    S=st.integers(1, 70),
    E=st.sampled_from([1, 3, 8, 17]),
    Ev=st.sampled_from([1, 3, 17]),
    kind=st.sampled_from(["full", "rows broadcast", "columns broadcast", "-inf entries", "a row all -inf"]),
    causal=st.booleans(),
    pad=st.integers(0, 3),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_additive_bias(L, S, E, Ev, kind, causal, pad, dtype, seed):
    """A float bias added to the scores (torch's float attn_mask): row stride any (0: one row for
    every query row), column stride 1 or 0; -inf entries are masked keys, a row of -inf is NaN."""
    rng = np.random.default_rng(seed)
    q, kt, v, obuf, o = _buffers(rng, L, S, E, Ev, pad, dtype)
    full = np.full((L, S + pad), np.nan, dtype)
    full[:, :S] = rng.uniform(-2, 2, (L, S))
    ldb, ldb_c, bias = S + pad, 1, full[:, :S]
    if kind == "rows broadcast":
        ldb, bias = 0, np.broadcast_to(full[0, :S], (L, S))
    elif kind == "columns broadcast":
        ldb_c, bias = 0, np.broadcast_to(full[:, :1], (L, S))
    elif kind == "-inf entries":
        full[:, :S][rng.uniform(size=(L, S)) < 0.3] = -np.inf
    elif kind == "a row all -inf":
        full[rng.integers(L), :S] = -np.inf
    name = "fp32" if dtype == np.float32 else "fp64"
    scratch = np.full(attention.scratch_bytes(name, NATIVE, E, Ev) // 8 + 1, np.nan)
    es = np.dtype(dtype).itemsize
    args = attention.pack_args(
        L=L, S=S, E=E, Ev=Ev, ldq=q.strides[0] // es, ldkt=kt.strides[0] // es, ldv=v.strides[0] // es,
        ldo=o.strides[0] // es, row0=0, causal=int(causal), scratch=scratch.ctypes.data,
        bias=full.ctypes.data, ldb=ldb, ldb_c=ldb_c,
    )  # fmt: skip
    params = np.array([0.5], dtype)
    _raw(dtype, NATIVE)(q.ctypes.data, kt.ctypes.data, v.ctypes.data, o.ctypes.data, args, params)
    s = (q.astype(np.float64) @ kt.astype(np.float64)) * 0.5 + bias.astype(np.float64)
    if causal:
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - m)
        want = (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)
    tol = 3e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(o[:, :Ev], want, rtol=0, atol=tol)
    assert np.isnan(obuf[:GUARD]).all() and np.isnan(obuf[-GUARD:]).all() and np.isnan(o[:, Ev:]).all()
