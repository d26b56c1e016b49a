"""The two tiers agree bit for bit on every ISA: the generic GEMM kernel (`minijit.kernels.generic`,
sizes at run time) and the shape-specialised BRGEMM of the same target (C starting at zero) over
drawn shapes. x86-64 runs natively where the host can; AArch64 NEON runs in the emulator on other
hosts (natively on AArch64)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit import kernels, targets
from minijit.kernels import generic as spec
from tests.conftest import examples


def _runnable() -> list[str]:
    names = ["aarch64-neon"]  # emulated off AArch64
    native = targets.native()
    if native.family == "x86_64":
        names += [t for t in ("x86_64-avx2", "x86_64-avx512") if targets.get(t).supported]
    return names


@pytest.mark.parametrize("target", _runnable())
@settings(max_examples=examples(25))
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 13),
    k=st.integers(1, 24),
    dtype=st.sampled_from(["fp32", "fp64"]),
    seed=st.integers(0, 2**16),
)
def test_generic_and_specialised_kernels_agree_bitwise(target, m, n, k, dtype, seed):
    rng = np.random.default_rng(seed)
    np_dtype = np.float32 if dtype == "fp32" else np.float64
    a = rng.uniform(-1, 1, (k, m)).astype(np_dtype)  # column-major M x K: a[m + k*m]
    b = rng.uniform(-1, 1, (n, k)).astype(np_dtype)  # column-major K x N: b[k + n*k]
    special = np.zeros((n, m), np_dtype)
    kernels.brgemm(m, n, k, 1, dtype=dtype, target=target)(a, b, special, m, k, m, 0, 0)
    generic = np.full((n, m), np.nan, np_dtype)
    args = spec.pack_args(
        m=m, n=n, k=k, lda=m, ldb_k=1, ldb_n=k, ldc=m, batch=1, batch_a=0, batch_b=0, batch_c=0, accumulate=0
    )
    kernels.generic_gemm(dtype, target=target)(a, b, generic, args)
    np.testing.assert_array_equal(generic, special)
