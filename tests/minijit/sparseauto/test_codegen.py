"""Code generation of sparse loop nests: the stages each node compiles to, the listing
reassembles with llvm-mc to the same bytes, and every enumerated schedule (fission, fusion,
temporaries) computes what numpy does."""

from __future__ import annotations

import re

import numpy as np
import pytest

from asm import llvm
from minijit.sparseauto.api import _convert, _operands, _output
from minijit.sparseauto.codegen import arg_slots, compile_nest, sampled_operand
from minijit.sparseauto.execute import SparseContraction
from minijit.sparseauto.graph import parse_subscripts
from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Operand, Temp
from minijit.sparseauto.schedules import default_linear, enumerate_schedules
from minijit.sparseauto.tensor import SparseTensor

native = pytest.mark.skipif(
    __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64", reason="runs x86-64 code"
)
CSR = ("dense", "compressed")


def _setup(subscripts, ops):
    values, dtype = _convert(ops)
    terms, out_term = parse_subscripts(subscripts, len(values))
    operands, extents = _operands(terms, values)
    out, _ = _output(operands, out_term)
    return operands, out, extents, values, dtype


def _sparse(shape, density, levels=None, seed=0):
    rng = np.random.default_rng(seed)
    d = np.where(rng.random(shape) < density, rng.standard_normal(shape), 0)
    return SparseTensor.from_dense(d, levels)


def _spmm(n):
    ops = [_sparse((20, 9), 0.3, CSR), np.ones((9, n))]
    operands, out, extents, *_ = _setup("ik,kj->ij", ops)
    return default_linear(operands, out), extents


