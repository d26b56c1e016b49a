"""Threaded sparse nests through the trampoline (`minijit.sparseauto.dispatch`): the code is
llvm-mc's, every range runs once with a block no other thread holds, on the native team and on
the Python pool, and concurrent callers of one contraction keep their temporaries apart."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from asm import llvm
from minijit import parallel
from minijit.sparseauto.api import compile_einsum
from minijit.sparseauto.dispatch import run_ranges, trampoline_code
from minijit.sparseauto.tensor import SparseTensor

pytestmark = pytest.mark.skipif(
    __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64", reason="runs x86-64 code"
)


def test_trampoline_matches_llvm_mc() -> None:
    a = trampoline_code()
    assert a.code() == llvm.assemble(a.listing(), triple=llvm.X86_64_TRIPLE, mattr="")


def _csf(shape, nnz, seed):
    rng = np.random.default_rng(seed)
    coords = np.unique(np.stack([rng.integers(0, n, nnz) for n in shape]), axis=1)
    return SparseTensor.from_coo(coords, rng.standard_normal(coords.shape[1]), shape, ("compressed",) * 3)


def _ttm_chain(seed):
    """The TTM chain, whose chosen nest fills a top-level temporary (T<k,m> = C*D) per thread."""
    rng = np.random.default_rng(seed)
    t = _csf((300, 40, 30), 6000, seed)
    return t, rng.standard_normal((30, 8)), rng.standard_normal((8, 5))


def _expected(t, c, d):
    return np.einsum("ijk,kl,lm->ijm", t.to_dense(), c, d)


@pytest.mark.parametrize("backend", ["native", "python"])
@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_nest_with_a_temporary(backend, threads) -> None:
    if backend == "native" and __import__("minijit.runtime.team", fromlist=["x"]).unsupported_reason():
        pytest.skip("no native team on this host")
    ops = _ttm_chain(1)
    compiled, _ = compile_einsum("ijk,kl,lm->ijm", *ops, threads=threads)
    assert compiled.nest.temps, "the chosen nest should hold a temporary"
    with parallel.forced_backend(backend):
        ranges = compiled._ranges({o.name: ops[0] for o in compiled.nest.operands if o.sparse})
        got = compiled.execute(*ops)
    assert len(ranges) > 1, "the test needs a split top loop"
    np.testing.assert_allclose(got, _expected(*ops), rtol=1e-10, atol=1e-10)


def test_concurrent_callers_keep_their_temporaries_apart() -> None:
    inputs = [_ttm_chain(s) for s in range(6)]
    compiled, _ = compile_einsum("ijk,kl,lm->ijm", *inputs[0], threads=2)
    results: list = [None] * len(inputs)

    def work(n: int) -> None:
        for _ in range(3):
            results[n] = compiled.execute(*inputs[n])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ops, got in zip(inputs, results, strict=True):
        np.testing.assert_allclose(got, _expected(*ops), rtol=1e-10, atol=1e-10)
    assert len(compiled._temp_pool) <= compiled.threads  # sets are reused, not piled up


def test_every_range_runs_once_on_its_own_block() -> None:
    """A nest that records, per call, its args block and range: each range exactly once, and no
    two calls with one block at the same time (a block's flag is held for the whole call)."""
    from asm.x86_64 import Assembler, qword
    from asm.x86_64.registers import rax, rcx, rdi, rdx, rsi
    from minijit.runtime import load

    # nest(args, begin, end): args[0] = address of a counter array: counter[i] += 1 for i in range;
    # args[1] = this block's busy word: must be 0 on entry (else args[2] += 1), 1 during the call,
    # which waits a while so that calls overlap
    a = Assembler(name="probe")
    a.mov(rax, qword(rdi + 8))
    a.cmp(qword(rax), 0)
    ok = a.new_label("ok")
    a.je(ok)
    a.mov(rcx, qword(rdi + 16))
    a.inc(qword(rcx))
    a.bind(ok)
    a.mov(qword(rax), 1)
    a.mov(rcx, 200_000)  # hold the block a while (about 0.1 ms), so calls overlap
    delay = a.label("delay")
    a.dec(rcx)
    a.jnz(delay)
    a.mov(rcx, qword(rdi))
    top, done = a.new_label("top"), a.new_label("done")
    a.bind(top)
    a.cmp(rsi, rdx)
    a.jge(done)
    a.inc(qword(rcx + rsi * 8))
    a.inc(rsi)
    a.jmp(top)
    a.bind(done)
    a.mov(rax, qword(rdi + 8))
    a.mov(qword(rax), 0)
    a.ret()
    probe = load(a.code(), "void(const int64_t*, int64_t, int64_t)", isa="x86_64", name="probe")
    for backend in ("native", "python"):
        with parallel.forced_backend(backend):
            for cuts in ([0, 10, 11, 50, 1000], [0, 3, 3, 7], [5, 9]):
                counter = np.zeros(cuts[-1], np.int64)
                busy, clashes = np.zeros(len(cuts) - 1, np.int64), np.zeros(1, np.int64)
                words = (counter.ctypes.data, busy.ctypes.data, clashes.ctypes.data)
                blocks = np.array([[words[0], words[1] + 8 * b, words[2]] for b in range(len(cuts) - 1)], np.int64)
                ranges = list(zip(cuts[:-1], cuts[1:], strict=True))
                for _ in range(20):
                    run_ranges(probe.address, blocks, ranges)
                expected = np.zeros(cuts[-1], np.int64)
                expected[cuts[0] :] = 20
                np.testing.assert_array_equal(counter, expected)
                assert clashes[0] == 0 and not busy.any()


@pytest.mark.parametrize(
    "blocks, ranges, match",
    [
        (np.zeros((2, 3), np.int32), [(0, 1), (1, 2)], "int64"),
        (np.zeros((3, 3), np.int64), [(0, 1), (1, 2)], "one row per range"),
        (np.zeros((3, 2), np.int64).T, [(0, 1), (1, 2)], "C-ordered"),
        (np.zeros((2, 3), np.int64), [(0, 1), (2, 3)], "contiguous"),
        (np.zeros((0, 3), np.int64), [], "at least one range"),
        (np.zeros((2, 3), np.int64), [(0, 2), (2, 1)], "0 <= begin <= end"),
        (np.zeros((2, 3), np.int64), [(-1, 0), (0, 1)], "0 <= begin <= end"),
    ],
)
def test_run_ranges_refuses_bad_blocks(blocks, ranges, match) -> None:
    with pytest.raises(ValueError, match=match):
        run_ranges(1, blocks, ranges)


@pytest.mark.parametrize("address", [0, -8, True, 1.5, None])
def test_run_ranges_refuses_a_bad_nest_address(address) -> None:
    with pytest.raises(ValueError, match="nest_address"):
        run_ranges(address, np.zeros((1, 3), np.int64), [(0, 1)])
