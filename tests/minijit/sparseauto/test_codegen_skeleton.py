"""One codegen skeleton (issue 53, item 5): the loops over a sparse nest and the row-in-registers
loops are written once (`codegen_skeleton`, `codegen_rows`); the x86-64 and AArch64 emitters supply
instructions. The same drawn expressions run on x86-64 (natively) and on AArch64 NEON and SVE at
128/256/512 bits (in the qemu worker) against numpy; the AArch64 stationary, tight, paired and
row-update loops run at every tail length and their listings reassemble with llvm-mc."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import minijit
from asm import llvm
from minijit.kernels.aarch64.mca import loop_body
from minijit.runtime import host
from minijit.sparseauto import codegen, codegen_aarch64, codegen_rows, codegen_skeleton
from minijit.sparseauto.codegen_aarch64 import compile_nest_aarch64
from minijit.sparseauto.codegen_aarch64_rows import row_layout
from minijit.sparseauto.execute import SparseContraction
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Operand
from minijit.sparseauto.plan import sparse_plan
from minijit.sparseauto.schedules import default_linear, enumerate_schedules
from minijit.sparseauto.tensor import SparseTensor
from tests.minijit.sparseauto.strategies import expressions
from tests.minijit.sparseauto.test_codegen import CSR, _fused_sddmm_spmm, _setup, _sparse
from tests.minijit.sparseauto.test_codegen_aarch64 import NEON, SVE, SVE_AT_ALL, _check, pytestmark  # noqa: F401

ARM = [NEON, SVE[128], SVE[256], SVE[512]]
X86 = host().isa == "x86_64"


def _dense(x):
    return x.to_dense() if isinstance(x, SparseTensor) else x


def _labels(prog) -> set[str]:
    """The stage names of a listing (labels without their numbers)."""
    return {m.group(1) for m in re.finditer(r"^\.L(\w+?)_\d+:", prog.asm.listing(), re.M)}


def _reassembles(prog) -> None:
    assert llvm.assemble(prog.asm.listing()) == prog.asm.code()


def _runs_everywhere(nest, extents, values, dtype, want, tol=1e-12):
    """The nest on every AArch64 target (and natively on x86-64), against ``want``."""
    for target in ARM + ([None] if X86 else []):
        kw = {} if target is None else {"target": target}
        got = SparseContraction(nest, extents, dtype, **kw).execute(*values)
        got = got.to_dense() if isinstance(got, SparseTensor) else got
        name = "x86_64" if target is None else f"{target.isa}{target.sve_vl}"
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{name}\n{nest}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions())
def test_the_same_drawn_expressions_on_every_isa(expr):
    """One drawn expression, the planner's schedule, on x86-64 and on AArch64 NEON and SVE at
    128/256/512 bits: each result matches numpy."""
    subscripts, ops, dense = expr
    want = np.einsum(subscripts, *[d.astype(np.float64) for d in dense])
    dtype = np.float32 if all(d.dtype == np.float32 for d in dense) else np.float64
    for target in ARM + (["x86_64-avx2"] if X86 else []):
        _check(minijit.einsum(subscripts, *ops, target=target), want, dtype)


def test_the_emitters_supply_instructions_only():
    """The loops are the skeleton's and `RowLoops`' alone: neither emitter class defines one, and
    each defines every instruction of `SparseISA`."""
    loops = {
        "_nodes",
        "_dense_loop",
        "_walk_loop",
        "_merge_loop",
        "_fibre",
        "_address",
        "_enter_iteration",
        "_next",
        "_stationary_loop",
        "_tight_loop",
        "_row_update_loop",
        "_stationary_inner",
        "_tight_plan",
        "_row_update_plan",
        "_stored_whole",
    }
    isa = {
        name
        for name, _ in inspect.getmembers(codegen_skeleton.SparseISA, inspect.isfunction)
        if not name.startswith("_")
    }
    assert {"load", "store", "load_u32", "cmp_slot", "inc_slot", "prologue"} <= isa
    for cls in (codegen._Emitter, codegen_aarch64._Emitter64):
        own = set()
        for base in cls.__mro__:
            if base.__module__ not in (codegen_skeleton.__name__, codegen_rows.__name__, "builtins", "typing"):
                own |= set(vars(base))
        assert not own & (loops - {"_tight_plan"}), (cls, own & loops)
        assert isa <= own, (cls, isa - own)
        assert issubclass(cls, codegen_skeleton.Skeleton) and issubclass(cls, codegen_rows.RowLoops)


@pytest.mark.parametrize("n, lanes, es", [(13, 4, 4), (8, 4, 4), (3, 2, 8), (1, 4, 4)])
def test_row_layout(n, lanes, es):
    """Whole 128-bit vectors, then the last elements one per register, covering 0..n once."""
    layout = row_layout(n, lanes, es)
    covered = [off // es + e for off, width in layout for e in range(width)]
    assert covered == list(range(n))
    assert sum(width == lanes for _, width in layout) == n // lanes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", range(1, 10))
def test_spmm_tight_paired_walk_at_every_tail(n, dtype):
    """SpMM with a row of n elements: the row stays in registers across the tight walk of A's row,
    two accumulator sets alternating, whole vectors and tail elements; NEON and SVE 128/256/512."""
    rng = np.random.default_rng(n)
    a = _sparse((9, 11), 0.4, CSR, n)
    b = rng.standard_normal((11, n))
    operands, out, extents, values, _ = _setup("ik,kj->ij", [a, b])
    nest = default_linear(operands, out)
    fmt = "fp32" if dtype == np.float32 else "fp64"
    values = [SparseTensor.from_dense(a.to_dense().astype(dtype), CSR), b.astype(dtype)]
    for isa in ("neon", "sve"):
        prog = compile_nest_aarch64(nest, extents, fmt, isa)
        assert {"stationary_j", "tight_walk_A_k", "tight_walk_A_k_pairs_done"} <= _labels(prog)
        assert "whilelt" not in prog.asm.listing()  # the row loops are NEON on both ISAs
        assert "prefetch_k" in _labels(prog) and "prfm pldl1keep" in prog.asm.listing()  # B's rows ahead
        tight = loop_body(prog.asm.listing(), "tight_walk_A_k")
        assert "x19" not in tight and "[sp" not in tight  # nothing from the args block or the stack
        _reassembles(prog)
    want = a.to_dense() @ b
    _runs_everywhere(nest, extents, values, dtype, want, 1e-5 if dtype == np.float32 else 1e-12)


def _schedule_with(subscripts, ops, stage, isa="neon"):
    """The first schedule (the planner's choice, then the enumerated ones) whose AArch64 code has
    the stage ``stage``."""
    operands, out, extents, values, dtype = _setup(subscripts, ops)
    chosen = sparse_plan(subscripts, *values, sizes=extents).chosen
    for nest in (chosen, *enumerate_schedules(operands, out).nests):
        prog = compile_nest_aarch64(nest, extents, "fp64", isa)
        if stage in _labels(prog):
            return nest, extents, values, dtype, prog
    raise AssertionError(f"no schedule of {subscripts} has {stage}")


@pytest.mark.parametrize(
    "subscripts, shapes, stage",
    [
        ("ijk,jl,km->ilm", [(6, 5, 4), (5, 3), (4, 7)], "row_l_m"),  # TTMc: the row update
        ("ijk,jl,km->ilm", [(6, 5, 4), (5, 3), (4, 7)], "tight_dense_k"),  # a tight dense loop
        ("ijk,jl,km->ilm", [(6, 7, 30), (7, 16), (30, 16)], "store_T6"),  # a row stored as its temporary
        ("ijk,jl,kl->il", [(6, 5, 4), (5, 9), (4, 9)], "tight_walk_A_k_pairs_done"),  # MTTKRP, paired
        ("ijk,kl,lm->ijm", [(6, 5, 4), (4, 3), (3, 5)], "tight_dense_l_pairs_done"),  # the TTM chain
    ],
)
def test_row_loops_of_the_enumerated_schedules(subscripts, shapes, stage):
    """A schedule whose AArch64 code has each row-in-registers stage runs on every target."""
    rng = np.random.default_rng(len(stage))
    ops = [_sparse(shapes[0], 0.4, None, 3)] + [rng.standard_normal(s) for s in shapes[1:]]
    nest, extents, values, dtype, prog = _schedule_with(subscripts, ops, stage)
    _reassembles(prog)
    _reassembles(compile_nest_aarch64(nest, extents, "fp32", "sve"))
    _runs_everywhere(nest, extents, values, dtype, np.einsum(subscripts, *[_dense(v) for v in values]))


@pytest.mark.parametrize("k, n, stage", [(4, 6, "dot_k"), (8, 5, "dot_k"), (2, 3, "dot_k"), (5, 9, "acc_l")])
def test_fused_sddmm_spmm_row(k, n, stage):
    """The fused SDDMM-SpMM (a temporary and a dot product over k before the inner loop over l):
    the dot product runs inside the tight walk (``dot_k``) where k is whole vectors, else the
    vectorized dot product's loop (v0-v8) runs before the inner loop (``acc_l``) while the row
    stays in v9-v23."""
    nest, extents, values, dtype = _fused_sddmm_spmm(k, n)
    for isa in ("neon", "sve"):
        prog = compile_nest_aarch64(nest, extents, "fp64", isa)
        assert {"stationary_l", stage} <= _labels(prog)
        assert ("tight_walk_A_j" in _labels(prog)) == (stage == "dot_k")
        _reassembles(prog)
        _reassembles(compile_nest_aarch64(nest, extents, "fp32", isa))
    want = np.einsum("ij,ik,jk,jl->il", *[_dense(v) for v in values])
    _runs_everywhere(nest, extents, values, dtype, want)
    f32 = [SparseTensor.from_dense(values[0].to_dense().astype(np.float32), CSR)]
    f32 += [v.astype(np.float32) for v in values[1:]]
    _runs_everywhere(nest, extents, f32, np.float32, want, 1e-4)


def test_a_row_over_the_registers_takes_the_general_path():
    """A row of 23 vectors (more than the 22 accumulators) is not held in registers; it runs."""
    rng = np.random.default_rng(2)
    a = _sparse((5, 6), 0.5, CSR, 2)
    b = rng.standard_normal((6, 46))
    operands, out, extents, values, dtype = _setup("ik,kj->ij", [a, b])
    nest = default_linear(operands, out)
    prog = compile_nest_aarch64(nest, extents, "fp64", "neon")
    assert "stationary_j" not in _labels(prog) and "vec_j" in _labels(prog)
    _runs_everywhere(nest, extents, values, dtype, a.to_dense() @ b)


@pytest.mark.parametrize("m", [12, 7])
def test_row_update_of_two_row_factors_and_two_scalars(m):
    """A hand-built ``Out(i,l,m) += A(i,j)*B(j,l)*E(i,l)*C(j,m)*D(i,m)`` (as in test_codegen, on
    every target): two variant scalars stepping along l, the sparse value fixed, two j-factors
    multiplied into the row once (``row_l_m``), whole vectors and a tail."""
    extents = {"i": 8, "j": 6, "l": 5, "m": m}
    terms = {"A": "ij", "B": "jl", "E": "il", "C": "jm", "D": "im"}  # A sparse (CSR), the rest dense
    ops = tuple(Operand(n, tuple(t), CSR) if n == "A" else Operand.dense(n, tuple(t)) for n, t in terms.items())
    compute = Compute(Access("Out", ("i", "l", "m")), tuple(Access(o.name, o.indices) for o in ops))
    inner = (Loop("i", (Loop("j", (Loop("l", (Loop("m", (compute,)),)),)),)),)
    nest = Nest(ops, Operand.dense("Out", ("i", "l", "m")), inner)
    rng = np.random.default_rng(12)
    a = _sparse((8, 6), 0.5, CSR, 7)
    b, e, c, d = (rng.standard_normal([extents[i] for i in terms[n]]) for n in "BECD")
    for isa in ("neon", "sve"):
        prog = compile_nest_aarch64(nest, extents, "fp64", isa)
        assert {"row_l_m", "row_l_m_loop"} <= _labels(prog)
        _reassembles(prog)
    want = np.einsum("ij,jl,il,jm,im->ilm", a.to_dense(), b, e, c, d)
    _runs_everywhere(nest, extents, (a, b, e, c, d), np.float64, want)
