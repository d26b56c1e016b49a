"""Sparse loop nests compiled to AArch64 (NEON, SVE) and run in the qemu worker (natively on an ARM
host): drawn sparse expressions through `minijit.einsum` against numpy on densified inputs, fixed
cases at SVE 128/256/512 bits (vector tails, sampled outputs, co-iteration, empty fibres, one
non-zero, all zero), every frontier schedule of TTMc, and listings that llvm-mc reassembles to the
same bytes."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minijit
from asm import llvm
from minijit.errors import SetupError
from minijit.runtime import runs_natively
from minijit.sparseauto.api import compile_einsum, sparse_einsum
from minijit.sparseauto.codegen_aarch64 import compile_nest_aarch64
from minijit.sparseauto.execute import SparseContraction
from minijit.sparseauto.plan import sparse_plan
from minijit.sparseauto.schedules import default_linear, enumerate_schedules
from minijit.sparseauto.tensor import SparseTensor
from minijit.targets import AArch64Target
from tests.minijit.sparseauto.strategies import expressions
from tests.minijit.sparseauto.test_codegen import _setup

pytestmark = pytest.mark.skipif(
    not runs_natively("aarch64")
    and shutil.which("qemu-aarch64") is None
    and shutil.which("qemu-aarch64-static") is None,
    reason="AArch64 code runs in qemu-aarch64 on this host, and it is not installed (Debian qemu-user)",
)
CSR = ("dense", "compressed")
NEON = AArch64Target("neon")
SVE = {vl: AArch64Target("sve", sve_vl=vl) for vl in (128, 256, 512)}
SVE_AT_ALL = [NEON, SVE[128], SVE[256], SVE[512]]


def _dense(x):
    return x.to_dense() if isinstance(x, SparseTensor) else x


def _check(got, want, dtype):
    if isinstance(got, SparseTensor):
        assert got.shape == want.shape
        got = got.to_dense()
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _sparse(shape, density, levels=None, seed=0, dtype=np.float64, kind="random"):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if kind == "zero":
        mask[...] = False
    elif kind == "one":
        mask[...] = False
        mask.flat[rng.integers(mask.size)] = True
    elif kind == "empty_fibres":
        mask[::2] = False
    d = np.where(mask, rng.standard_normal(shape), 0).astype(dtype)
    return SparseTensor.from_dense(d, levels)


def _drawn(expr, target, optimize):
    subscripts, ops, dense = expr
    got = minijit.einsum(subscripts, *ops, target=target, optimize=optimize)
    want = np.einsum(subscripts, *[d.astype(np.float64) for d in dense])
    _check(got, want, np.float32 if all(d.dtype == np.float32 for d in dense) else np.float64)


@pytest.mark.parametrize("target", [NEON, SVE[256]], ids=["neon", "sve256"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions(), optimize=st.booleans())
def test_drawn_expressions_match_numpy(target, expr, optimize):
    """minijit.einsum on AArch64 code (NEON, SVE at 256 bits): the planner's or the linear schedule."""
    _drawn(expr, target, optimize)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions(max_operands=4), target=st.sampled_from([NEON, SVE[256]]))
def test_drawn_four_operand_expressions_match_numpy(expr, target):
    _drawn(expr, target, True)


