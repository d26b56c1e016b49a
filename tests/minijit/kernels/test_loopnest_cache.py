"""The loop-nest cache of `minijit.kernels.compile_loopnest`: the same plan on the same target gives
the same compiled kernel, whose code is what a fresh compile makes; other plans or targets another
kernel; bounded; emptied by `cache_clear`; operations sharing a loop nest compute correctly."""

from __future__ import annotations

import gc
from unittest import mock

import numpy as np
import pytest

import minijit
from minijit import kernels, targets
from minijit.kernels.loopnest import Call, Loop, LoopNest

TARGET = kernels.native_target()


@pytest.fixture(autouse=True)
def empty_cache():
    kernels.cache_clear()
    yield
    kernels.cache_clear()


def nest(size: int = 3, stride: int = 16, address: int = 0x1000) -> LoopNest:
    return LoopNest((Loop(size, (stride, stride, stride), shared=True),), Call(address, ("in0", "in1", "out", 4)))


def test_same_plan_same_kernel_with_the_code_of_a_fresh_compile():
    first = kernels.compile_loopnest(nest(), target=TARGET)
    assert kernels.compile_loopnest(nest(), target=targets.get_cpu(TARGET)) is first
    assert first.code == targets.get_cpu(TARGET).loopnest(nest()).code
    others = [
        kernels.compile_loopnest(nest(size=4), target=TARGET),
        kernels.compile_loopnest(nest(stride=32), target=TARGET),
        kernels.compile_loopnest(nest(address=0x2000), target=TARGET),
        kernels.compile_loopnest(nest(), target="aarch64-sve", sve_vl=128),
        kernels.compile_loopnest(nest(), target="aarch64-sve", sve_vl=256),
    ]
    assert len({id(k) for k in [first, *others]}) == 6
    assert others[3].code == others[4].code and others[3] is not others[4]  # one per SVE worker
    info = minijit.cache_info()["loopnests"]
    assert info["hits"] == 1 and info["misses"] == 6 and info["size"] == 6


def test_bounded_and_emptied_by_cache_clear():
    with mock.patch.object(kernels, "LOOPNEST_CACHE_SIZE", 2):
        for size in range(1, 6):
            kernels.compile_loopnest(nest(size=size), target=TARGET)
            assert minijit.cache_info()["loopnests"]["size"] <= 2
    minijit.cache_clear()
    assert minijit.cache_info()["loopnests"]["size"] == 0
    kernels.compile_loopnest(nest(), target=TARGET)
    kernels.cache_clear()
    assert minijit.cache_info()["loopnests"]["size"] == 0


def test_errors_are_not_cached():
    bad = nest(address=0x1000)
    with mock.patch.object(targets.get_cpu(TARGET).__class__, "loopnest", side_effect=ValueError("boom")):
        with pytest.raises(ValueError, match="boom"):
            kernels.compile_loopnest(bad, target=TARGET)
    assert minijit.cache_info()["loopnests"]["size"] == 0
    assert kernels.compile_loopnest(bad, target=TARGET).code


@pytest.mark.parametrize("target", [TARGET, "aarch64-neon"])
def test_operations_of_one_config_share_the_loop_nest_and_compute_correctly(target):
    """Two operations set up from one config share the compiled loop nest and each computes the
    product. With both gone and only the primitives dropped, a new primitive may land at the old
    address (natively, mmap reuses it): the cached loop nest that calls that address then serves
    the new operation, which must still compute the product."""
    m, n, k = 6, 5, 4
    args = ("fp32", "zero", "gemm", "none", "mnk", ("prim",) * 3, (m, n, k), (1, 0, m), (0, k, 1), (1, m, 0))
    rng = np.random.default_rng(0)
    A = rng.standard_normal((k, m)).astype(np.float32)  # column-major M x K
    B = rng.standard_normal((n, k)).astype(np.float32)  # column-major K x N
    want = B.astype(np.float64) @ A.astype(np.float64)  # C column-major M x N as (n, m)

    def check(op: minijit.TensorOperation) -> None:
        C = np.full((n, m), 7, np.float32)
        op.execute(A, B, C)
        np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)

    ops = [minijit.TensorOperation(target, num_threads=1) for _ in range(2)]
    for op in ops:
        op.setup(*args)
        check(op)
    assert ops[0].loopnest is ops[1].loopnest
    del ops, op
    kernels._cache.clear()  # the primitives only
    gc.collect()
    again = minijit.TensorOperation(target, num_threads=1)
    again.setup(*args)
    check(again)
