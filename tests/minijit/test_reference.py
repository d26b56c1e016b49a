"""Tests of the numpy reference executor (minijit.reference) against np.einsum and friends."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from minijit.errors import SetupError, error_t
from minijit.ir import Dimension, TensorConfig, dim_t, exec_t, ptype_t
from minijit.optimizer import optimize
from minijit.reference import execute_iter
from tests.minijit.helpers import UFUNCS, trus_args

SEED = (
    "mnkmnk",
    None,  # exec types per variant
    (32, 32, 8, 32, 32, 32),
    (8192, 0, 1024, 1, 0, 32),
    (0, 8192, 1024, 0, 32, 1),
    (32768, 1024, 0, 1, 32, 0),
)
SEED_VARIANTS = {
    "gemm": ("none", "gemm", "none", ("seq", "seq", "seq", "prim", "prim", "prim")),
    "brgemm": ("none", "brgemm", "none", ("seq", "seq", "prim", "prim", "prim", "prim")),
    "zero_brgemm_relu": ("zero", "brgemm", "relu", ("seq", "seq", "prim", "prim", "prim", "prim")),
}
PRESENT = {
    "in0": (dim_t.c, dim_t.m, dim_t.k),
    "in1": (dim_t.c, dim_t.n, dim_t.k),
    "out": (dim_t.c, dim_t.m, dim_t.n),
}


def rand(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, n).astype(dtype)


def tol(dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if np.dtype(dtype) == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


# --------------------------------------------------------------------------------------------
# docs/seeds/004_mini_jit_backend.txt section 5.3 configurations
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(SEED_VARIANTS))
def test_seed_configurations(variant):
    first, main, last, exec_types = SEED_VARIANTS[variant]
    dims, _, sizes, s0, s1, so = SEED
    config = TensorConfig.from_lists("fp32", first, main, last, dims, exec_types, sizes, s0, s1, so)
    rng = np.random.default_rng(1)
    A = rand(rng, 32 * 8 * 32 * 32, np.float32)  # A[m0, k0, k1, m1]
    B = rand(rng, 32 * 8 * 32 * 32, np.float32)  # B[n0, k0, n1, k1]
    C = rand(rng, 32**4, np.float32)  # C[m0, n0, n1, m1]
    C0 = C.copy()
    execute_iter(config, A, B, C)
    expected = np.einsum("akcb,dkec->adeb", A.reshape(32, 8, 32, 32), B.reshape(32, 8, 32, 32)).reshape(-1)
    if first == "none":
        expected += C0
    if last == "relu":
        expected = np.maximum(expected, 0)
        assert (C == 0).any()
    np.testing.assert_allclose(C, expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# docs/seeds/004_mini_jit_backend.txt section 5.6.2: the permutation trus -> turs
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("T", "R", "U", "S"), list(itertools.product((3, 4, 7), repeat=4)))
def test_unary_permutation(T, R, U, S):
    config = TensorConfig.from_lists(*trus_args("identity", T, R, U, S))
    rng = np.random.default_rng(T * 1000 + R * 100 + U * 10 + S)
    A = rng.uniform(-10, 10, T * R * U * S).astype(np.float32)
    expected = A.reshape(T, R, U, S).transpose(0, 2, 1, 3).reshape(-1)
    C = np.zeros_like(A)
    execute_iter(config, A, None, C)
    np.testing.assert_array_equal(C, expected)
    C2 = np.zeros_like(A)
    execute_iter(optimize(config, thread_target=4, max_kernel_size=8, min_kernel_size=2), A, None, C2)
    np.testing.assert_array_equal(C2, expected)


# --------------------------------------------------------------------------------------------
# helpers for generated operations
# --------------------------------------------------------------------------------------------
def layout(draw, sizes: list[int], ids: list[int], allow_negative: bool) -> tuple[dict[int, int], int, int]:
    """Random dense layout of the dims ``ids``: strides, base offset, buffer length."""
    order = draw(st.permutations(ids))
    strides: dict[int, int] = {}
    step = 1
    for i in reversed(order):  # last in ``order`` has unit stride
        strides[i] = step
        step *= sizes[i]
    pad = draw(st.integers(0, 3))
    base = 0
    if allow_negative:
        for i in ids:
            if draw(st.booleans()):
                strides[i] = -strides[i]
                base += (sizes[i] - 1) * -strides[i]
    return strides, base + pad, step + 2 * pad


def logical(buf: np.ndarray, base: int, config: TensorConfig, tensor: str, ids: list[int]) -> np.ndarray:
    """View of a flat buffer with one axis per dim in ``ids`` (list order)."""
    dims = config.dims
    return as_strided(
        buf[base:],
        shape=tuple(dims[i].size for i in ids),
        strides=tuple(dims[i].stride(tensor) * buf.itemsize for i in ids),
    )


@st.composite
def contractions(draw):
    """A GEMM-style contraction (C/M/N/K dims, random counts, sizes and layouts), all dims seq."""
    types = []
    for t, hi in ((dim_t.c, 2), (dim_t.m, 2), (dim_t.n, 2), (dim_t.k, 3)):
        types += [t] * draw(st.integers(0, hi))
    types = draw(st.permutations(types))
    sizes = [draw(st.integers(1, 6)) for _ in types]
    while math.prod(sizes) > 1500:
        sizes[sizes.index(max(sizes))] -= 1
    neg = draw(st.booleans())
    strides, bases, lengths = {}, [], []
    for tensor in ("in0", "in1", "out"):
        ids = [i for i, t in enumerate(types) if t in PRESENT[tensor]]
        s, base, n = layout(draw, sizes, ids, neg)
        strides[tensor] = s
        bases.append(base)
        lengths.append(n)
    exec_ = draw(st.sampled_from(["seq", "undefined"]))
    dims = [
        Dimension(t, exec_, sizes[i], strides["in0"].get(i, 0), strides["in1"].get(i, 0), strides["out"].get(i, 0))
        for i, t in enumerate(types)
    ]
    first = draw(st.sampled_from(["none", "zero", "relu", "copy"]))
    last = draw(st.sampled_from(["none", "relu", "zero"]))
    dtype = draw(st.sampled_from(["fp32", "fp64"]))
    config = TensorConfig(dtype, first, draw(st.sampled_from(["gemm", "brgemm"])), last, tuple(dims))
    return config, tuple(bases), tuple(lengths)


def expected_contraction(config: TensorConfig, bufs, bases) -> np.ndarray:
    letters = "abcdefghijklmnop"
    ids = {t: [i for i, d in enumerate(config.dims) if d.type in PRESENT[t]] for t in PRESENT}
    a = logical(bufs[0], bases[0], config, "in0", ids["in0"])
    b = logical(bufs[1], bases[1], config, "in1", ids["in1"])
    out = bufs[2].copy()
    c = logical(out, bases[2], config, "out", ids["out"])
    sub = ",".join("".join(letters[i] for i in ids[t]) for t in ("in0", "in1")) + "->"
    sub += "".join(letters[i] for i in ids["out"])
    if config.prim_first is ptype_t.zero:
        c[...] = 0
    elif config.prim_first is ptype_t.relu:
        c[...] = np.maximum(c, 0)
    c += np.einsum(sub, a, b)
    if config.prim_last is ptype_t.relu:
        c[...] = np.maximum(c, 0)
    elif config.prim_last is ptype_t.zero:
        c[...] = 0
    return out


# --------------------------------------------------------------------------------------------
# generated contractions: unoptimized and optimized vs einsum
# --------------------------------------------------------------------------------------------
@settings(max_examples=150)
@given(
    contractions(),
    st.sampled_from([1, 2, 3, 4, 8]),
    st.sampled_from([2, 3, 4, 8, 1024]),
    st.sampled_from([1, 2, 4]),
    st.integers(0, 2**32 - 1),
)
def test_contractions(case, thread_target, max_kernel_size, min_kernel_size, seed):
    config, bases, lengths = case
    rng = np.random.default_rng(seed)
    dt = config.dtype.numpy
    bufs = [rand(rng, n, dt) for n in lengths]
    expected = expected_contraction(config, bufs, bases)

    out = bufs[2].copy()
    execute_iter(config, bufs[0], bufs[1], out, offsets=bases)
    np.testing.assert_allclose(out, expected, **tol(dt))

    opt = optimize(config, thread_target, max_kernel_size, min_kernel_size)
    opt.validate_executable()
    assert opt.flops() == config.flops()
    assert all(d.exec is not exec_t.shared or d.type is not dim_t.k for d in opt.dims)
    out = bufs[2].copy()
    if opt.inputs_swapped:  # the optimized config computes C^T = B^T A^T: its in0 is our in1
        execute_iter(opt, bufs[1], bufs[0], out, offsets=(bases[1], bases[0], bases[2]))
    else:
        execute_iter(opt, bufs[0], bufs[1], out, offsets=bases)
    np.testing.assert_allclose(out, expected, **tol(dt))


@st.composite
def elementwise(draw):
    """A unary or binary op over C/M/N dims with independent random layouts per tensor."""
    main = draw(st.sampled_from(["copy", "relu", "zero", *UFUNCS]))
    n = draw(st.integers(1, 4))
    types = [draw(st.sampled_from([dim_t.c, dim_t.m, dim_t.n])) for _ in range(n)]
    sizes = [draw(st.integers(1, 6)) for _ in types]
    ids = list(range(n))
    neg = draw(st.booleans())
    lay = [layout(draw, sizes, ids, neg) for _ in range(3)]
    if main in ("copy", "relu", "zero"):
        lay[1] = ({i: 0 for i in ids}, 0, 1)
    dims = tuple(Dimension(t, "seq", sizes[i], *(lay[j][0][i] for j in range(3))) for i, t in enumerate(types))
    config = TensorConfig(draw(st.sampled_from(["fp32", "fp64"])), "none", main, "none", dims)
    return config, tuple(x[1] for x in lay), tuple(x[2] for x in lay)


@settings(max_examples=100)
@given(elementwise(), st.sampled_from([1, 4]), st.sampled_from([2, 1024]), st.integers(0, 2**32 - 1))
def test_elementwise(case, thread_target, max_kernel_size, seed):
    config, bases, lengths = case
    rng = np.random.default_rng(seed)
    dt = config.dtype.numpy
    bufs = [rand(rng, n, dt) for n in lengths]
    ids = list(range(len(config.dims)))
    a = logical(bufs[0], bases[0], config, "in0", ids)
    b = logical(bufs[1], bases[1], config, "in1", ids)
    expected = bufs[2].copy()
    c = logical(expected, bases[2], config, "out", ids)
    main = config.prim_main
    if main is ptype_t.copy:
        c[...] = a
    elif main is ptype_t.relu:
        c[...] = np.maximum(a, 0)
    elif main is ptype_t.zero:
        c[...] = 0
    else:
        with np.errstate(divide="ignore"):
            c[...] = UFUNCS[main.name](a, b)
    for cfg in (config, optimize(config, thread_target, max_kernel_size, 1)):
        out = bufs[2].copy()
        execute_iter(cfg, None if main is ptype_t.zero else bufs[0], bufs[1], out, offsets=bases)
        np.testing.assert_allclose(out, expected, **tol(dt))


def test_optimized_matmul_matches_numpy():
    # a small analogue of the seed's 1600^3 case: 96^3 with max kernel size 32
    n = 96
    config = TensorConfig(
        "fp64",
        "none",
        "gemm",
        "none",
        (Dimension("m", "seq", n, 1, 0, 1), Dimension("n", "seq", n, 0, n, n), Dimension("k", "seq", n, n, 1, 0)),
    )
    opt = optimize(config, thread_target=4, max_kernel_size=32, min_kernel_size=8)
    assert opt.prim_main is ptype_t.brgemm and all(d.size <= 32 for d in opt.prim_dims)
    rng = np.random.default_rng(7)
    A, B = rand(rng, n * n, np.float64), rand(rng, n * n, np.float64)
    C = np.zeros(n * n)
    execute_iter(opt, A, B, C)
    # column-major: A is M x K with a[m + k*n]
    expected = A.reshape(n, n).T @ B.reshape(n, n).T
    np.testing.assert_allclose(C.reshape(n, n).T, expected, rtol=1e-12, atol=1e-12)


def test_brgemm_equals_gemm_on_seed_layout():
    dims, _, sizes, s0, s1, so = SEED
    rng = np.random.default_rng(3)
    A = rand(rng, 32 * 8 * 32 * 32, np.float64)
    B = rand(rng, 32 * 8 * 32 * 32, np.float64)
    results = []
    for variant in ("gemm", "brgemm"):
        first, main, last, exec_types = SEED_VARIANTS[variant]
        config = TensorConfig.from_lists("fp64", first, main, last, dims, exec_types, sizes, s0, s1, so)
        C = np.zeros(32**4)
        execute_iter(config, A, B, C)
        results.append(C)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------
def small_gemm() -> TensorConfig:
    return TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (2, 3, 4), (1, 0, 2), (0, 4, 1), (1, 2, 0)
    )


def test_argument_checks():
    c = small_gemm()
    a, b, out = np.zeros(8, np.float32), np.zeros(12, np.float32), np.zeros(6, np.float32)
    execute_iter(c, a, b, out)
    cases = [
        ((a.astype(np.float64), b, out), error_t.wrong_dtype),
        ((a.reshape(2, 4), b, out), error_t.wrong_array),
        ((list(a), b, out), error_t.wrong_array),
        ((a, None, out), error_t.wrong_array),
        ((a, b[:11], out), error_t.out_of_bounds),
        ((a, b, np.zeros(5, np.float32)), error_t.out_of_bounds),
    ]
    for args, code in cases:
        with pytest.raises(SetupError) as info:
            execute_iter(c, *args)
        assert info.value.code is code
    ro = out.copy()
    ro.flags.writeable = False
    with pytest.raises(SetupError) as info:
        execute_iter(c, a, b, ro)
    assert info.value.code is error_t.wrong_array
    with pytest.raises(SetupError) as info:
        execute_iter(c, a, b, out, offsets=(1, 0, 0))
    assert info.value.code is error_t.out_of_bounds and "in0" in str(info.value)


def test_negative_strides_need_a_base_offset():
    # out = in0 reversed: stride -1 from base 5
    c = TensorConfig.from_lists("fp64", "none", "copy", "none", "c", ("prim",), (6,), (-1,), (0,), (1,))
    a = np.arange(6.0)
    out = np.zeros(6)
    with pytest.raises(SetupError) as info:
        execute_iter(c, a, None, out)
    assert info.value.code is error_t.out_of_bounds
    execute_iter(c, a, None, out, offsets=(5, 0, 0))
    np.testing.assert_array_equal(out, a[::-1])


def test_strided_1d_buffers_and_touches():
    # a non-contiguous 1-D buffer works (strides are in elements of the array)
    c = TensorConfig.from_lists("fp64", "relu", "add", "zero", "mn", ("prim", "prim"), (2, 2), (1, 2), (1, 2), (1, 2))
    big = np.arange(8.0) - 4
    a = big[::2]
    out = np.full(4, 7.0)
    execute_iter(c, a, a, out)
    np.testing.assert_array_equal(out, np.zeros(4))  # last touch zero wins
    c2 = TensorConfig.from_lists("fp64", "none", "sub", "relu", "mn", ("prim", "prim"), (2, 2), (1, 2), (1, 2), (1, 2))
    execute_iter(c2, big[::2], big[1::2], out)
    np.testing.assert_array_equal(out, np.maximum(big[::2] - big[1::2], 0))
