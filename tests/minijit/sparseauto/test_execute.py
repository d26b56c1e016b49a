"""SparseContraction: setup and execute check everything before code runs; the split top loop and
concurrent calls give numpy's result."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from minijit.errors import SetupError
from minijit.sparseauto.execute import SparseContraction
from minijit.sparseauto.nest import Operand
from minijit.sparseauto.schedules import default_linear
from minijit.sparseauto.tensor import SparseTensor

pytestmark = pytest.mark.skipif(
    __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64", reason="runs x86-64 code"
)
CSR = ("dense", "compressed")
A = Operand("A", ("i", "k"), CSR)
B = Operand.dense("B", ("k", "j"))
SPMM = default_linear((A, B), Operand.dense("Out", ("i", "j")))
EXT = {"i": 300, "k": 40, "j": 6}


def _operands(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    d = np.where(rng.random((300, 40)) < 0.1, rng.standard_normal((300, 40)), 0).astype(dtype)
    d[50:120] = 0  # empty rows
    return SparseTensor.from_dense(d, CSR), rng.standard_normal((40, 6)).astype(dtype)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_top_loop_matches_numpy(threads):
    a, b = _operands()
    c = SparseContraction(SPMM, EXT, threads=threads)
    assert len(c._ranges({"A": a})) == threads  # the top loop really is split
    np.testing.assert_allclose(c.execute(a, b), a.to_dense() @ b, atol=1e-12)


def test_split_compressed_walk():
    rng = np.random.default_rng(3)
    d = np.where(rng.random((400, 5, 6)) < 0.05, 1.0, 0)
    t = SparseTensor.from_dense(d)
    m = rng.standard_normal((6, 4))
    op = Operand("A", ("i", "j", "k"), ("compressed",) * 3)
    nest = default_linear((op, Operand.dense("B", ("k", "l"))), Operand.dense("Out", ("i", "j", "l")))
    c = SparseContraction(nest, {"i": 400, "j": 5, "k": 6, "l": 4}, threads=2)
    assert c.program.split == ("walk", "A") and len(c._ranges({"A": t})) == 2
    np.testing.assert_allclose(c.execute(t, m), np.einsum("ijk,kl->ijl", d, m), atol=1e-12)


def test_few_heavy_slices_split_by_work():
    """Fewer top-level positions than two threads' worth of iterations (_MIN_SPLIT each), but
    enough stored values below them: the walk still splits, at about equal work; a small
    tensor of as many slices runs on one thread."""
    rng = np.random.default_rng(5)
    op = Operand("A", ("i", "j", "k"), ("compressed",) * 3)
    nest = default_linear((op, Operand.dense("B", ("k", "l"))), Operand.dense("Out", ("i", "j", "l")))
    ext = {"i": 40, "j": 60, "k": 50, "l": 3}
    m = rng.standard_normal((50, 3))
    c = SparseContraction(nest, ext, threads=2)
    heavy = np.where(rng.random((40, 60, 50)) < 0.5, rng.standard_normal((40, 60, 50)), 0)
    heavy[::2] *= rng.random((20, 60, 50)) < 0.1  # slices of unequal weight
    t = SparseTensor.from_dense(heavy)
    (b0, e0), (b1, e1) = c._ranges({"A": t})
    leaves = np.count_nonzero(heavy, axis=(1, 2))
    assert (b0, e1) == (0, 40) and e0 == b1 and abs(leaves[:e0].sum() - leaves[e0:].sum()) < 0.2 * leaves.sum()
    np.testing.assert_allclose(c.execute(t, m), np.einsum("ijk,kl->ijl", heavy, m), atol=1e-12)
    small = SparseTensor.from_dense(np.where(rng.random((40, 60, 50)) < 0.001, 1.0, 0))
    assert SparseContraction(nest, ext, threads=2)._ranges({"A": small}) == [(0, 40)]


def test_concurrent_calls_share_one_contraction():
    c = SparseContraction(SPMM, EXT, np.float32, threads=1)
    inputs = [_operands(s, np.float32) for s in range(4)]
    results = [None] * 4

    def work(n):
        results[n] = c.execute(*inputs[n])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (a, b), got in zip(inputs, results, strict=True):
        np.testing.assert_allclose(got, a.to_dense() @ b, rtol=1e-5, atol=1e-5)


def test_listing_shows_nest_and_code():
    text = SparseContraction(SPMM, EXT).listing()
    assert text.startswith("# Out(i:d,j:d)") and "for k_pos:" in text and "vfmadd231pd" in text


def test_empty_output_runs_nothing():
    c = SparseContraction(SPMM, {"i": 0, "k": 3, "j": 2})
    out = c.execute(SparseTensor.from_coo(np.zeros((2, 0), int), np.zeros(0), (0, 3), CSR), np.ones((3, 2)))
    assert out.shape == (0, 2)


@pytest.mark.parametrize(
    "args, exc, text",
    [
        (lambda a, b: (a,), TypeError, "expected 2 operands"),
        (lambda a, b: (b, b), TypeError, "operand A must be a SparseTensor"),
        (lambda a, b: (a, a), TypeError, "operand B must be a numpy array"),
        (lambda a, b: (SparseTensor.from_dense(a.to_dense()), b), ValueError, "levels"),
        (lambda a, b: (a, b[:, :5]), ValueError, "operand B: shape (40, 5)"),
        (lambda a, b: (a, b.astype(np.float32)), TypeError, "operand B: dtype float32"),
        (lambda a, b: (a.astype(np.float32), b), TypeError, "operand A: dtype float32"),
        (lambda a, b: (SparseTensor.from_dense(a.to_dense()[:, :30], CSR), b), ValueError, "level 1 (k) has size 30"),
    ],
)
def test_execute_checks_operands(args, exc, text):
    a, b = _operands()
    c = SparseContraction(SPMM, EXT)
    with pytest.raises(exc) as info:
        c.execute(*args(a, b))
    assert text in str(info.value)


def test_strided_dense_operand_is_copied():
    a, b = _operands()
    wide = np.zeros((40, 12))
    wide[:, ::2] = b
    got = SparseContraction(SPMM, EXT).execute(a, wide[:, ::2])
    np.testing.assert_allclose(got, a.to_dense() @ b, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"extents": {"i": 3, "k": 2}}, "index 'j' has no extent"),
        ({"extents": {"i": 3, "k": -2, "j": 1}}, "extent of index 'k'"),
        ({"extents": EXT, "dtype": np.int32}, "float32 or float64"),
        ({"extents": EXT, "dtype": "nonsense"}, "dtype"),
    ],
)
def test_setup_errors(kwargs, text):
    with pytest.raises(SetupError) as info:
        SparseContraction(SPMM, **kwargs)
    assert text in str(info.value)


def test_setup_refuses_bad_threads_and_nest():
    with pytest.raises(ValueError, match="threads"):
        SparseContraction(SPMM, EXT, threads=0)
    with pytest.raises(TypeError, match="Nest"):
        SparseContraction("ik,kj->ij", EXT)  # type: ignore[arg-type]


def test_split_with_temporaries_per_thread():
    """The fused SDDMM-SpMM schedule declares temporaries inside the split top loop: each thread
    has its own, so two threads give the one-thread result."""
    from minijit.sparseauto.api import compile_einsum, sparse_einsum

    rng = np.random.default_rng(5)
    d = np.where(rng.random((400, 60)) < 0.1, rng.standard_normal((400, 60)), 0)
    a = SparseTensor.from_dense(d, CSR)
    b, c, e = rng.standard_normal((400, 8)), rng.standard_normal((60, 8)), rng.standard_normal((60, 5))
    compiled, _ = compile_einsum("ij,ik,jk,jl->il", a, b, c, e, threads=2)
    assert compiled.nest.temps and compiled.program.split is not None
    assert len(compiled._ranges({o.name: a for o in compiled.nest.operands if o.sparse})) == 2
    got = sparse_einsum("ij,ik,jk,jl->il", a, b, c, e, threads=2)
    np.testing.assert_allclose(got, np.einsum("ij,ik,jk,jl->il", d, b, c, e), atol=1e-12)


def test_host_without_avx2_is_refused_by_name(pin_host):
    """x86-64 code on a host whose CPU lacks its extensions (here an AArch64 one: the target says
    so, `CpuTarget.supported`) is refused, naming them; "native" there is SVE code."""
    pin_host("neoverse-v1")
    with pytest.raises(RuntimeError, match=r"target x86_64-avx2: .*x86_64 AVX2\+FMA code; this host has no AVX2\+FMA"):
        SparseContraction(SPMM, EXT, target="x86_64-avx2")


def _ttm_chain(prefix_writes_output: bool):
    """``ijk,kl,lm->ijm`` with ``T<k,m> = C*D`` computed in top-level loops before the walk of B;
    with ``prefix_writes_output`` a first top-level loop also writes Out (a nest that threads
    must not split: every thread would add it)."""
    from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Temp

    b = Operand("B", ("i", "j", "k"), ("compressed",) * 3)
    c, d, out = Operand.dense("C", ("k", "l")), Operand.dense("D", ("l", "m")), Operand.dense("Out", ("i", "j", "m"))

    def loops(indices: str, stmt: Compute) -> Loop:
        node = stmt
        for i in reversed(indices):
            node = Loop(i, (node,))
        return node

    def acc(name: str, idx: str) -> Access:
        return Access(name, tuple(idx))

    fill = loops("klm", Compute(acc("T", "km"), (acc("C", "kl"), acc("D", "lm"))))
    walk = loops("ijkm", Compute(acc("Out", "ijm"), (acc("B", "ijk"), acc("T", "km"))))
    body = (Temp("T", ("k", "m")), fill, walk)
    if prefix_writes_output:  # Out(i,j,m) += B(i,j,k) * T(k,m) once more, before the split loop
        body = (Temp("T", ("k", "m")), fill, walk, walk)
    return Nest((b, c, d), out, body)


def test_split_after_a_top_level_temporary():
    """The TTM chain's chosen schedule fills T<k,m> at the top, then walks B: threads split the
    walk (each fills its own T first), and a nest whose earlier top-level loops write the output
    is not split."""
    rng = np.random.default_rng(9)
    d = np.where(rng.random((300, 4, 5)) < 0.1, rng.standard_normal((300, 4, 5)), 0)
    t = SparseTensor.from_dense(d)
    c, e = rng.standard_normal((5, 3)), rng.standard_normal((3, 6))
    ext = {"i": 300, "j": 4, "k": 5, "l": 3, "m": 6}
    want = np.einsum("ijk,kl,lm->ijm", d, c, e)
    for twice in (False, True):
        op = SparseContraction(_ttm_chain(twice), ext, threads=2)
        if twice:
            assert op.program.split is None and op._ranges({"B": t}) == [(0, 0)]
        else:
            assert op.program.split == ("walk", "B") and len(op._ranges({"B": t})) == 2
        np.testing.assert_allclose(op.execute(t, c, e), want * (2 if twice else 1), atol=1e-12)


@pytest.mark.parametrize(
    ("subscripts", "schedule"),
    [
        ("ijk,jl,km->ilm", "auto"),  # TTMc: a temporary per fibre, then L*M per fibre
        ("ijk,jl,km->ilm", "linear"),
        ("ijk,jl,kl->il", "auto"),  # MTTKRP
        ("ij,ik,jk,jl->il", "auto"),  # SDDMM-SpMM: a dense top loop over CSR rows
        ("ik,kj->ij", "auto"),
    ],
)
def test_split_weights_are_the_statement_executions_per_top_iteration(subscripts, schedule):
    """The weights that balance the threads' ranges count, per iteration of the split loop, the
    statement executions below it: the IR interpreter's count on that slice alone (plus one)."""
    from minijit.sparseauto.api import compile_einsum
    from tests.minijit.sparseauto.interp import run

    rng = np.random.default_rng(7)
    terms = subscripts.split("->")[0].split(",")
    sizes = {"i": 9, "j": 7, "k": 8, "l": 3, "m": 2}
    first = np.where(rng.random(tuple(sizes[c] for c in terms[0])) < 0.3, 1.0, 0.0)
    first[2] = 0  # an empty slice
    levels = ("dense", "compressed") if len(terms[0]) == 2 else ("compressed",) * 3
    t = SparseTensor.from_dense(first, levels)
    dense = [rng.standard_normal(tuple(sizes[c] for c in term)) for term in terms[1:]]
    c, _ = compile_einsum(subscripts, t, *dense, schedule=schedule, threads=2)
    x = c.nest.operands[0]
    kind, _ = c.program.split
    weight = c._work({x.name: t}, x.name if kind == "walk" else None)
    assert weight is not None
    rows = t.storage[0].crd if kind == "walk" else np.arange(sizes["i"])
    assert len(weight) == len(rows)
    for p, r in enumerate(rows):
        alone = np.zeros_like(first)
        alone[r] = first[r]
        arrays = {x.name: alone, **{o.name: d for o, d in zip(c.nest.operands[1:], dense, strict=True)}}
        assert weight[p] == 1 + run(c.nest, arrays)[1], (p, r)
