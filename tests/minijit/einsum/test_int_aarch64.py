"""`minijit.einsum(..., target="aarch64-neon")` on int32 arrays and ``target="aarch64-sve"`` on
int32/int64 run the integer BRGEMMs (in the qemu worker on other hosts) and give numpy's result
bit for bit (wrap-around included); int64 on NEON and the SME target, which have no such kernels,
stay on numpy's einsum."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minijit

from .strategies import expressions
from .test_int_compiled import int_operands


@given(
    expr=expressions(min_ops=2, max_ops=3, max_indices=5, max_size=7, max_product=1024),
    kind=st.sampled_from(["full", "edges", "small"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_neon_int32_expressions_bit_for_bit(expr, kind, seed):
    subs, shapes = expr
    ops = int_operands(shapes, np.int32, seed, kind)
    want = np.einsum(subs, *ops)
    got = minijit.einsum(subs, *ops, target="aarch64-neon")
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert minijit.einsum(subs, *ops, target="aarch64-neon", explain=True).startswith("minijit compiled:")


def test_neon_gemm_like_and_what_stays_numpys():
    a, b = int_operands([(70, 45), (45, 33)], np.int32, 1, "edges")
    for subs, ops in (("ij,jk->ik", [a, b]), ("ji,jk->ik", [a, a]), ("ij,j->i", [a, b[:, 0].copy()])):
        got = minijit.einsum(subs, *ops, target="aarch64-neon")
        assert np.array_equal(got, np.einsum(subs, *ops)), subs
    for target, ops in (("aarch64-neon", [a.astype(np.int64), b]), ("aarch64-sme", [a, b])):
        text = minijit.einsum("ij,jk->ik", *ops, target=target, explain=True)
        assert text.startswith("numpy.einsum:") and "kernels" in text, (target, text)
        assert np.array_equal(minijit.einsum("ij,jk->ik", *ops, target=target), np.einsum("ij,jk->ik", *ops))


@given(
    expr=expressions(min_ops=2, max_ops=3, max_indices=5, max_size=7, max_product=1024),
    dtype=st.sampled_from([np.int32, np.int64]),
    kind=st.sampled_from(["full", "edges"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sve_int_expressions_bit_for_bit(expr, dtype, kind, seed):
    subs, shapes = expr
    ops = int_operands(shapes, dtype, seed, kind)
    want = np.einsum(subs, *ops)
    got = minijit.einsum(subs, *ops, target="aarch64-sve")
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert minijit.einsum(subs, *ops, target="aarch64-sve", explain=True).startswith("minijit compiled:")
