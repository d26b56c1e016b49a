"""Dims larger than the kernels take and without a divisor that fits (`minijit.peeling`): set up as
a head and a tail operation, run against numpy, on the native target at real sizes and, with the
limit patched small, by hypothesis over shapes, layouts, touches and threads, natively (every
array between guard pages) and emulated on AArch64."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit import TensorOperation, kernels, peeling, targets
from minijit.ir import TensorConfig, ptype_t
from minijit.runtime import host
from tests.conftest import examples
from tests.minijit.test_gemm_layouts import check_gemm

x86 = pytest.mark.skipif(host().isa != "x86_64", reason="guarded native GEMMs (test_gemm_layouts) run on x86-64")
PRIMES = (257, 401, 521, 769, 1009)


def limited(limit: int, target: str = "native"):
    """The largest prim size of ``target``'s family (`minijit.targets.CpuTarget.max_prim_size`)
    patched to ``limit`` inside the block."""
    return mock.patch.object(type(targets.get_cpu(target)), "max_prim_size", limit)


def gemm_config(m: int, n: int, k: int, first: str = "zero", last: str = "relu") -> TensorConfig:
    """A column-major GEMM, C (M x N) = A (M x K) B (K x N), exec types undefined."""
    return TensorConfig.from_lists(
        "fp32", first, "gemm", last, "mnk", ("undefined",) * 3, (m, n, k), (1, 0, m), (0, k, 1), (1, m, 0)
    )


def test_peel_cuts_the_largest_dim_that_no_block_divides() -> None:
    head, tail = peeling.peel(gemm_config(300, 70001, 512))
    assert [d.size for d in head.config.dims] == [300, 69888, 512]  # 273 blocks of 256
    assert [d.size for d in tail.config.dims] == [300, 113, 512]
    assert head.offsets == (0, 0, 0) and tail.offsets == (0, 69888 * 512, 69888 * 300)  # N strides: 0, K, M
    # an M or N dim: the parts write disjoint blocks of C, each keeps both touches
    for part in (head, tail):
        assert (part.config.prim_first, part.config.prim_last) == (ptype_t.zero, ptype_t.relu)


def test_peel_along_k_splits_the_touches() -> None:
    """Along K both parts add into the same C: zero before the head, relu after the tail."""
    head, tail = peeling.peel(gemm_config(3, 4, 100003))
    assert head.config.dims[2].size == 100003 - 100003 % 256 and tail.config.dims[2].size == 100003 % 256
    assert (head.config.prim_first, head.config.prim_last) == (ptype_t.zero, ptype_t.none)
    assert (tail.config.prim_first, tail.config.prim_last) == (ptype_t.none, ptype_t.relu)
    assert tail.offsets == (99840 * 3, 99840, 0)


def test_peel_leaves_dims_that_blocks_divide() -> None:
    assert peeling.peel(gemm_config(256, 65536 * 4, 200)) is None
    assert peeling.peel(gemm_config(3, 5, 7)) is None
    cfg = minijit.optimize(gemm_config(3, 5, 70001))  # no divisor of 70001 = 7 x 73 x 137 reaches 65536
    assert peeling.oversized(cfg, 65536) and not peeling.oversized(cfg, 70001) and not peeling.oversized(cfg, None)


@pytest.mark.parametrize("n", [70001, 100003, 131071])
def test_long_vectors_run(n: int) -> None:
    """An elementwise op over a 1-D array the kernels cannot take whole (no divisor fits)."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    for ptype, want in (("add", a + b), ("copy", a), ("relu", np.maximum(a, 0))):
        op = TensorOperation("native", num_threads=2)
        op.setup("fp32", "none", ptype, "none", "c", ("undefined",), (n,), (1,), (1 if ptype == "add" else 0,), (1,))
        limit = kernels.max_prim_size(op.target)
        assert bool(op.parts) == (limit is not None and n > limit)
        out = np.full(n, np.nan, np.float32)
        op.execute(a, b if ptype == "add" else None, out)
        np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(minijit.einsum("i,i->i", a, b), a * b)


