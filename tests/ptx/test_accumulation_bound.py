"""One accumulation bound: the GEMM test helper and `minijit.cuda.hwrecord` judge launches by the
same function; it is the smaller of the worst case and the statistical bound, grows with the
number of compared elements, and holds for simulated fp32 sums (rounding and truncating)."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.cuda import hwrecord as R
from tests.minijit.cuda import helpers


@pytest.mark.parametrize("terms", [1, 8, 65, 777, 4097])
def test_helper_and_hwrecord_share_one_bound(terms):
    scale = np.array([0.0, 1e-30, 1.0, 3.5e4])
    for checked in (1, 100, 150_000):
        np.testing.assert_array_equal(helpers.accumulation_bound(scale, terms, checked),
                                      R.accumulation_bound(terms, scale, checked))  # fmt: skip
    worst = R.gamma(2 * terms) * scale + 2 * terms * R.TINY
    np.testing.assert_array_equal(R.accumulation_bound(terms, scale), worst)  # any number of elements
    small, large = R.accumulation_bound(terms, scale, 10), R.accumulation_bound(terms, scale, 10**7)
    assert np.all(small <= large) and np.all(large <= worst)
    if terms > 8:  # the statistical bound is the tighter one for long sums, and grows with the count
        assert small[2] < large[2] < worst[2]


def _truncate(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 toward zero."""
    f = x.astype(np.float32)
    return np.where(np.abs(f.astype(np.float64)) > np.abs(x), np.nextafter(f, np.float32(0)), f)


def test_the_bound_holds_over_many_elements_and_catches_a_bias():
    """20 000 sums of 512 products: fp32 round-to-nearest and truncating block sums stay within
    the bound for 20 000 checked elements; a sum whose terms are each rounded down by 2^-14 of
    their magnitude (a biased accumulator of 14 bits) is outside it everywhere."""
    rng = np.random.default_rng(5)
    k, m = 512, 20_000
    p = (rng.standard_normal((m, k)).astype(np.float16).astype(np.float64)
         * rng.standard_normal((m, k)).astype(np.float16).astype(np.float64))  # fmt: skip
    exact, scale = p.sum(axis=1), np.abs(p).sum(axis=1)
    bound = R.accumulation_bound(k, scale, m)
    rn = np.zeros(m, np.float32)
    tr = np.zeros(m)
    for j in range(0, k, 16):
        rn = (rn + p[:, j : j + 16].astype(np.float32).sum(axis=1, dtype=np.float32)).astype(np.float32)
        tr = _truncate(tr + _truncate(p[:, j : j + 16].sum(axis=1))).astype(np.float64)
    assert np.all(np.abs(rn - exact) <= bound) and np.all(np.abs(tr - exact) <= bound)
    biased = (p - np.abs(p) * 2.0**-14).sum(axis=1)
    assert np.all(np.abs(biased - exact) > bound)
