"""AVX-512 code of sparse loop nests (issue 38): the one x86-64 generator emits zmm vectors and
opmask tails; every listing reassembles with llvm-mc to the same bytes; the AVX2 code is the
one generated before AVX-512 existed (hashes in ``avx2_nest_code.json``); the code runs against
numpy where the host has AVX-512 and is refused by name where it has not."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minijit
from asm import llvm
from minijit.runtime import features, host
from minijit.sparseauto.api import compile_einsum, sparse_einsum
from minijit.sparseauto.codegen import compile_nest
from minijit.sparseauto.execute import SparseContraction
from minijit.sparseauto.schedules import default_linear, enumerate_schedules
from minijit.sparseauto.tensor import SparseTensor
from minijit.targets import X86Target
from tests.minijit.sparseauto.strategies import expressions
from tests.minijit.sparseauto.test_codegen import CSR, _fused_sddmm_spmm, _setup, _sparse
from tests.minijit.sparseauto.test_codegen_aarch64 import _check
from tests.minijit.sparseauto.test_codegen_aarch64 import _sparse as _sparse_of

AVX512_HOST = host().isa == "x86_64" and host().avx512 and host().avx2 and host().fma
runs_avx512 = pytest.mark.skipif(not AVX512_HOST, reason="executes AVX-512 code: this host has no AVX-512 (F, BW, VL)")
LANES = {"fp32": 16, "fp64": 8}
#: the cases whose AVX2 code `avx2_nest_code.json` holds (shapes; a tuple first: a sparse operand)
AVX2_CASES = [
    ("ik,kj->ij", [((20, 9), CSR), (9, 13)]),
    ("ik,kj->ij", [((20, 9), CSR), (9, 47)]),
    ("ij,ij->i", [((8, 7), CSR), ((8, 7), CSR)]),
    ("ij,ik,jk->ij", [((8, 7), CSR), (8, 5), (7, 5)]),
    ("ijk,jl,km->ilm", [((4, 3, 5), None), (3, 2), (5, 6)]),
    ("ij,ik,jk,jl->il", [((7, 6), CSR), (7, 5), (6, 5), (6, 3)]),
]


def _reassembles(prog) -> str:
    """The listing, after checking that llvm-mc assembles it to the emitted bytes."""
    text = prog.asm.listing()
    assert llvm.assemble(text, triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code(), text
    return text


def _nests(subscripts, ops, count=3):
    """The linear schedule and the first ``count`` enumerated ones, with the extents and values."""
    operands, out, extents, values, dtype = _setup(subscripts, ops)
    nests = [default_linear(operands, out), *enumerate_schedules(operands, out).nests[:count]]
    return nests, extents, values, dtype


def _spmm(n, rows=20, seed=0):
    return _nests("ik,kj->ij", [_sparse((rows, 9), 0.3, CSR, seed), np.ones((9, n))], 0)


def _sddmm(k):
    a = _sparse((8, 7), 0.4, CSR, 1)
    return _nests("ij,ik,jk->ij", [a, np.ones((8, k)), np.ones((7, k))], 0)


def test_avx2_code_is_unchanged():
    """The AVX2 code of these nests hashes as pinned: it changes only on purpose (pinned before the
    generator learned AVX-512; re-pinned when stationary loops moved into registers and when the
    prefetch distance followed the lines per position, the code then checked by execution in the
    tests of `test_codegen` and `test_einsum`; again when a loop updating an output row from a
    row held in registers got its own code, `_row_update_loop`, and when tight loops alternated
    between two sets of accumulators, `_second_accumulators`)."""
    want = json.loads((pathlib.Path(__file__).parent / "avx2_nest_code.json").read_text())
    found = 0
    for n, (subscripts, shapes) in enumerate(AVX2_CASES):
        ops = [_sparse(s[0], 0.4, s[1], n) if isinstance(s[0], tuple) else np.ones(s) for s in shapes]
        operands, out, extents, *_ = _setup(subscripts, ops)
        for nest in [default_linear(operands, out), *enumerate_schedules(operands, out).nests[:5]]:
            for dtype in ("fp32", "fp64"):
                key = hashlib.sha256(f"{nest}|{extents}|{dtype}".encode()).hexdigest()[:12]
                if key not in want:  # a schedule the planner no longer enumerates first
                    continue
                prog = compile_nest(nest, extents, dtype)
                assert hashlib.sha256(prog.asm.code()).hexdigest()[:12] == want[key], f"{dtype}\n{nest}"
                assert "zmm" not in prog.asm.listing() and "k1" not in prog.asm.listing()
                found += 1
    assert found >= len(want) // 2, f"only {found} of {len(want)} fixture nests still enumerated"


def _ttmc(m, dtype):
    """TTMc's chosen nest (``A(i,l,m) += C(j,l)*T(m)`` after the walk) and its linear one."""
    t = _sparse((6, 7, 30), 0.35, ("compressed",) * 3, 6)
    rng = np.random.default_rng(5)
    ops = [t, rng.standard_normal((7, 16)), rng.standard_normal((30, m))]
    np_dtype = np.float32 if dtype == "fp32" else np.float64
    ops = [x.astype(np_dtype) for x in ops]
    return [compile_einsum("ijk,jl,km->ilm", *ops, schedule=s, threads=1)[0] for s in ("auto", "linear")], ops


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_row_updates_reassemble(dtype):
    """The row update (`_row_update_loop`) in zmm registers: whole rows, tails (opmask k1) and
    rows up to 14 vectors (29 registers with the loaded output rows and the scratch one); one
    more takes the general path."""
    lanes = LANES[dtype]
    for m, fits in ((lanes, True), (lanes + 3, True), (14 * lanes, True), (14 * lanes + 1, False)):
        for compiled in _ttmc(m, dtype)[0]:
            prog = compile_nest(compiled.nest, compiled.extents, dtype, "avx512")
            text = _reassembles(prog)
            assert (".Lrow_l_m_loop" in text) == fits, (m, compiled.nest)
            assert ("{k1}" in text) == (m % lanes != 0)


