"""Einsum from several threads at once: one shared `EinsumPlan`, the module-level `minijit.einsum`
(whose plans are cached and shared) and one shared `CudaEinsumPlan` in the PTX simulator, each
thread with arrays of its own, every result compared with numpy (docs/decisions.md, "Plans are
immutable and shareable")."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from tests.minijit.threads import run_threads

THREADS = 8
CALLS = 40


def _arrays(shapes, dtype, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]


def _wrong(t: int, i: int, got: np.ndarray, subs: str, ops) -> list[str]:
    want = np.einsum(subs, *[o.astype(np.float64) for o in ops])
    scale = np.einsum(subs, *[np.abs(o).astype(np.float64) for o in ops])
    err = np.abs(got.astype(np.float64) - want)
    if got.shape != want.shape or not (err <= 1e-4 * (scale + 1)).all():
        return [f"thread {t} call {i}: max error {err.max():.3g}"]
    return []


CASES = [
    # (subscripts, shapes): chains with intermediates, a permuted intermediate, a reduce node
    ("ij,jk,kl->il", [(48, 40), (40, 44), (44, 36)]),
    ("abc,ai,bj,ck->ijk", [(10, 9, 8), (10, 6), (9, 7), (8, 5)]),
    ("ij,jk,kl->li", [(30, 20), (20, 24), (24, 18)]),
]


@pytest.mark.parametrize(("subs", "shapes"), CASES)
def test_one_plan_shared_by_threads(subs, shapes):
    plan = minijit.EinsumPlan(subs, *shapes, dtype="float32")
    assert any(n is not None for n in plan.intermediate_shapes), "the case must have intermediates"

    def work(t: int) -> list[str]:
        bad = []
        for i in range(CALLS):
            ops = _arrays(shapes, np.float32, 1000 * t + i)
            out = np.full(plan.out_shape, np.nan, np.float32) if i % 2 else None
            got = plan(*ops, out=out)
            assert out is None or got is out
            bad += _wrong(t, i, got, subs, ops)
        return bad

    assert run_threads(work, THREADS) == []


def test_module_einsum_from_threads():
    subs, shapes = CASES[0]
    minijit.einsum(subs, *_arrays(shapes, np.float32, 0))  # the cached plan every thread then shares

    def work(t: int) -> list[str]:
        bad = []
        for i in range(CALLS):
            ops = _arrays(shapes, np.float32, 7000 + 100 * t + i)
            bad += _wrong(t, i, minijit.einsum(subs, *ops), subs, ops)
        return bad

    assert run_threads(work, THREADS) == []


def test_module_einsum_threads_with_float64_and_strided_views():
    # threads mix dtypes and views (each their own cached plan), all at once
    subs, shapes = "ij,jk,kl->il", [(20, 16), (16, 24), (24, 12)]

    def work(t: int) -> list[str]:
        bad = []
        dtype = np.float64 if t % 2 else np.float32
        for i in range(CALLS):
            ops = _arrays(shapes, dtype, 9000 + 100 * t + i)
            if t % 3 == 2:
                ops[1] = np.ascontiguousarray(ops[1].T).T  # an F-order operand, read in place
            bad += _wrong(t, i, minijit.einsum(subs, *ops), subs, ops)
        return bad

    assert run_threads(work, THREADS) == []


def test_cuda_plan_shared_by_threads_in_the_simulator():
    from ptx import simdriver

    subs, shapes = "ij,jk,kl->il", [(8, 6), (6, 10), (10, 4)]  # two GEMMs through an intermediate
    plan = minijit.EinsumPlan(subs, *shapes, dtype="float32", target="cuda", driver=simdriver)
    assert len(plan.nodes) >= 2

    def work(t: int) -> list[str]:
        bad = []
        for i in range(4):
            ops = _arrays(shapes, np.float32, 500 * t + i)
            got = plan(*ops)
            want = np.einsum(subs, *[o.astype(np.float64) for o in ops])
            scale = np.einsum(subs, *[np.abs(o).astype(np.float64) for o in ops])
            if not (np.abs(got - want) <= 4e-3 * (scale + 1e-6)).all():  # tf32
                bad.append(f"thread {t} call {i}: max error {np.abs(got - want).max():.3g}")
        return bad

    assert run_threads(work, 4) == []
