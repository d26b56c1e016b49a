"""Tiered compilation of `minijit.einsum` (`minijit.einsum.generic`, `minijit.jit`): a new GEMM-like
shape runs on the generic kernel at once, gives bitwise the result of the shape-specialised plan
(``MINIJIT_JIT=eager``), and is specialised in the background once `jit.due`,
safely under concurrent callers."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit import jit
from minijit.einsum import generic
from minijit.einsum import plan as plans
from minijit.runtime import detected_host
from tests.conftest import examples

pytestmark = pytest.mark.skipif(detected_host().isa != "x86_64", reason="the generic tier runs natively on x86-64")

#: subscripts and the operand shapes for sizes (m, k, n, batch)
CASES = {
    "ij,jk->ik": lambda m, k, n, b: ((m, k), (k, n)),
    "ij,kj->ik": lambda m, k, n, b: ((m, k), (n, k)),
    "ji,jk->ik": lambda m, k, n, b: ((k, m), (k, n)),
    "ij,jk->ki": lambda m, k, n, b: ((m, k), (k, n)),
    "bij,bjk->bik": lambda m, k, n, b: ((b, m, k), (b, k, n)),
    "ibj,bjk->bki": lambda m, k, n, b: ((m, b, k), (b, k, n)),
    "i,j->ij": lambda m, k, n, b: ((m,), (n,)),
    "ik,k->i": lambda m, k, n, b: ((m, k), (k,)),  # GEMV of a row-major matrix: not generic
}


def _run(monkeypatch, mode: str, sub: str, *arrays: np.ndarray) -> np.ndarray:
    monkeypatch.setenv("MINIJIT_JIT", mode)
    minijit.cache_clear()
    return minijit.einsum(sub, *arrays)


@settings(max_examples=examples(40))
@given(
    sub=st.sampled_from(sorted(CASES)),
    sizes=st.tuples(st.integers(2, 90), st.integers(2, 90), st.integers(2, 90), st.integers(2, 3)),
    dtype=st.sampled_from([np.float32, np.float64]),
    fortran=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_generic_and_specialised_tiers_give_identical_results(sub, sizes, dtype, fortran, seed):
    with pytest.MonkeyPatch.context() as mp:
        _identical(mp, sub, sizes, dtype, fortran, seed)


def _identical(monkeypatch, sub, sizes, dtype, fortran, seed) -> None:
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, s).astype(dtype) for s in CASES[sub](*sizes)]
    if fortran:  # F-order operands: read in place as transposed C-order views
        arrays = [np.asfortranarray(x) for x in arrays]
    tiered = _run(monkeypatch, "tiered", sub, *arrays)
    used_generic = generic._PLANS.info()["size"] == 1
    eager = _run(monkeypatch, "eager", sub, *arrays)
    assert generic._PLANS.info()["size"] == 0  # eager never makes a generic plan
    np.testing.assert_array_equal(tiered, eager)
    np.testing.assert_allclose(tiered, np.einsum(sub, *[x.astype(np.float64) for x in arrays]), rtol=1e-4, atol=1e-4)
    assert used_generic == (sub != "ik,k->i")


@pytest.mark.parametrize(
    ("sub", "fortran", "generic_tier"),
    [
        ("ij,jk->ik", False, True),
        ("ij,jk->ik", True, True),  # F-order operands: B copied with k last
        ("ij,kj->ik", False, True),  # A times B transposed: B copied
        ("ji,jk->ik", False, True),
        ("bij,bjk->bik", False, True),
        ("bij,bjk->bik", True, True),
        ("ibj,bjk->bki", False, True),  # A copied with i last
        ("i,j->ij", False, True),
        ("ik,k->i", True, False),  # one column: a GEMV, the specialised tier's
        ("ik,k->i", False, False),
    ],
)
def test_which_contractions_the_generic_tier_takes(monkeypatch, sub, fortran, generic_tier):
    arrays = [np.ones(s) for s in CASES[sub](5, 6, 7, 3)]
    if fortran:
        arrays = [np.asfortranarray(x) for x in arrays]
    _run(monkeypatch, "tiered", sub, *arrays)
    assert (generic._PLANS.info()["size"] == 1) == generic_tier


def test_a_hot_plan_is_specialised_in_the_background_and_swapped_in(monkeypatch):
    monkeypatch.setenv("MINIJIT_JIT", "tiered")
    minijit.cache_clear()
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (37, 29)).astype(np.float32), rng.uniform(-1, 1, (29, 41)).astype(np.float32)
    first = minijit.einsum("ij,jk->ik", a, b)
    assert generic._PLANS.info()["size"] == 1 and plans._PLANS.info()["size"] == 0
    monkeypatch.setattr(jit, "SPECIALISE_SECONDS", 3600.0)
    for _ in range(8):
        np.testing.assert_array_equal(minijit.einsum("ij,jk->ik", a, b), first)
    jit.drain()
    assert plans._PLANS.info()["size"] == 0  # not yet: its kernel time is far below the bound
    monkeypatch.setattr(jit, "SPECIALISE_SECONDS", 0.0)
    np.testing.assert_array_equal(minijit.einsum("ij,jk->ik", a, b), first)  # this call queues it
    jit.drain()
    assert plans._PLANS.info()["size"] == 1  # the specialised plan is in the cache
    hits = plans._PLANS.info()["hits"]
    np.testing.assert_array_equal(minijit.einsum("ij,jk->ik", a, b), first)
    assert plans._PLANS.info()["hits"] == hits + 1  # and serves the next call


def test_large_work_is_specialised_on_its_first_call(monkeypatch):
    monkeypatch.setenv("MINIJIT_JIT", "tiered")
    monkeypatch.setattr(jit, "SPECIALISE_WORK", 2 * 64**3)
    minijit.cache_clear()
    a = np.ones((64, 64), np.float32)
    minijit.einsum("ij,jk->ik", a, a)
    jit.drain()
    assert plans._PLANS.info()["size"] == 1


def test_concurrent_callers_while_the_plan_is_specialised(monkeypatch):
    """Threads hammer one new shape across the swap: every result equals the first one."""
    monkeypatch.setenv("MINIJIT_JIT", "tiered")
    monkeypatch.setattr(jit, "SPECIALISE_SECONDS", 0.002)  # the swap after a few calls
    minijit.cache_clear()
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (70, 53)).astype(np.float64), rng.uniform(-1, 1, (53, 66)).astype(np.float64)
    want = minijit.einsum("ij,jk->ik", a, b)  # the generic tier's
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def hammer() -> None:
        try:
            start.wait()
            for _ in range(60):
                got = minijit.einsum("ij,jk->ik", a, b)
                if not np.array_equal(got, want):
                    errors.append(AssertionError("a result differs"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jit.drain()
    assert not errors, errors[:3]
    assert plans._PLANS.info()["size"] == 1  # specialised once, though many calls crossed the threshold
    np.testing.assert_array_equal(minijit.einsum("ij,jk->ik", a, b), want)


def test_out_and_what_the_generic_tier_does_not_take_still_work(monkeypatch):
    monkeypatch.setenv("MINIJIT_JIT", "tiered")
    minijit.cache_clear()
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (20, 30)), rng.uniform(-1, 1, (30, 10))
    out = np.empty((20, 10))
    assert minijit.einsum("ij,jk->ik", a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b)
    sq = rng.uniform(-1, 1, (16, 16))
    want = sq @ sq
    assert minijit.einsum("ij,jk->ik", sq, sq, out=sq) is sq  # out is an operand: computed into a buffer
    np.testing.assert_allclose(sq, want, rtol=1e-12, atol=1e-12)
    strided_out = np.empty((10, 20)).T  # not C-contiguous: the specialised plan writes it
    minijit.einsum("ij,jk->ik", a, b, out=strided_out)
    np.testing.assert_allclose(strided_out, a @ b)
    mixed = minijit.einsum("ij,jk->ik", a.astype(np.float32), b)  # two dtypes
    np.testing.assert_allclose(mixed, a.astype(np.float32).astype(np.float64) @ b, rtol=1e-6)
    for sub, ops in (("ii->i", (a[:20, :20],)), ("ij,jk,kl->il", (a, b, b.T)), ("ij->", (a,))):
        np.testing.assert_allclose(minijit.einsum(sub, *ops), np.einsum(sub, *ops), rtol=1e-10)
    zero_k = minijit.einsum("ij,jk->ik", np.ones((3, 0)), np.ones((0, 4)))
    np.testing.assert_array_equal(zero_k, np.zeros((3, 4)))


def test_the_jit_mode_is_validated(monkeypatch):
    monkeypatch.setenv("MINIJIT_JIT", "sometimes")
    with pytest.raises(ValueError, match="MINIJIT_JIT must be one of tiered, eager"):
        minijit.einsum("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)))


def test_the_threshold_follows_the_kernel_time_and_the_work():
    assert jit.due(jit.SPECIALISE_WORK, 0.0) and not jit.due(jit.SPECIALISE_WORK - 1, 0.0)
    assert jit.due(10, jit.SPECIALISE_SECONDS) and not jit.due(10, jit.SPECIALISE_SECONDS / 2)


def test_disasm_prints_the_generic_kernel(capsys):
    from minijit import cli

    assert cli.main(["disasm", "--generic", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "generic GEMM (native, fp32)" in out and "vfmadd231ps" in out
