"""The kernel cache of `minijit.kernels` (`brgemm`, `unary`, `binary`): the same arguments give
the same kernel, which computes what a fresh one does; other arguments another kernel; least
recently used out first; errors not cached; safe from several threads."""

from __future__ import annotations

import threading
from unittest import mock

import numpy as np
import pytest

from minijit import kernels


@pytest.fixture(autouse=True)
def empty_cache():
    kernels.cache_clear()
    yield
    kernels.cache_clear()


def test_same_arguments_same_kernel_defaults_and_native_resolved() -> None:
    a = kernels.brgemm(16, 4, 8, target="native")
    assert kernels.brgemm(16, 4, 8, 1, trans_a=False, dtype="fp32", target=kernels.native_target()) is a
    assert kernels.cache_info() == {"hits": 1, "misses": 1, "size": 1}
    others = [
        kernels.brgemm(16, 4, 8, 2, target="native"),
        kernels.brgemm(16, 4, 8, dtype="fp64", target="native"),
        kernels.brgemm(16, 4, 8, trans_b=True, target="native"),
        kernels.brgemm(16, 4, 8, target="aarch64-neon"),
        kernels.brgemm(16, 4, 8, target="aarch64-sve", sve_vl=256),
        kernels.unary(16, 4, target="native"),
        kernels.unary(16, 4, ptype="relu", target="native"),
        kernels.binary(16, 4, target="native"),
        kernels.binary(16, 4, ptype="mul", target="native"),
    ]
    assert len({id(k) for k in [a, *others]}) == 10
    assert kernels.cache_info()["size"] == 10


def test_a_cached_kernel_computes_like_a_fresh_one() -> None:
    """Run natively or emulated: C += A B through the cached kernel object, twice."""
    rng = np.random.default_rng(0)
    m, n, k = 13, 5, 7
    A = rng.standard_normal((k, m)).astype(np.float32)  # column-major M x K
    B = rng.standard_normal((n, k)).astype(np.float32)  # column-major K x N
    want = (B.astype(np.float64) @ A.astype(np.float64)).astype(np.float32)
    first = kernels.brgemm(m, n, k, target="native")
    for _ in range(2):
        kern = kernels.brgemm(m, n, k, target="native")
        assert kern is first
        C = np.zeros((n, m), np.float32)
        kern(A, B, C, m, k, m, 0, 0)
        np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)


def test_least_recently_used_out_first() -> None:
    with mock.patch.object(kernels, "CACHE_SIZE", 2):
        a = kernels.binary(8, 1, target="native")
        b = kernels.binary(9, 1, target="native")
        assert kernels.binary(8, 1, target="native") is a  # a is now the most recent
        kernels.binary(10, 1, target="native")  # b goes
        assert kernels.cache_info()["size"] == 2
        assert kernels.binary(8, 1, target="native") is a
        assert kernels.binary(9, 1, target="native") is not b


def test_errors_are_not_cached_and_unhashable_arguments_reach_the_checks() -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="k must be"):
            kernels.brgemm(4, 4, 0, target="native")
    with pytest.raises(ValueError, match="k must be"):
        kernels.brgemm(4, 4, [8], target="native")
    with pytest.raises(ValueError, match="target must be"):
        kernels.brgemm(4, 4, 4, target="riscv")
    assert kernels.cache_info() == {"hits": 0, "misses": 0, "size": 0}


def test_threads_generating_at_once_get_working_kernels() -> None:
    got: list = []
    errors: list = []

    def work(i: int) -> None:
        try:
            got.append((i % 3, kernels.unary(16 + i % 3, 3, ptype="copy", target="native")))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 12
    for j in range(3):
        m = 16 + j
        kern = kernels.unary(m, 3, ptype="copy", target="native")
        a = np.arange(m * 3, dtype=np.float32)
        b = np.zeros(m * 3, np.float32)
        kern(a, b, m, m)
        np.testing.assert_array_equal(b, a)