@x86
def test_peeled_operation_runs_every_path() -> None:
    """A GEMV with 100003 rows on x86-64 (kernel limit 65536): two parts; execute, execute_ptr and
    einsum agree with numpy, and the listing names both parts; execute_iter (a smaller one)."""
    m, k = 100003, 33
    rng = np.random.default_rng(1)
    A, x = rng.standard_normal((m, k), np.float32), rng.standard_normal(k, np.float32)
    want = A.astype(np.float64) @ x
    op = TensorOperation("native", num_threads=2)
    op.setup("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (m, 1, k), (k, 0, 1), (0, 0, 1), (1, 0, 0))
    assert len(op.parts) == 2 and sum(p.config.flops() for p, _ in op.parts) == op.config.flops()
    listing = op.listing()
    assert "the head, from elements (0, 0, 0)" in listing and "the tail, from elements" in listing
    for run in ("execute", "execute_ptr"):
        y = np.full(m, np.nan, np.float32)
        if run == "execute_ptr":
            op.execute_ptr(A.ctypes.data, x.ctypes.data, y.ctypes.data)
        else:
            op.execute(A, x, y)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=run)
    with limited(200):  # the Python path: small
        small = TensorOperation("native", num_threads=2)
        small.setup(
            "fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (1009, 1, k), (k, 0, 1), (0, 0, 1), (1, 0, 0)
        )
    assert small.parts
    y = np.full(1009, np.nan, np.float32)
    small.execute_iter(A[:1009], x, y)
    np.testing.assert_allclose(y, want[:1009], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(minijit.einsum("ij,j->i", A, x), want, rtol=1e-4, atol=1e-4)


@x86
@pytest.mark.parametrize(
    "m,n,k",
    [(70001, 1, 3), (1, 70001, 5), (5, 1, 70001), (4, 3, 70001), (70001, 3, 2), (3, 70001, 2), (3, 2, 131071)],
)
def test_gemms_over_the_kernel_limit_match_numpy_inside_their_arrays(m: int, n: int, k: int) -> None:
    for orders, dtype, threads in (
        (("C", "C", "C"), "fp32", 1),
        (("F", "F", "F"), "fp64", 2),
        (("C", "F", "C"), "fp32", 2),
    ):
        check_gemm(m, n, k, orders, ("odd", "exact", "odd"), threads, dtype, ("upper",) * 3, 7, "zero", "relu")


sizes = st.one_of(st.integers(1, 40), st.sampled_from(PRIMES + (512, 768)))


@x86
@settings(max_examples=examples(25), deadline=None)
@given(
    m=sizes,
    n=sizes,
    k=sizes,
    orders=st.tuples(*(st.sampled_from("CF") for _ in range(3))),
    pads=st.tuples(*(st.sampled_from(["exact", "odd"]) for _ in range(3))),
    threads=st.integers(1, 3),
    dtype=st.sampled_from(["fp32", "fp64"]),
    ends=st.tuples(*(st.sampled_from(["upper", "lower"]) for _ in range(3))),
    touches=st.sampled_from([("none", "none"), ("zero", "none"), ("none", "relu"), ("zero", "relu")]),
    limit=st.sampled_from([200, 256]),
    seed=st.integers(0, 2**16),
)
def test_peeling_at_a_small_limit_matches_numpy_inside_the_arrays(
    m, n, k, orders, pads, threads, dtype, ends, touches, limit, seed
) -> None:
    """The target's ``max_prim_size`` patched to ``limit``: prime sizes over it are peeled (recursively,
    one dim after the other); nothing outside the arrays is touched."""
    with limited(limit):
        check_gemm(m, n, k, orders, pads, threads, dtype, ends, seed, *touches)


@pytest.mark.parametrize("target", ["aarch64-neon", "aarch64-sve"])
def test_peeling_emulated(target: str) -> None:
    """The parts of a peeled GEMM (K and M prime) and add run emulated, limit patched to 200."""
    rng = np.random.default_rng(3)
    m, n, k = 401, 3, 257
    A, B = rng.standard_normal((k, m), np.float32), rng.standard_normal((n, k), np.float32)  # column-major
    with limited(200, target):
        op = TensorOperation(target, num_threads=1)
        op.setup("fp32", "zero", "gemm", "relu", "mnk", ("undefined",) * 3, (m, n, k), (1, 0, m), (0, k, 1), (1, m, 0))
        assert len(op.parts) == 2
        C = np.full((n, m), np.nan, np.float32)
        op.execute(A, B, C)
        want = np.maximum(B.astype(np.float64) @ A.astype(np.float64), 0)
        np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)
        a, b = rng.standard_normal(1009, np.float32), rng.standard_normal(1009, np.float32)
        add = TensorOperation(target, num_threads=1)
        add.setup("fp32", "none", "add", "none", "c", ("undefined",), (1009,), (1,), (1,), (1,))
        assert add.parts
        out = np.full(1009, np.nan, np.float32)
        add.execute(a, b, out)
        np.testing.assert_array_equal(out, a + b)


def test_a_failed_setup_drops_the_parts() -> None:
    """A peeled operation set up again with a bad configuration keeps neither parts nor config."""
    op = TensorOperation("native", num_threads=1)
    with limited(200):
        op.setup("fp32", "none", "add", "none", "c", ("undefined",), (1009,), (1,), (1,), (1,))
        assert len(op.parts) == 2
        with pytest.raises(minijit.SetupError):
            op.setup("fp32", "none", "add", "none", "c", ("undefined",), (1009,), (1,), (1,), (0,))
    assert op.config is None and op.parts == []
    with pytest.raises(RuntimeError, match="before a successful setup"):
        op.execute(np.zeros(1009, np.float32), np.zeros(1009, np.float32), np.zeros(1009, np.float32))