@pytest.mark.parametrize("target", ["aarch64-neon", "aarch64-sve"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_target_names_through_minijit_einsum(target, dtype):
    """The CPU target names select the AArch64 code (SVE at sparse_einsum's default 128 bits)."""
    a = _sparse((9, 7), 0.4, CSR, 1, dtype)
    b = np.random.default_rng(2).standard_normal((7, 13)).astype(dtype)
    got = minijit.einsum("ij,jk->ik", a, b, target=target)
    _check(got, a.to_dense().astype(np.float64) @ b, dtype)
    compiled, _ = compile_einsum("ij,jk->ik", a, b, target=target)
    assert compiled.target.family == "aarch64" and compiled.target.isa == target.split("-")[1]
    assert f"# target {target}" in compiled.listing()


CASES = [
    ("ik,kj->ij", [(9, 7), (7, 13)]),  # SpMM: axpy-like inner loop, a tail at every vector length
    ("ij,ik,jk->ij", [(8, 6), (8, 11), (6, 11)]),  # SDDMM: a dot product, the output sampled
    ("ij,ij->i", [(8, 7), (8, 7)]),  # two compressed levels co-iterated (both operands sparse)
    ("ijk,jl,kl->il", [(5, 4, 6), (4, 3), (6, 3)]),  # MTTKRP
]
KINDS = ["random", "empty_fibres", "one", "zero"]


@pytest.mark.parametrize("target", SVE_AT_ALL, ids=lambda t: f"{t.isa}{t.sve_vl}")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fixed_cases_at_each_vector_length(target, dtype, case):
    subscripts, shapes = CASES[case]
    kind = KINDS[(case + (dtype == np.float32)) % len(KINDS)]
    rng = np.random.default_rng(case)
    n_sparse = 2 if subscripts == "ij,ij->i" else 1
    levels = CSR if len(shapes[0]) == 2 else ("dense", "compressed", "compressed")
    ops = [_sparse(s, 0.4, levels, seed=case + k, dtype=dtype, kind=kind) for k, s in enumerate(shapes[:n_sparse])]
    ops += [rng.standard_normal(s).astype(dtype) for s in shapes[n_sparse:]]
    want = np.einsum(subscripts, *[_dense(x).astype(np.float64) for x in ops])
    for schedule in ("linear", "auto"):
        got = sparse_einsum(subscripts, *ops, schedule=schedule, target=target)
        assert isinstance(got, SparseTensor) == (subscripts == "ij,ik,jk->ij")
        _check(got, want, dtype)


@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("ijk,jl,km->ilm", [(6, 5, 4), (5, 3), (4, 2)]),  # TTMc
        ("ijk,jl,kl->il", [(6, 5, 4), (5, 3), (4, 3)]),  # MTTKRP
        ("ij,ik,jk,jl->il", [(7, 6), (7, 5), (6, 5), (6, 3)]),  # SDDMM then SpMM
    ],
)
def test_every_enumerated_schedule_matches_numpy(subscripts, shapes):
    """Every schedule the planner enumerates (fission, fusion, temporaries; a spread of 30 of a
    larger space), alternately on NEON and SVE at 256 bits."""
    rng = np.random.default_rng(4)
    ops = [_sparse(shapes[0], 0.35, CSR if len(shapes[0]) == 2 else None, 5)]
    ops += [rng.standard_normal(s) for s in shapes[1:]]
    operands, out, extents, values, dtype = _setup(subscripts, ops)
    nests = enumerate_schedules(operands, out).nests
    if len(nests) > 30:
        nests = nests[:: len(nests) // 30]
    want = np.einsum(subscripts, *[_dense(v) for v in values])
    for k, nest in enumerate(nests):
        target = (NEON, SVE[256])[k % 2]
        got = SparseContraction(nest, extents, dtype, target=target).execute(*values)
        np.testing.assert_allclose(got, want, atol=1e-12, err_msg=f"{target.name}\n{nest}")


def test_every_frontier_schedule_of_ttmc():
    """TTMc (fission with temporaries): each schedule on the planner's frontier, NEON and SVE 256."""
    rng = np.random.default_rng(4)
    subscripts = "ijk,jl,km->ilm"
    ops = [_sparse((6, 5, 4), 0.35, None, 5), rng.standard_normal((5, 3)), rng.standard_normal((4, 5))]
    operands, out, extents, values, dtype = _setup(subscripts, ops)
    frontier = sparse_plan(subscripts, *values, sizes=extents).frontier()
    assert len(frontier) > 1 and any(nest.temps for nest in frontier)
    want = np.einsum(subscripts, *[_dense(v) for v in values])
    for target in (NEON, SVE[256]):
        for nest in frontier:
            got = SparseContraction(nest, extents, dtype, target=target).execute(*values)
            np.testing.assert_allclose(got, want, atol=1e-12, err_msg=f"{target.name}\n{nest}")


@pytest.mark.parametrize("isa", ["neon", "sve"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_listing_reassembles_and_names_stages(isa, dtype):
    a, b = _sparse((8, 7), 0.4, CSR, 1), _sparse((8, 7), 0.4, CSR, 2)
    nests = []
    for subscripts, ops in (
        ("ik,kj->ij", [a, np.ones((7, 13))]),  # vectorized axpy with a tail
        ("ij,ik,jk->ij", [a, np.ones((8, 5)), np.ones((7, 5))]),  # vectorized dot, sampled output
        ("ij,ij->i", [a, b]),  # merge
        ("ik,kj->ji", [a, np.ones((7, 5))]),  # strided inner loop: scalar
    ):
        operands, out, extents, *_ = _setup(subscripts, ops)
        nests.append((subscripts, compile_nest_aarch64(default_linear(operands, out), extents, dtype, isa)))
    progs = dict(nests)
    spmm, sddmm = progs["ik,kj->ij"].asm.listing(), progs["ij,ik,jk->ij"].asm.listing()
    # SpMM's row of C stays in registers across the tight walk of A's row (NEON on both ISAs)
    assert ".Ldense_i" in spmm and ".Ltight_walk_A_k" in spmm and ".Lstationary_j" in spmm
    assert "fmla v" in spmm and "whilelt" not in spmm
    assert progs["ik,kj->ij"].vectorized == ("j",) and progs["ik,kj->ij"].split == ("dense", 8)
    assert ".Lmerge_j" in progs["ij,ij->i"].asm.listing()
    assert progs["ik,kj->ji"].vectorized == ()
    assert ".Lvec_k" in sddmm
    if isa == "sve":
        assert "whilelt p1" in sddmm and "b.first" in sddmm and "faddv" in sddmm
    else:
        assert ".Lvtail_k" in sddmm and "faddp" in sddmm and "whilelt" not in sddmm
    for _, prog in nests:
        assert llvm.assemble(prog.asm.listing()) == prog.asm.code()


def test_split_ranges_run_one_after_another():
    """A top loop split for threads: the emulator runs each range in turn over one copy of the data."""
    a = _sparse((200, 9), 0.3, CSR, 6)
    b = np.random.default_rng(7).standard_normal((9, 5))
    compiled, _ = compile_einsum("ij,jk->ik", a, b, threads=3, schedule="linear", target=NEON)
    assert len(compiled._ranges({"A": a})) == 3
    np.testing.assert_allclose(compiled.execute(a, b), a.to_dense() @ b, atol=1e-12)


def test_split_after_a_top_level_temporary():
    """The TTM chain with T<k,m> filled at the top level: each range fills T again, then walks its
    part of B (`codegen._split`), on NEON and SVE."""
    from tests.minijit.sparseauto.test_execute import _ttm_chain

    rng = np.random.default_rng(9)
    d = np.where(rng.random((150, 3, 5)) < 0.15, rng.standard_normal((150, 3, 5)), 0)
    t = SparseTensor.from_dense(d)
    c, e = rng.standard_normal((5, 3)), rng.standard_normal((3, 6))
    for target in (NEON, SVE[256]):
        op = SparseContraction(_ttm_chain(False), {"i": 150, "j": 3, "k": 5, "l": 3, "m": 6}, threads=2, target=target)
        assert op.program.split == ("walk", "B") and len(op._ranges({"B": t})) == 2
        np.testing.assert_allclose(op.execute(t, c, e), np.einsum("ijk,kl,lm->ijm", d, c, e), atol=1e-12)


def test_temporaries_and_empty_output():
    """SDDMM then SpMM (a temporary per row), and an output with no elements (nothing runs)."""
    rng = np.random.default_rng(8)
    a = _sparse((7, 6), 0.4, CSR, 9)
    b, c, e = rng.standard_normal((7, 5)), rng.standard_normal((6, 5)), rng.standard_normal((6, 3))
    got = sparse_einsum("ij,ik,jk,jl->il", a, b, c, e, target=SVE[512])
    np.testing.assert_allclose(got, np.einsum("ij,ik,jk,jl->il", a.to_dense(), b, c, e), atol=1e-12)
    empty = sparse_einsum("ij,jk->ik", a, np.ones((6, 0)), target=NEON)
    assert empty.shape == (7, 0)


def test_unsupported_targets_are_named():
    a = _sparse((4, 3), 0.5, CSR, 1)
    with pytest.raises(ValueError, match="native CPU, not target='cuda'"):
        minijit.einsum("ij,jk->ik", a, np.ones((3, 2)), target="cuda")
    with pytest.raises(ValueError, match="aarch64-neon"):
        sparse_einsum("ij,jk->ik", a, np.ones((3, 2)), target="aarch64-sme2-fantasy")
    # aarch64-sme is a target: its sparse nests are NEON code (streaming SVE runs only inside
    # its SME BRGEMM), emulated here
    got = sparse_einsum("ij,jk->ik", a, np.ones((3, 2)), target="aarch64-sme")
    np.testing.assert_allclose(got, a.to_dense() @ np.ones((3, 2)), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="sve_vl must be a multiple of 128"):
        sparse_einsum("ij,jk->ik", a, np.ones((3, 2)), target="aarch64-sve", sve_vl=100)
    operands, out, extents, *_ = _setup("ij,jk->ik", [a, np.ones((3, 2))])
    with pytest.raises(ValueError, match="isa must be one of"):
        compile_nest_aarch64(default_linear(operands, out), extents, "fp64", "avx2")
    with pytest.raises(SetupError, match="dtype must be float32 or float64"):
        SparseContraction(default_linear(operands, out), extents, np.float16, target=NEON)


def test_vector_loop_only_where_its_layout_holds(monkeypatch):
    """The AArch64 vector loop checks what it relies on itself (unit stride in every access that
    uses j), whatever the shared `_inner_kind` analysis says: a strided loop stays scalar."""
    from minijit.sparseauto import codegen_aarch64

    monkeypatch.setattr(codegen_aarch64._Emitter64, "_inner_kind", lambda self, loop: "vector")
    a = _sparse((9, 7), 0.4, CSR, 3)
    b = np.random.default_rng(5).standard_normal((7, 6))
    operands, out, extents, values, dtype = _setup("ik,kj->ji", [a, b])
    nest = default_linear(operands, out)
    contraction = SparseContraction(nest, extents, dtype, target=NEON)
    assert contraction.program.vectorized == ()
    np.testing.assert_allclose(contraction.execute(*values), (a.to_dense() @ b).T, atol=1e-12)