@runs_avx512
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_row_updates_run(dtype):
    lanes = LANES[dtype]
    for m in (lanes, lanes + 3, 14 * lanes):
        compiled, ops = _ttmc(m, dtype)
        want = np.einsum("ijk,jl,km->ilm", ops[0].to_dense().astype(np.float64), *ops[1:])
        for c in compiled:
            run = SparseContraction(c.nest, c.extents, c.dtype, isa="avx512", threads=2)
            tol = 1e-4 if dtype == "fp32" else 1e-12
            np.testing.assert_allclose(run.execute(*ops), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_tails_of_every_length_reassemble(dtype):
    """SpMM with a tail of every length 1..lanes-1: stationary rows (up to 28 zmm accumulators)
    and, past them, the vectorized axpy loop; SDDMM's dot product with the same tails."""
    lanes = LANES[dtype]
    for r in range(1, lanes):
        for n, stationary in ((lanes + r, True), (28 * lanes + r, False)):
            nests, extents, *_ = _spmm(n)
            text = _reassembles(compile_nest(nests[0], extents, dtype, "avx512"))
            assert ("k1 {z}" in text or "{k1} {z}" in text) and "kmovw k1" in text and "vmaskmov" not in text
            assert (".Lstationary_j" in text) == stationary and (".Lvtail" in text) != stationary
            assert "ymmword" not in text and ".Lmask" not in text
        nests, extents, *_ = _sddmm(lanes + r)
        text = _reassembles(compile_nest(nests[0], extents, dtype, "avx512"))
        assert "vextractf64x4" in text and "{k1} {z}" in text


def test_stationary_row_uses_the_upper_registers():
    """A row of 28 fp64 vectors stays in zmm1..11 and zmm15..31 (27 and a tail too); one more
    does not fit."""
    nests, extents, *_ = _spmm(27 * 8 + 3)
    assert "{k1}" in _reassembles(compile_nest(nests[0], extents, "fp64", "avx512"))
    nests, extents, *_ = _spmm(28 * 8)
    text = _reassembles(compile_nest(nests[0], extents, "fp64", "avx512"))
    assert ".Lstationary_j" in text and "zmm31" in text
    nests, extents, *_ = _spmm(29 * 8)
    assert ".Lstationary_j" not in compile_nest(nests[0], extents, "fp64", "avx512").asm.listing()
    nests, extents, *_ = _spmm(12 * 4)  # past AVX2's 11 accumulators
    assert ".Lstationary_j" not in compile_nest(nests[0], extents, "fp64", "avx2").asm.listing()


@pytest.mark.parametrize("k, n, dtype", [(32, 32, "fp64"), (64, 40, "fp32"), (8, 29, "fp64"), (256, 8, "fp32")])
def test_tight_loops_reassemble(k, n, dtype):
    """The tight walks in zmm: the fused SDDMM-SpMM's dot product (one to 16 vectors, summed by
    way of zmm12/ymm12), masked tails of the axpy, SpMM's walk with its FMAs on memory operands."""
    nest, extents, *_ = _fused_sddmm_spmm(k, n, np.float32 if dtype == "fp32" else np.float64)
    text = _reassembles(compile_nest(nest, extents, dtype, "avx512"))
    assert ".Ltight_walk_A_j" in text and ".Ldot_k" in text and "vextractf64x4" in text
    assert ("{k1}" in text) == bool(n % LANES[dtype])
    nests, extents, *_ = _spmm(n)
    text = _reassembles(compile_nest(nests[0], extents, dtype, "avx512"))
    assert ".Ltight_walk_A_k" in text and "vfmadd231p" in text


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions(max_operands=4), count=st.integers(0, 2))
def test_drawn_expressions_reassemble(expr, count):
    """Drawn expressions (fp32 and fp64, sampled outputs, dot products, strided loops): every
    schedule's AVX-512 listing is llvm-mc's bytes."""
    subscripts, ops, _ = expr
    nests, extents, _, dtype = _nests(subscripts, ops, count)
    for nest in nests:
        _reassembles(compile_nest(nest, extents, "fp32" if dtype == np.float32 else "fp64", "avx512"))


