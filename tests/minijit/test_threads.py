"""One `TensorOperation` executed from several threads at once, in every execution mode (packed
A, micro-panel packed B with its private copy outputs, M chunks, K chunks, peeled parts, plain),
through `execute` and `execute_ptr`; each thread has arrays of its own and every result is
compared with numpy (each mode's operation set up for `RULE_TARGET` on the `RULE_HOST` profile,
where the mode's choice was derived, and run on this machine). Also: the bounded caches
(`minijit.cache`) under many distinct keys and from threads, and `minijit.cache_info` /
`cache_clear`."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import minijit
from minijit import TensorOperation
from minijit.cache import LRUCache, ScratchPool
from minijit.runtime import features
from tests.minijit.helpers import RULE_HOST, RULE_TARGET, runs_avx2
from tests.minijit.threads import run_threads

THREADS = 6
CALLS = 12

#: mode -> (setup arguments, last-level cache bytes to plan with (None: the profile's; else a cache
#: of one sharer, the operation's threads own all of it), num_threads, what the operation must have
#: chosen for `RULE_TARGET` on the `RULE_HOST` profile)
MODES = {
    "packed": (
        ("fp32", "none", "gemm", "none", "mnk", ["prim"] * 3, [8, 20, 32], [1, 0, 1024], [0, 32, 1], [1, 8, 0]),
        None, 1, lambda op: op.pack_plan is not None,
    ),
    "panels": (
        ("fp32", "none", "gemm", "none", "mnk", ["prim"] * 3, [96, 100, 64], [1, 0, 96], [0, 4096, 1], [1, 96, 0]),
        1, 1, lambda op: sorted(op.panel_plans) == ["in1"],
    ),
    "m-chunks": (
        ("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [16, 4608, 64], [64, 0, 1], [0, 1, 4608],
         [4608, 1, 0]),
        8 * 1024 * 64 * 4, 2, lambda op: op.chunk_kind == "M",
    ),
    "k-chunks": (
        ("fp32", "none", "gemm", "none", "kmnk", ["seq", "prim", "prim", "prim"], [3, 320, 4, 214],
         [214 * 320, 1, 0, 320], [214, 0, 642, 1], [0, 1, 320, 0]),
        2 * 320 * 642 * 4 - 4, 1, lambda op: op.chunk_kind == "K",
    ),
    "peeled": (
        ("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [100003, 1, 33], [33, 0, 1], [0, 0, 1], [1, 0, 0]),
        None, 2, lambda op: len(op.parts) == 2,
    ),
    "plain": (
        ("fp64", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [40, 36, 28], [28, 0, 1], [0, 1, 36], [36, 1, 0]),
        None, 1, lambda op: not op.packed_operands and op.chunk_kind is None and not op.parts,
    ),
}  # fmt: skip


def _reach(sizes, strides) -> int:
    return 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True))


def _reference(args, a: np.ndarray, b: np.ndarray, c0: np.ndarray) -> np.ndarray:
    """What the operation computes, from its setup arguments: numpy views with the configured
    strides, an einsum over the K dims (float64), added to C or over it (first touch zero)."""
    dtype, first, _, _, types, _, sizes, s0, s1, so = args
    letters = "abcdefgh"[: len(sizes)]

    def view(x, strides):
        dims = [i for i, s in enumerate(strides) if s]
        shape = [sizes[i] for i in dims]
        v = np.lib.stride_tricks.as_strided(x, shape, [strides[i] * x.itemsize for i in dims])
        return v.astype(np.float64), "".join(letters[i] for i in dims)

    (va, la), (vb, lb), (_, lo) = view(a, s0), view(b, s1), view(c0, so)
    want = c0.astype(np.float64)
    out = np.lib.stride_tricks.as_strided(want, [sizes[letters.index(c)] for c in lo],
                                          [so[letters.index(c)] * 8 for c in lo])  # fmt: skip
    prod = np.einsum(f"{la},{lb}->{lo}", va, vb)
    out[...] = prod if first == "zero" else out + prod
    return want


def mode_op(mode: str, **kwargs) -> TensorOperation:
    """The operation of `MODES` ``mode``, set up for `RULE_TARGET` (the caller pins `RULE_HOST`)."""
    args, llc, threads, _ = MODES[mode]
    with pytest.MonkeyPatch.context() as mp:
        if llc is not None:
            mp.setattr(features, "last_level_cache_bytes", lambda: llc)
            mp.setattr(features, "last_level_cache_sharing", lambda: 1)
        op = TensorOperation(RULE_TARGET, num_threads=threads, **kwargs)
        op.setup(*args)
    return op


@runs_avx2
@pytest.mark.parametrize("mode", sorted(MODES))
def test_one_operation_shared_by_threads(pin_host, mode):
    pin_host(RULE_HOST)
    args, _, _, chosen = MODES[mode]
    op = mode_op(mode)
    assert chosen(op), f"{mode}: the operation did not choose this mode"
    t = np.float32 if args[0] == "fp32" else np.float64
    sizes = args[6]
    reach = [_reach(sizes, s) for s in args[7:]]

    def work(th: int) -> list[str]:
        rng = np.random.default_rng(th)
        bad = []
        for i in range(CALLS):
            a, b = (rng.uniform(-1, 1, n).astype(t) for n in reach[:2])
            c0 = rng.uniform(-1, 1, reach[2]).astype(t)
            c = c0.copy()
            if i % 2:
                op.execute_ptr(a.ctypes.data, b.ctypes.data, c.ctypes.data)
            else:
                op.execute(a, b, c)
            want = _reference(args, a, b, c0)
            err = np.abs(c - want)
            if not (err <= 1e-4 * (1 + np.abs(want))).all():
                bad.append(f"{mode} thread {th} call {i}: max error {err.max():.3g}")
        return bad

    assert run_threads(work, THREADS) == []


def test_the_reference_is_numpy_matmul():
    # the test's oracle on a plain column-major GEMM, C = A B
    rng = np.random.default_rng(0)
    args = ("fp64", "none", "gemm", "none", "mnk", ["undefined"] * 3, [5, 4, 3], [1, 0, 5], [0, 3, 1], [1, 5, 0])
    a, b, c0 = rng.standard_normal(15), rng.standard_normal(12), rng.standard_normal(20)
    want = c0.reshape(4, 5).T + a.reshape(3, 5).T @ b.reshape(4, 3).T
    np.testing.assert_allclose(_reference(args, a, b, c0).reshape(4, 5).T, want)


# -- caches -----------------------------------------------------------------------------------
def test_lru_cache_stays_bounded_and_drops_the_least_recently_used():
    cache = LRUCache(100)
    for i in range(10_000):
        assert cache.get_or_create(i, lambda i=i: str(i)) == str(i)
        if i % 10 == 0:
            assert cache.get(0) == "0"  # key 0 stays: it is used again and again
    assert len(cache) == 100 and cache.get(0) == "0" and cache.get(1) is None and cache.get(9999) == "9999"
    info = cache.info()
    assert info["size"] == 100 and info["maxsize"] == 100 and info["misses"] == 10_000
    cache.clear()
    assert len(cache) == 0 and cache.info()["hits"] == 0


def test_lru_cache_does_not_keep_errors_or_refused_values():
    cache = LRUCache(4)

    def fail():
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        cache.get_or_create("k", fail)
    assert cache.info() == {"hits": 0, "misses": 0, "size": 0, "maxsize": 4}
    assert cache.get_or_create("big", lambda: 10**9, admit=lambda v: v < 100) == 10**9
    assert "big" not in cache
    with pytest.raises(ValueError, match="maxsize"):
        LRUCache(0)


def test_lru_cache_from_threads_builds_each_value_once_it_keeps():
    cache = LRUCache(64)
    built = []
    lock = threading.Lock()

    def make(k):
        with lock:
            built.append(k)
        return ("v", k)

    def work(t: int) -> list[str]:
        bad = []
        for i in range(2000):
            k = (i * 7 + t) % 300
            v = cache.get_or_create(k, lambda k=k: make(k))
            if v != ("v", k):
                bad.append(f"thread {t}: key {k} gave {v}")
        return bad

    assert run_threads(work, 6) == []
    assert len(cache) == 64


def test_scratch_pool_hands_each_item_to_one_caller_and_keeps_a_few():
    made = []
    pool = ScratchPool(lambda: made.append(1) or len(made), maxsize=2)
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    assert {a, b, c} == {1, 2, 3}
    for x in (a, b, c):
        pool.release(x)
    assert len(pool) == 2  # the third is dropped
    assert {pool.acquire(), pool.acquire()} <= {1, 2, 3} and len(made) == 3


def test_einsum_caches_stay_bounded_under_many_shapes(monkeypatch):
    from minijit.einsum import cached
    from minijit.einsum import plan as plan_mod

    monkeypatch.setenv("MINIJIT_JIT", "eager")  # specialised plans for every shape (not the generic tier's)
    monkeypatch.setattr(cached, "PLAN_CACHE_SIZE", 8)
    monkeypatch.setattr(plan_mod, "OPS_CACHE_SIZE", 12)
    minijit.cache_clear()
    rng = np.random.default_rng(0)
    for n in range(1, 41):  # 40 distinct shapes, 2-3 operations each
        a, b = rng.standard_normal((n, 3)), rng.standard_normal((3, 2))
        np.testing.assert_allclose(minijit.einsum("ij,jk->ik", a, b), a @ b, rtol=1e-12, atol=1e-12)
        info = minijit.cache_info()
        assert info["einsum.plans"]["size"] <= 8 and info["einsum.operations"]["size"] <= 12
    assert info["einsum.plans"]["misses"] == 40
    minijit.einsum("ij,jk->ik", a, b)
    assert minijit.cache_info()["einsum.plans"]["hits"] == 1


def test_cache_info_names_every_cache_and_cache_clear_empties_them():
    minijit.einsum("ij,jk->ik", np.ones((3, 4)), np.ones((4, 5)))
    info = minijit.cache_info()
    assert {"einsum.plans", "einsum.operations", "kernels", "cuda.kernels"} <= set(info)
    for name, entry in info.items():
        assert set(entry) == {"hits", "misses", "size", "maxsize"}, name
        assert 0 <= entry["size"] <= entry["maxsize"], name
    assert info["einsum.plans"]["size"] >= 1 and info["kernels"]["size"] >= 1
    assert minijit.kernels.cache_info()["size"] == info["kernels"]["size"]
    minijit.cache_clear()
    assert all(entry["size"] == 0 for entry in minijit.cache_info().values())
