"""Resource bounds at setup (issue 40): extents beyond 2**56 elements and plan allocations beyond
`minijit.limits.MAX_BYTES` are refused with a SetupError naming the dim and the bound, before
anything is allocated."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from minijit import TensorOperation, limits, packing
from minijit.errors import SetupError, error_t
from minijit.ir import MAX_EXTENT

GEMM = ("fp32", "none", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3)


@pytest.mark.parametrize("bits", [57, 60, 62, 63, 64, 100])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_huge_size_names_dim(bits, dim):
    sizes = [64, 64, 64]
    sizes[dim] = 1 << bits
    with pytest.raises(SetupError) as e:
        TensorOperation(num_threads=1).setup(*GEMM, sizes, [1, 0, 64], [0, 64, 1], [1, 64, 0])
    assert e.value.code is error_t.wrong_size and e.value.dim == dim
    assert f"dim {dim}" in str(e.value) and "2**56" in str(e.value)


def test_size_product_over_64_bits_names_dim():
    """Three sizes of 2**30 multiply to 2**90 (past int64): refused at the dim that crosses 2**56."""
    big = 1 << 30
    with pytest.raises(SetupError) as e:
        TensorOperation(num_threads=1).setup(*GEMM, [big, big, big], [1, 0, big], [0, big, 1], [1, big, 0])
    assert e.value.code is error_t.wrong_size and e.value.dim == 1
    assert "multiply" in str(e.value) and "2**56" in str(e.value)


@pytest.mark.parametrize("stride", [1 << 57, -(1 << 57), 1 << 63, (1 << 64) + 1])
def test_huge_stride_names_dim(stride):
    with pytest.raises(SetupError) as e:
        TensorOperation(num_threads=1).setup(*GEMM, [4, 4, 4], [1, 0, stride], [0, 4, 1], [1, 4, 0])
    assert e.value.code is error_t.wrong_stride and e.value.dim == 2 and "2**56" in str(e.value)


def test_stride_reach_overflow_names_dim():
    """Each stride is in range, but the offsets they reach add up past 2**56 elements."""
    s = MAX_EXTENT // 2
    with pytest.raises(SetupError) as e:
        TensorOperation(num_threads=1).setup(*GEMM, [2, 2, 4], [s, 0, s], [0, 1, 2], [1, 2, 0])
    assert e.value.code is error_t.wrong_stride and e.value.dim == 2 and "in0" in str(e.value)


def test_aligned_empty_refuses_over_bound_before_allocating(monkeypatch):
    """The 5.63 PiB request of issue 40 is refused by the bound, not by numpy's MemoryError."""
    calls = []
    real = np.empty
    monkeypatch.setattr(packing.np, "empty", lambda *a, **k: calls.append(a) or real(*a, **k))
    with pytest.raises(SetupError) as e:
        packing.aligned_empty(6333186975989824 // 4, np.float32, what="in0 packing buffer", dim=0)
    assert e.value.code is error_t.too_large and e.value.dim == 0
    text = str(e.value)
    assert "in0 packing buffer" in text and "MAX_BYTES" in text and str(limits.MAX_BYTES) in text
    assert calls == []
    assert packing.aligned_empty(5, np.float64).shape == (5,) and len(calls) == 1


def test_setup_packing_buffer_over_bound(monkeypatch):
    """A GEMM whose plan packs A (A transposed, N >= 16) is refused once the bound is below the
    buffer, and set up and run under the default bound."""
    args = (*GEMM, [64, 64, 64], [64, 0, 1], [0, 64, 1], [1, 64, 0])
    op = TensorOperation(num_threads=1)
    op.setup(*args)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(64 * 64, dtype=np.float32), rng.standard_normal(64 * 64, dtype=np.float32)
    c = np.zeros(64 * 64, np.float32)
    op.execute(a, b, c)
    # a[m*64 + k], b[n*64 + k], c[n*64 + m]: c as (n, m) is (A B^T)^T with A, B as (m|n, k)
    np.testing.assert_allclose(c.reshape(64, 64), (a.reshape(64, 64) @ b.reshape(64, 64).T).T, rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(limits, "MAX_BYTES", 1024)
    with pytest.raises(SetupError) as e:
        TensorOperation(num_threads=1).setup(*args)
    assert e.value.code is error_t.too_large and "1024 bytes" in str(e.value)


def test_max_bytes_environment(monkeypatch):
    monkeypatch.setenv("MINIJIT_MAX_BYTES", "4096")
    assert limits.default_max_bytes() == 4096
    for bad in ("0", "-5", "lots"):
        monkeypatch.setenv("MINIJIT_MAX_BYTES", bad)
        with pytest.raises(ValueError, match="MINIJIT_MAX_BYTES"):
            limits.default_max_bytes()
    monkeypatch.delenv("MINIJIT_MAX_BYTES")
    assert 0 < limits.default_max_bytes() <= 1 << 40


def test_check_alloc_negative():
    with pytest.raises(SetupError, match="negative"):
        limits.check_alloc(-1, "workspace")


@pytest.mark.parametrize(
    ("subscripts", "shapes"),
    [("a,b,c->abc", [(1 << 20,)] * 3), ("ab,bc->ac", [(1 << 33, 1), (1, 1 << 33)])],
)
def test_einsum_plan_huge_shapes_refused(subscripts, shapes):
    """An einsum whose output or node has more than 2**56 elements is refused with SetupError."""
    import minijit

    with pytest.raises(SetupError):
        minijit.EinsumPlan(subscripts, *shapes, dtype="float32")


_EINSUM_4TIB = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a lazy 4 TiB allocation must not get through
import numpy as np, minijit
from minijit.errors import SetupError
a = np.broadcast_to(np.ones(1, np.float32), (1 << 20,))
try:
    minijit.einsum("a,b->ab", a, a)
except SetupError as e:
    print("SetupError", e)
except MemoryError as e:
    print("MemoryError", e)
"""


def test_einsum_result_over_bound_refused():
    """An einsum whose result (2**40 float32 from two broadcast vectors) exceeds MAX_BYTES is
    refused with SetupError, in a child whose address space is capped."""
    args = [sys.executable, "-c", _EINSUM_4TIB]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.startswith("SetupError"), proc.stdout + proc.stderr[-2000:]


def test_setup_of_a_huge_valid_dim_returns_quickly():
    """A valid GEMM with an M of 2**44 indices sets up without walking every index (the chunk
    search was linear in the dim's size and never returned); execute then refuses short arrays."""
    import time

    import numpy as np

    from minijit import TensorOperation

    op = TensorOperation(num_threads=1)
    start = time.perf_counter()
    op.setup(
        "fp32", "none", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3,
        [1 << 44, 64, 64], [64, 0, 1], [0, 64, 1], [1, 1 << 44, 0],
    )  # fmt: skip
    assert time.perf_counter() - start < 30
    a, b, c = (np.zeros(64 * 64, np.float32) for _ in range(3))
    with pytest.raises(ValueError, match="in0|out"):
        op.execute(a, b, c)
    assert not c.any()