@pytest.mark.skipif(not X86Target("avx2").native, reason="loads x86-64 code: this host is not x86-64")
def test_isa_follows_the_target(pin_host):
    """x86_64-avx512 (or native on an AVX-512 host) compiles AVX-512 code, x86_64-avx2 (or
    native on an AVX2 host) AVX2."""
    nests, extents, *_ = _spmm(13)
    pin_host("zen3")
    for target in ("native", "x86_64-avx2"):
        avx2 = SparseContraction(nests[0], extents, target=target)
        assert avx2.isa == "avx2" and "zmm" not in avx2.listing() and avx2.target == X86Target("avx2")
    pin_host("cascadelake")
    for target in ("native", "x86_64-avx512"):  # compiled and loaded, not run
        compiled = SparseContraction(nests[0], extents, target=target)
        assert (
            compiled.isa == "avx512" and "zmm" in compiled.listing() and "# target x86_64-avx512" in compiled.listing()
        )


def test_avx512_is_refused_on_a_host_without_it(monkeypatch):
    no_avx512 = features.HostInfo(isa="x86_64", os="linux", avx2=True, fma=True, avx512f=True)
    monkeypatch.setattr(features, "host", lambda: no_avx512)
    monkeypatch.setattr(minijit.runtime, "host", lambda: no_avx512)
    nests, extents, *_ = _spmm(13)
    with pytest.raises(RuntimeError, match=r"target x86_64-avx512: .*this host has no AVX-512 \(F, BW, VL\)"):
        SparseContraction(nests[0], extents, target="x86_64-avx512")
    with pytest.raises(RuntimeError, match="this host has no AVX-512"):
        SparseContraction(nests[0], extents, isa="avx512")
    a = _sparse((9, 7), 0.4, CSR, 1)
    with pytest.raises(RuntimeError, match="this host has no AVX-512"):
        sparse_einsum("ij,jk->ik", a, np.ones((7, 5)), target="x86_64-avx512")
    with pytest.raises(RuntimeError, match="this host has no AVX-512"):
        minijit.einsum("ij,jk->ik", a, np.ones((7, 5)), target="x86_64-avx512")
    assert compile_einsum("ij,jk->ik", a, np.ones((7, 5)))[0].isa == "avx2"  # native: the host's best


@runs_avx512
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tails_and_stationary_rows_match_numpy(dtype):
    """SpMM (stationary rows up to 28 vectors, then the axpy loop) and SDDMM (dot products, the
    output sampled) at every tail length."""
    lanes = 64 // np.dtype(dtype).itemsize
    a = _sparse_of((30, 9), 0.3, CSR, 3, dtype)
    rng = np.random.default_rng(5)
    for n in (*range(1, lanes + 1), 27 * lanes + 3, 28 * lanes + 5):
        b, c = rng.standard_normal((9, n)).astype(dtype), rng.standard_normal((30, n)).astype(dtype)
        for subscripts, ops in (("ik,kj->ij", (a, b)), ("ij,ik,jk->ij", (a, c, b))):
            got = sparse_einsum(subscripts, *ops, target="x86_64-avx512")
            dense = [o.to_dense() if isinstance(o, SparseTensor) else o for o in ops]
            _check(got, np.einsum(subscripts, *[d.astype(np.float64) for d in dense]), dtype)


@runs_avx512
@pytest.mark.parametrize("k, n, dtype", [(32, 32, np.float64), (64, 40, np.float32), (8, 29, np.float64)])
def test_tight_fused_dot_matches_numpy(k, n, dtype):
    """The fused SDDMM-SpMM's tight walk in zmm (dot product summed in registers, tails)."""
    nest, extents, values, dt = _fused_sddmm_spmm(k, n, dtype)
    got = SparseContraction(nest, extents, dt, isa="avx512").execute(*values)
    dense = [v.to_dense() if isinstance(v, SparseTensor) else v for v in values]
    _check(got, np.einsum("ij,ik,jk,jl->il", *[d.astype(np.float64) for d in dense]), dt)


@runs_avx512
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions(max_operands=4), optimize=st.booleans())
def test_drawn_expressions_match_numpy(expr, optimize):
    subscripts, ops, dense = expr
    got = minijit.einsum(subscripts, *ops, target="x86_64-avx512", optimize=optimize)
    want = np.einsum(subscripts, *[d.astype(np.float64) for d in dense])
    _check(got, want, np.float32 if all(d.dtype == np.float32 for d in dense) else np.float64)