@pytest.mark.parametrize(
    "n, dtype, tail, stationary",
    [(16, "fp64", False, True), (13, "fp64", True, True), (13, "fp32", True, True), (47, "fp64", True, False)],
)
def test_spmm_stages_and_llvm_reassembly(n, dtype, tail, stationary):
    """SpMM: the row of C stays in registers across the walk of A's row while it fits 11 vectors;
    that walk then runs with its position, bounds and pointers in registers (``tight``)."""
    nest, extents = _spmm(n)
    prog = compile_nest(nest, extents, dtype)
    text = prog.asm.listing()
    assert ".Ldense_i" in text and (".Ltight_walk_A_k" if stationary else ".Lwalk_A_k") in text
    assert ".Lprefetch_k" in text and "prefetcht0" in text  # B's row, prefetch_ahead positions on
    assert (".Lstationary_j" in text and ".Ltight_walk_A_k" in text) == stationary
    assert (".Lvec_j" in text) != stationary
    assert prog.vectorized == ("j",) and prog.split == ("dense", 20)
    assert ("vmaskmov" in text) == tail and ("vtail" in text) == (tail and not stationary)
    assert "vfmadd231p" in text
    assert llvm.assemble(text, triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code()


def test_merge_dot_and_temp_stages():
    a, b = _sparse((8, 7), 0.4, CSR, 1), _sparse((8, 7), 0.4, CSR, 2)
    operands, out, extents, *_ = _setup("ij,ij->i", [a, b])
    text = compile_nest(default_linear(operands, out), extents).asm.listing()
    assert ".Lmerge_j" in text
    operands, out, extents, *_ = _setup("ij,ik,jk->ij", [a, np.ones((8, 5)), np.ones((7, 5))])
    prog = compile_nest(default_linear(operands, out), extents)
    assert prog.vectorized == ("k",) and "vextractf128" in prog.asm.listing()  # dot product, summed
    operands, out, extents, *_ = _setup("ijk,jl,km->ilm", [_sparse((4, 3, 5), 0.3), np.ones((3, 2)), np.ones((5, 6))])
    fission = [n for n in enumerate_schedules(operands, out).nests if n.temps]
    assert fission
    prog = compile_nest(fission[0], extents)
    assert f".Lzero_{fission[0].temps[0].name}" in prog.asm.listing()
    assert [s.part for s in arg_slots(fission[0])].count("temp") == len(fission[0].temps)


@native
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("ijk,jl,km->ilm", [(6, 5, 4), (5, 3), (4, 2)]),  # TTMc
        ("ijk,jl,kl->il", [(6, 5, 4), (5, 3), (4, 3)]),  # MTTKRP
        ("ijk,kl,lm->ijm", [(6, 5, 4), (4, 3), (3, 2)]),  # TTM chain
        ("ij,ik,jk,jl->il", [(7, 6), (7, 5), (6, 5), (6, 3)]),  # SDDMM then SpMM
    ],
)
def test_every_enumerated_schedule_matches_numpy(subscripts, shapes):
    rng = np.random.default_rng(4)
    ops = [_sparse(shapes[0], 0.35, CSR if len(shapes[0]) == 2 else None, 5)]
    ops += [rng.standard_normal(s) for s in shapes[1:]]
    operands, out, extents, values, dtype = _setup(subscripts, ops)
    nests = enumerate_schedules(operands, out).nests
    if len(nests) > 40:  # the 4-operand space is large: a spread of it
        nests = nests[:: len(nests) // 40]
    want = np.einsum(subscripts, *[v.to_dense() if isinstance(v, SparseTensor) else v for v in values])
    for nest in nests:
        got = SparseContraction(nest, extents, dtype).execute(*values)
        np.testing.assert_allclose(got, want, atol=1e-12, err_msg=str(nest))


def _three_way():
    ops = tuple(Operand(n, ("i",), ("compressed",)) for n in "ABC")
    out = Operand.dense("O", ())
    body = (Loop("i", (Compute(Access("O", ()), tuple(Access(n, ("i",)) for n in "ABC")),)),)
    return Nest(ops, out, body)


def test_unsupported_nests_raise_before_code():
    with pytest.raises(ValueError, match="co-iterates 3 compressed levels"):
        compile_nest(_three_way(), {"i": 4})
    nest, extents = _spmm(4)
    with pytest.raises(ValueError, match="isa must be one of"):
        compile_nest(nest, extents, isa="sse4")
    with pytest.raises(ValueError, match="dtype"):
        compile_nest(nest, extents, dtype="fp16")
    with pytest.raises(ValueError, match="no extent for index 'j'"):
        compile_nest(nest, {"i": 3, "k": 2})
    with pytest.raises(ValueError, match="dense tensor B: a stride of 2 GiB"):
        compile_nest(nest, {"i": 3, "k": 2, "j": 2**28})


def test_sparse_output_must_sample_an_operand():
    a = Operand("A", ("i", "j"), CSR)
    b = Operand.dense("B", ("i", "j"))
    out = Operand("O", ("j", "i"), CSR)
    body = (
        Loop(
            "i", (Loop("j", (Compute(Access("O", ("j", "i")), (Access("A", ("i", "j")), Access("B", ("i", "j")))),)),)
        ),
    )
    nest = Nest((a, b), out, body)
    with pytest.raises(ValueError, match="no input has the same indices and levels"):
        sampled_operand(nest)
    good = Nest(
        (a, b),
        Operand("O", ("i", "j"), CSR),
        (
            Loop(
                "i",
                (Loop("j", (Compute(Access("O", ("i", "j")), (Access("A", ("i", "j")), Access("B", ("i", "j")))),)),),
            ),
        ),
    )
    assert sampled_operand(good) == a


@pytest.mark.parametrize("n", [11, 47])
def test_temp_declared_in_body_is_zeroed_each_time(n):
    """A hand-written fission: T<j> = sum_k A[i,k] B[k,j] per row i, then O[i,j] += T[j]; the temp
    must be zeroed at each row (its declaration point): by storing the walk's accumulators over
    it where its row stays in registers (11 doubles), else by zeroing it (47: 12 vectors)."""
    a = Operand("A", ("i", "k"), CSR)
    b = Operand.dense("B", ("k", "j"))
    out = Operand.dense("O", ("i", "j"))
    body = (
        Loop(
            "i",
            (
                Temp("T", ("j",)),
                Loop(
                    "k",
                    (Loop("j", (Compute(Access("T", ("j",)), (Access("A", ("i", "k")), Access("B", ("k", "j")))),)),),
                ),
                Loop("j", (Compute(Access("O", ("i", "j")), (Access("T", ("j",)),)),)),
            ),
        ),
    )
    nest = Nest((a, b), out, body)
    t = _sparse((9, 6), 0.4, CSR, 7)
    bm = np.random.default_rng(8).standard_normal((6, n))
    if __import__("minijit.runtime", fromlist=["host"]).host().isa == "x86_64":
        got = SparseContraction(nest, {"i": 9, "k": 6, "j": n}).execute(t, bm)
        np.testing.assert_allclose(got, t.to_dense() @ bm, atol=1e-12)
    text = compile_nest(nest, {"i": 9, "k": 6, "j": n}).asm.listing()
    assert (".Lzero_T" in text, ".Lstore_T" in text) == ((False, True) if n == 11 else (True, False))


def test_sampled_output_written_without_its_pattern_as_factor():
    """Out samples P (compressed i, dense j) but the statement writing it reads X and a temporary
    only: the position of P's dense level must still follow the loop over j that writes Out."""
    p = Operand("P", ("i", "j"), ("compressed", "dense"))
    x = Operand.dense("X", ("i", "j"))
    out = Operand("Out", ("i", "j"), ("compressed", "dense"))
    body = (
        Loop(
            "i",
            (
                Temp("T", ("j",)),
                Loop("j", (Compute(Access("T", ("j",)), (Access("P", ("i", "j")),)),)),
                Loop("j", (Compute(Access("Out", ("i", "j")), (Access("X", ("i", "j")), Access("T", ("j",)))),)),
            ),
        ),
    )
    nest = Nest((p, x), out, body)
    assert sampled_operand(nest) == p
    rng = np.random.default_rng(9)
    d = np.where(rng.random((7, 5)) < 0.3, rng.standard_normal((7, 5)), 0)
    pt = SparseTensor.from_dense(d, ("compressed", "dense"))
    xm = rng.standard_normal((7, 5))
    if __import__("minijit.runtime", fromlist=["host"]).host().isa == "x86_64":
        got = SparseContraction(nest, {"i": 7, "j": 5}).execute(pt, xm)
        want = np.where(np.any(d != 0, axis=1, keepdims=True), d * xm, 0)  # stored rows of P
        np.testing.assert_allclose(got.to_dense(), want, atol=1e-12)


def test_sampled_output_written_outside_the_walk_is_refused():
    a = Operand("A", ("i", "j"), CSR)
    b = Operand.dense("B", ("i", "j"))
    out = Operand("O", ("i", "j"), CSR)
    body = (
        Loop("i", (Loop("j", (Compute(Access("O", ("i", "j")), (Access("B", ("i", "j")),)),)),)),
        Loop("i", (Loop("j", (Compute(Access("O", ("i", "j")), (Access("A", ("i", "j")),)),)),)),
    )
    with pytest.raises(ValueError, match="does not walk A"):
        compile_nest(Nest((a, b), out, body), {"i": 3, "j": 4})


@pytest.mark.parametrize("subscripts", ["ik,kj->ji", "ik,jk,lj->il"])
def test_strided_inner_loop(subscripts):
    """Dense accesses along the inner index that are not unit-stride: scalar with pointer steps."""
    rng = np.random.default_rng(10)
    a = _sparse((12, 9), 0.4, CSR, 11)
    if subscripts == "ik,kj->ji":
        dense = [rng.standard_normal((9, 7))]
    else:
        dense = [rng.standard_normal((5, 9)), rng.standard_normal((3, 5))]
    operands, out, extents, values, dtype = _setup(subscripts, [a, *dense])
    nest = default_linear(operands, out)
    prog = compile_nest(nest, extents)
    assert ".Lstrided_" in prog.asm.listing()
    assert llvm.assemble(prog.asm.listing(), triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code()
    if __import__("minijit.runtime", fromlist=["host"]).host().isa == "x86_64":
        got = SparseContraction(nest, extents, dtype).execute(*values)
        np.testing.assert_allclose(got, np.einsum(subscripts, a.to_dense(), *dense), atol=1e-12)


def _fused_sddmm_spmm(k, n, dtype=np.float64, seed=6):
    """SDDMM then SpMM fused per nonzero (GNN attention): T = C(i,:).D(j,:), A(i,:) += B(i,j)*T*E(j,:)."""
    rng = np.random.default_rng(seed)
    ops = [_sparse((30, 25), 0.3, CSR, seed).astype(dtype)]
    ops += [rng.standard_normal(s).astype(dtype) for s in ((30, k), (25, k), (25, n))]
    operands, out, extents, values, dt = _setup("ij,ik,jk,jl->il", ops)
    fused = [
        x
        for x in enumerate_schedules(operands, out).nests
        if len(x.body) == 1 and [t.indices for t in x.temps] == [()] and len(x.body[0].body[0].body) == 3
    ]
    assert fused, "the fused schedule (for i: for j: T = 0; for k; for l) is enumerated"
    return fused[0], extents, values, dt


@pytest.mark.parametrize(
    "k, n, dtype",
    [
        (32, 32, np.float64),
        (13, 11, np.float64),
        (7, 30, np.float32),
        (5, 40, np.float64),
        (5, 44, np.float64),
        (16, 11, np.float64),
        (64, 40, np.float32),
        (8, 8, np.float32),
        (4, 44, np.float64),
        (80, 8, np.float64),
    ],
)
def test_fused_sddmm_spmm_keeps_the_output_row_in_registers(k, n, dtype):
    """The walk over j holds the dot product over k before the axpy over l: A(i,:) still stays in
    registers across the walk (its accumulators left alone by the dot product's loop), also with
    masked tails on both loops (the mask set again before the axpy) and in fp32. A dot product of
    whole vectors (at most 16) runs tight: unrolled, its sum kept in a register, no temporary."""
    nest, extents, values, dt = _fused_sddmm_spmm(k, n, dtype)
    prog = compile_nest(nest, extents, "fp32" if dt == np.float32 else "fp64")
    text = prog.asm.listing()
    lanes = 8 if dt == np.float32 else 4
    naccs = -(-n // lanes)
    stationary = naccs <= 10  # the dot product needs two of the 12 work registers
    tight = naccs <= 10 and k % lanes == 0 and k // lanes <= 16
    assert (".Lstationary_l" in text) == stationary
    assert (".Ltight_walk_A_j" in text and ".Ldot_k" in text) == tight
    assert (".Lacc_l" in text) == (stationary and not tight)
    assert (".Lvec_k" in text) != tight
    assert llvm.assemble(text, triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code()
    if __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64":
        return
    dense = [v.to_dense() if isinstance(v, SparseTensor) else v for v in values]
    want = np.einsum("ij,ik,jk,jl->il", *[d.astype(np.float64) for d in dense])
    got = SparseContraction(nest, extents, dt).execute(*values)
    tol = 1e-4 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=text)


def test_prefetch_distance_follows_the_lines_per_position():
    """About PREFETCH_LINES lines in flight, 4 to 16 positions: SpMM's 13-column fp64 rows (2
    lines) look 16 positions ahead, SDDMM-SpMM's two 256-byte rows (8 lines) 8."""
    from minijit.sparseauto.codegen_inner import prefetch_ahead

    assert [prefetch_ahead(n) for n in (0, 1, 2, 4, 8, 16, 32)] == [16, 16, 16, 16, 8, 4, 4]
    nest, extents = _spmm(13)
    assert "add rax, 16\n" in compile_nest(nest, extents).asm.listing()
    nest, extents, *_ = _fused_sddmm_spmm(32, 32)
    text = compile_nest(nest, extents).asm.listing()
    assert text.count("prefetcht0") == 8 and "add rax, 8\n" in text


@pytest.mark.parametrize("factors", [1, 3])
def test_tight_fused_dot_of_one_and_three_factors(factors):
    """Hand-built nests: ``T() += B(j,k)`` (a sum: the first vector loaded, the rest added) and
    ``T() += B(j,k)*D(i,k)*F(j,k)`` (the middle factor multiplied in) before the axpy
    ``Out(i,l) += A(i,j)*T()*C(j,l)``, run tight and against numpy."""
    from minijit.sparseauto.nest import Access, Compute, Loop, Nest, Operand, Temp

    rng = np.random.default_rng(11)
    a = _sparse((30, 25), 0.3, CSR, 4)
    b, c, d, f = (rng.standard_normal(s) for s in ((25, 16), (25, 12), (30, 16), (25, 16)))
    ops = [Operand("A", ("i", "j"), CSR), Operand.dense("B", ("j", "k")), Operand.dense("C", ("j", "l"))]
    dot_ins = [Access("B", ("j", "k"))]
    values = [a, b, c]
    if factors == 3:
        ops += [Operand.dense("D", ("i", "k")), Operand.dense("F", ("j", "k"))]
        dot_ins += [Access("D", ("i", "k")), Access("F", ("j", "k"))]
        values += [d, f]
    axpy = Compute(Access("Out", ("i", "l")), (Access("A", ("i", "j")), Access("T", ()), Access("C", ("j", "l"))))
    walk = Loop(
        "j",
        (Temp("T", ()), Loop("k", (Compute(Access("T", ()), tuple(dot_ins)),)), Loop("l", (axpy,))),
    )
    nest = Nest(tuple(ops), Operand.dense("Out", ("i", "l")), (Loop("i", (walk,)),))
    extents = {"i": 30, "j": 25, "k": 16, "l": 12}
    prog = compile_nest(nest, extents)
    text = prog.asm.listing()
    assert ".Ltight_walk_A_j" in text and ".Ldot_k" in text
    dot = text[text.index(".Ldot_k") : text.index("vextractf128")]
    if factors == 1:  # four vectors in two sums: loaded, then added
        assert "vmulpd" not in dot and "vfmadd231pd" not in dot and dot.count("vaddpd") >= 2
    else:  # the middle factor multiplied in, the last one fused
        assert "vmulpd ymm0, ymm0, ymmword ptr" in dot and dot.count("vfmadd231pd") == 2
    assert llvm.assemble(text, triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code()
    if __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64":
        return
    dense = a.to_dense()
    t = b.sum(axis=1)[None, :] if factors == 1 else np.einsum("jk,ik,jk->ij", b, d, f)
    want = np.einsum("ij,ij,jl->il", dense, np.broadcast_to(t, dense.shape), c)
    got = SparseContraction(nest, extents).execute(*values)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


#: the vectors of one output row the row update (``row_l_m``) holds in registers, per target
ROW_UPDATE_VECTORS = {"x86_64-avx2": 5, "x86_64-avx512": 14}
TTMC_CASES = [(16, np.float64), (13, np.float64), (11, np.float32), (47, np.float64)]


def _ttmc_row_update(target, schedule, m, dtype):
    """TTMc's operands, and the nest `compile_einsum` chooses for ``target`` (planned at its
    lanes) compiled for it, not loaded."""
    from minijit.sparseauto.plan import sparse_plan

    rng = np.random.default_rng(5)
    t = _sparse((6, 7, 30), 0.35, ("compressed",) * 3, 6).astype(dtype)
    b, c = rng.standard_normal((7, 16)).astype(dtype), rng.standard_normal((30, m)).astype(dtype)
    plan = sparse_plan("ijk,jl,km->ilm", t, b, c, lanes=target.vector_lanes(dtype))
    nest = plan.chosen if schedule == "auto" else plan.default_linear()
    extents = {"i": 6, "j": 7, "k": 30, "l": 16, "m": m}
    return (t, b, c), nest, target.sparse_program(nest, extents, "fp32" if dtype == np.float32 else "fp64")


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("schedule", ["auto", "linear"])
@pytest.mark.parametrize(("m", "dtype"), TTMC_CASES)
def test_ttmc_row_update_keeps_the_row_in_registers(target, schedule, m, dtype):
    """TTMc ``A(i,l,m) += C(j,l)*T(m)`` (chosen) and ``+= B(i,j,k)*C(j,l)*D(k,m)`` (linear): the
    loop over l holds the m-row in registers and updates the output row per l (``row_l_m``),
    masked for a tail (AVX2: ``vmaskmov``; AVX-512: opmask k1); a row over the registers (AVX2:
    47 doubles, 12 vectors) takes the general path. Text only, for the target named, on any host."""
    from minijit import targets

    tgt = targets.get_cpu(target)
    lanes = tgt.vector_lanes(dtype)
    _, nest, prog = _ttmc_row_update(tgt, schedule, m, dtype)
    assert re.search(r"for l:\n\s+for m:\n\s+\w+\(i,l,m\) \+= ", str(nest))
    text = prog.asm.listing()
    assert (".Lrow_l_m" in text) == (-(-m // lanes) <= ROW_UPDATE_VECTORS[target])
    tail = m % lanes != 0
    if tgt.isa == "avx2":
        assert ("vmaskmov" in text) == tail and "zmm" not in text
    else:
        assert ("{k1}" in text) == tail and "vmaskmov" not in text and "zmm" in text
    assert llvm.assemble(text, triple=llvm.X86_64_TRIPLE, mattr="") == prog.asm.code()


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("schedule", ["auto", "linear"])
@pytest.mark.parametrize(("m", "dtype"), TTMC_CASES)
def test_ttmc_row_update_runs(target, schedule, m, dtype):
    """The row updates above, compiled by `compile_einsum` for the target (the same code) and run
    against numpy where this host runs the target."""
    from minijit import targets
    from minijit.sparseauto.api import compile_einsum, sparse_einsum

    tgt = targets.get_cpu(target)
    if not (tgt.native and tgt.supported):
        pytest.skip(f"runs {target} code: this host cannot")
    (t, b, c), _, prog = _ttmc_row_update(tgt, schedule, m, dtype)
    compiled, _ = compile_einsum("ijk,jl,km->ilm", t, b, c, schedule=schedule, threads=1, target=tgt)
    assert compiled.program.asm.code() == prog.asm.code()
    want = np.einsum("ijk,jl,km->ilm", t.to_dense().astype(np.float64), b, c)
    got = sparse_einsum("ijk,jl,km->ilm", t, b, c, schedule=schedule, threads=2, target=tgt)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@native
def test_row_update_of_two_row_factors_and_two_scalars():
    """A hand-built ``Out(i,l,m) += A(i,j)*B(j,l)*E(i,l)*C(j,m)*D(i,m)``: two variant scalars
    (pointers stepping along l), the sparse value fixed, two j-factors multiplied into the row."""
    rng = np.random.default_rng(12)
    a = _sparse((8, 6), 0.5, CSR, 7)
    b, e, c, d = (rng.standard_normal(s) for s in ((6, 5), (8, 5), (6, 12), (8, 12)))
    ops = (
        Operand("A", ("i", "j"), CSR),
        Operand.dense("B", ("j", "l")),
        Operand.dense("E", ("i", "l")),
        Operand.dense("C", ("j", "m")),
        Operand.dense("D", ("i", "m")),
    )
    ins = tuple(Access(n, o.indices) for n, o in zip("ABECD", ops, strict=True))
    body = Loop("l", (Loop("m", (Compute(Access("Out", ("i", "l", "m")), ins),)),))
    nest = Nest(ops, Operand.dense("Out", ("i", "l", "m")), (Loop("i", (Loop("j", (body,)),)),))
    extents = {"i": 8, "j": 6, "l": 5, "m": 12}
    prog = compile_nest(nest, extents)
    text = prog.asm.listing()
    loop = text[text.index(".Lrow_l_m_loop") :]
    assert loop.index("vmulsd") < loop.index("vbroadcastsd")  # the two scalars' product
    assert "vmulpd" in text[text.index(".Lrow_l_m") : text.index(".Lrow_l_m_loop")]  # C*D, once
    got = SparseContraction(nest, extents).execute(a, b, e, c, d)
    want = np.einsum("ij,jl,il,jm,im->ilm", a.to_dense(), b, e, c, d)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
