"""SVE encoders, byte for byte against llvm-mc.

Each test is one encoding form (mnemonic x operand form x element size): it
draws a batch of operand tuples over their full legal ranges, emits them all
and compares the listing's encodings with llvm-mc once.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from asm.aarch64 import (
    Assembler,
    b0,
    d0,
    h0,
    mem,
    p0,
    p1,
    p2,
    p8,
    s0,
    s4,
    sp,
    w0,
    w1,
    x0,
    x1,
    x2,
    x3,
    x4,
    xzr,
    z0,
    z1,
    z2,
    z3,
    z8,
    z16,
)
from asm.aarch64.registers import PReg, ScalarReg, WReg, ZReg
from asm.aarch64.sve import PATTERNS
from asm.errors import EncodingError
from tests.asm.aarch64.strategies import preds, wregs, xregs, zvecs
from tests.asm.oracle import Form, assert_llvm_matches, check_chunk, chunk_params

SIZES = ["b", "h", "s", "d"]
FP = ["h", "s", "d"]
BATCH = 64
EXAMPLES = 3  # x BATCH draws per form; ~380 forms keep the file well under 40 s


def pvecs(es: str, max_reg: int = 15) -> st.SearchStrategy:
    return st.integers(0, max_reg).map(lambda i: getattr(PReg(i), es))


def pm(max_reg: int = 7) -> st.SearchStrategy:
    return st.integers(0, max_reg).map(lambda i: PReg(i).m)


def pz(max_reg: int = 7) -> st.SearchStrategy:
    return st.integers(0, max_reg).map(lambda i: PReg(i).z)


def scalars(es: str) -> st.SearchStrategy:
    """Scalar SIMD&FP registers b/h/s/d 0..31 of one size."""
    return st.integers(0, 31).map(lambda i: ScalarReg(i, es))


def zelems(es: str, max_reg: int, max_index: int) -> st.SearchStrategy:
    return st.builds(lambda i, k: getattr(ZReg(i), es)[k], st.integers(0, max_reg), st.integers(0, max_index))


patterns = st.one_of(st.sampled_from(sorted(PATTERNS)), st.integers(0, 31))
bases = xregs(sp=True)
index_regs = xregs(zr=False)


def run(data, form: str, operands: st.SearchStrategy, emit) -> list[tuple[str, Assembler | None]]:
    """Draw up to BATCH operand tuples and emit each with ``emit(a, *ops)`` into an Assembler of
    the form's own: [(form, Assembler)]. With ``data=None`` nothing is drawn: [(form, None)]
    (how `oracle` learns the form's name)."""
    if data is None:
        return [(form, None)]
    batch = data.draw(st.lists(operands, min_size=1, max_size=BATCH), label=form)
    a = Assembler()
    for ops in batch:
        emit(a, *ops)
    return [(form, a)]


#: every oracle form (EXAMPLES hypothesis examples each); checked in chunks by `test_forms`
FORMS: list[Form] = []


def oracle(*axes: tuple):
    """Register ``fn(**params, data=data)`` (which returns `run`'s programs) as one oracle form per
    combination of ``axes``, each given as pytest.mark.parametrize's (names, values)."""

    def register(fn):
        combos: list[dict] = [{}]
        for names, values in axes:
            keys = [names] if isinstance(names, str) else list(names)
            rows = [v if len(keys) > 1 else (v,) for v in values]
            combos = [{**c, **dict(zip(keys, r, strict=True))} for c in combos for r in rows]
        for params in combos:
            ((form, _),) = fn(**params, data=None)
            FORMS.append(Form(form, EXAMPLES, lambda data, p=params: fn(**p, data=data)))
        return fn

    return register


# -- predicates ------------------------------------------------------------------
@oracle(("mn", ["ptrue", "ptrues"]), ("es", SIZES))
def _ptrue(mn, es, data):
    return run(data, f"sve.{mn}.{es}", st.tuples(pvecs(es), patterns), lambda a, p, pat: getattr(a, mn)(p, pat))


def test_ptrue_default_all():
    a = Assembler()
    a.ptrue(p0.s)
    a.ptrue(p1.d, "vl8")
    assert a.listing().split() == ["ptrue", "p0.s", "ptrue", "p1.d,", "vl8"]


@oracle()
def _pfalse(data):
    return run(data, "sve.pfalse", st.tuples(pvecs("b")), Assembler.pfalse)


WHILES = ["whilelt", "whilele", "whilelo", "whilels", "whilege", "whilegt", "whilehs", "whilehi"]


@oracle(("mn", WHILES), ("es", SIZES))
def _while(mn, es, data):
    regs = st.one_of(st.tuples(wregs(), wregs()), st.tuples(xregs(), xregs()))
    ops = st.tuples(pvecs(es), regs)
    return run(data, f"sve.{mn}.{es}", ops, lambda a, p, r: getattr(a, mn)(p, *r))


@oracle()
def _ptest(data):
    return run(data, "sve.ptest", st.tuples(preds(15), pvecs("b")), Assembler.ptest)


@oracle(("es", SIZES))
def _cntp(es, data):
    return run(data, f"sve.cntp.{es}", st.tuples(xregs(), preds(15), pvecs(es)), Assembler.cntp)


@oracle()
def _sel_p(data):
    return run(data, "sve.sel.p", st.tuples(pvecs("b"), preds(15), pvecs("b"), pvecs("b")), Assembler.sel)


@oracle()
def _mov_p(data):
    return run(data, "sve.mov.p", st.tuples(pvecs("b"), pvecs("b")), Assembler.sve_mov)


@oracle(("mn", ["zip1", "zip2", "uzp1", "uzp2", "trn1", "trn2"]), ("es", SIZES))
def _permute_p(mn, es, data):
    return run(data, f"sve.{mn}.p.{es}", st.tuples(pvecs(es), pvecs(es), pvecs(es)), getattr(Assembler, f"sve_{mn}"))


# -- element count, stack frame --------------------------------------------------
@oracle(("mn", ["cntb", "cnth", "cntw", "cntd", "incb", "inch", "incw", "incd", "decb", "dech", "decw", "decd"]))
def _count(mn, data):
    ops = st.tuples(xregs(), patterns, st.integers(1, 16))
    return run(data, f"sve.{mn}", ops, getattr(Assembler, mn))


def test_count_default_text():
    a = Assembler()
    a.cntw(x0)
    a.incd(x1, "all", 4)
    a.cntb(x0, 17)
    assert a.listing().splitlines() == ["    cntw x0", "    incd x1, all, mul #4", "    cntb x0, #17"]


@oracle(("mn", ["addvl", "addpl"]))
def _addvl(mn, data):
    ops = st.tuples(xregs(sp=True), xregs(sp=True), st.integers(-32, 31))
    return run(data, f"sve.{mn}", ops, getattr(Assembler, mn))


@oracle()
def _rdvl(data):
    return run(data, "sve.rdvl", st.tuples(xregs(), st.integers(-32, 31)), Assembler.rdvl)


# -- loads and stores ------------------------------------------------------------
LD_SIZES = [(m, e) for i, m in enumerate("bhwd") for e in SIZES[i:]]
MSZ = {"b": 0, "h": 1, "w": 2, "d": 3}


def vl_mems(lo: int = -8, hi: int = 7) -> st.SearchStrategy:
    return st.builds(lambda b, k: mem(b, vl=k), bases, st.integers(lo, hi))


def rr_mems(shift: int) -> st.SearchStrategy:
    if shift:
        return st.builds(lambda b, i: mem(b, i, "lsl", shift), bases, index_regs)
    return st.builds(mem, bases, index_regs)


@oracle((("m", "es"), LD_SIZES), ("kind", ["si", "ss"]))
def _ld1(m, es, kind, data):
    addr = vl_mems() if kind == "si" else rr_mems(MSZ[m])
    return run(data, f"sve.ld1{m}.{kind}.{es}", st.tuples(zvecs(es), pz(), addr), getattr(Assembler, f"ld1{m}"))


@oracle((("m", "es"), LD_SIZES), ("kind", ["si", "ss"]))
def _st1(m, es, kind, data):
    addr = vl_mems() if kind == "si" else rr_mems(MSZ[m])
    return run(data, f"sve.st1{m}.{kind}.{es}", st.tuples(zvecs(es), preds(7), addr), getattr(Assembler, f"st1{m}"))


@oracle((("m", "es"), LD_SIZES))
def _ld1r(m, es, data):
    step = 1 << MSZ[m]
    addr = st.builds(lambda b, k: mem(b, k * step), bases, st.integers(0, 63))
    return run(data, f"sve.ld1r{m}.{es}", st.tuples(zvecs(es), pz(), addr), getattr(Assembler, f"ld1r{m}"))


@oracle(("m", "bhwd"), ("kind", ["si", "ss"]))
def _ld1rq(m, kind, data):
    es = {"w": "s"}.get(m, m)
    addr = st.builds(lambda b, k: mem(b, 16 * k), bases, st.integers(-8, 7)) if kind == "si" else rr_mems(MSZ[m])
    return run(data, f"sve.ld1rq{m}.{kind}", st.tuples(zvecs(es), pz(), addr), getattr(Assembler, f"ld1rq{m}"))


# gather/scatter: (memory size, element size) with the element size of the offsets
GS_SIZES = [(m, e) for m, e in LD_SIZES if e in "sd"]


def zoff_mems(es: str, msz: int) -> st.SearchStrategy:
    """``[Xn|SP, Zm.s, uxtw|sxtw{ #msz}]`` (.s) or ``[Xn|SP, Zm.d{, lsl #msz}]`` (.d)."""
    amounts = [None, msz] if msz else [None]
    if es == "s":
        return st.builds(
            lambda b, z, ext, amt: mem(b, z, ext, amt),
            bases,
            zvecs("s"),
            st.sampled_from(["uxtw", "sxtw"]),
            st.sampled_from(amounts),
        )
    return st.builds(lambda b, z, amt: mem(b, z, None, amt), bases, zvecs("d"), st.sampled_from(amounts))


@oracle((("m", "es"), GS_SIZES))
def _ld1_gather(m, es, data):
    addr = zoff_mems(es, MSZ[m])
    return run(data, f"sve.ld1{m}.gather.{es}", st.tuples(zvecs(es), pz(), addr), getattr(Assembler, f"ld1{m}"))


@oracle((("m", "es"), GS_SIZES))
def _st1_scatter(m, es, data):
    addr = zoff_mems(es, MSZ[m])
    return run(data, f"sve.st1{m}.scatter.{es}", st.tuples(zvecs(es), preds(7), addr), getattr(Assembler, f"st1{m}"))


@oracle(("es", SIZES), ("kind", ["ii", "ir", "ri", "rr"]))
def _index(es, kind, data):
    regs = xregs() if es == "d" else wregs()
    ops = [st.integers(-16, 15) if c == "i" else regs for c in kind]
    return run(data, f"sve.index.{kind}.{es}", st.tuples(zvecs(es), *ops), Assembler.index)


@oracle(("mn", ["sve_ldr", "sve_str"]), ("reg", ["z", "p"]))
def _ldr_str(mn, reg, data):
    rt = st.integers(0, 31).map(ZReg) if reg == "z" else st.integers(0, 15).map(PReg)
    return run(data, f"sve.{mn[4:]}.{reg}", st.tuples(rt, vl_mems(-256, 255)), getattr(Assembler, mn))


# -- floating-point multiply-add -------------------------------------------------
@oracle(("mn", ["sve_fmla", "sve_fmls", "fnmla", "fnmls", "fmad", "fmsb"]), ("es", FP))
def _fma_pred(mn, es, data):
    ops = st.tuples(zvecs(es), pm(), zvecs(es), zvecs(es))
    return run(data, f"sve.{mn.removeprefix('sve_')}.pred.{es}", ops, getattr(Assembler, mn))


@oracle(("es", ["b", "h", "s", "d"]))
def _int_mla(es, data):
    ops = st.tuples(zvecs(es), pm(), zvecs(es), zvecs(es))
    return run(data, f"sve.mla.pred.{es}", ops, Assembler.sve_mla)


IDX = {"h": (7, 7), "s": (7, 3), "d": (15, 1)}


@oracle(("mn", ["sve_fmla", "sve_fmls", "sve_fmul"]), ("es", FP))
def _fp_indexed(mn, es, data):
    ops = st.tuples(zvecs(es), zvecs(es), zelems(es, *IDX[es]))
    return run(data, f"sve.{mn[4:]}.idx.{es}", ops, getattr(Assembler, mn))


# -- floating-point arithmetic ---------------------------------------------------
PRED_OPS = [
    "sve_fadd",
    "sve_fsub",
    "sve_fmul",
    "fsubr",
    "sve_fdiv",
    "fdivr",
    "sve_fmax",
    "sve_fmin",
    "sve_fmaxnm",
    "sve_fminnm",
]


def destructive(es: str, last: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(lambda z, p, x: (z, p, z, x), zvecs(es), pm(), last)


@oracle(("mn", PRED_OPS), ("es", FP))
def _fp_pred(mn, es, data):
    return run(data, f"sve.{mn.removeprefix('sve_')}.pred.{es}", destructive(es, zvecs(es)), getattr(Assembler, mn))


IMM_OPS = {
    "sve_fadd": (0.5, 1.0),
    "sve_fsub": (0.5, 1.0),
    "fsubr": (0.5, 1.0),
    "sve_fmul": (0.5, 2.0),
    "sve_fmax": (0.0, 1.0),
    "sve_fmin": (0.0, 1.0),
    "sve_fmaxnm": (0.0, 1.0),
    "sve_fminnm": (0.0, 1.0),
}


@oracle(("mn", sorted(IMM_OPS)), ("es", FP))
def _fp_pred_imm(mn, es, data):
    values = st.sampled_from(IMM_OPS[mn] + (int(IMM_OPS[mn][1]),))
    return run(data, f"sve.{mn.removeprefix('sve_')}.imm.{es}", destructive(es, values), getattr(Assembler, mn))


@oracle(("mn", ["sve_fadd", "sve_fsub", "sve_fmul"]), ("es", FP))
def _fp_unpred(mn, es, data):
    return run(data, f"sve.{mn[4:]}.unpred.{es}", st.tuples(zvecs(es), zvecs(es), zvecs(es)), getattr(Assembler, mn))


# -- floating-point reductions --------------------------------------------------
@oracle(("mn", ["faddv", "sve_fmaxv", "sve_fminv", "sve_fmaxnmv", "sve_fminnmv"]), ("es", FP))
def _fp_reduce(mn, es, data):
    ops = st.tuples(scalars(es), preds(7), zvecs(es))
    return run(data, f"sve.{mn.removeprefix('sve_')}.{es}", ops, getattr(Assembler, mn))


# -- broadcast, move, select, logical --------------------------------------------
def dup_imms(es: str) -> st.SearchStrategy:
    small = st.integers(-128, 127)
    return small if es == "b" else st.one_of(small, st.integers(-128, 127).map(lambda k: 256 * k))


@oracle(("mn", ["sve_dup", "sve_mov"]), ("es", SIZES))
def _dup_imm(mn, es, data):
    return run(data, f"sve.{mn[4:]}.imm.{es}", st.tuples(zvecs(es), dup_imms(es)), getattr(Assembler, mn))


@oracle(("mn", ["sve_dup", "sve_mov"]), ("es", SIZES))
def _dup_gpr(mn, es, data):
    regs = xregs(sp=True) if es == "d" else wregs(sp=True)
    return run(data, f"sve.{mn[4:]}.gpr.{es}", st.tuples(zvecs(es), regs), getattr(Assembler, mn))


@oracle(("mn", ["sve_dup", "sve_mov"]), ("es", SIZES + ["q"]))
def _dup_elem(mn, es, data):
    lanes = 64 >> "bhsdq".index(es)
    ops = st.tuples(zvecs(es), zelems(es, 31, lanes - 1))
    return run(data, f"sve.{mn[4:]}.elem.{es}", ops, getattr(Assembler, mn))


@oracle()
def _mov_z(data):
    return run(data, "sve.mov.z.d", st.tuples(zvecs("d"), zvecs("d")), Assembler.sve_mov)


@oracle(("es", SIZES))
def _mov_merging(es, data):
    ops = st.tuples(zvecs(es), pm(15), zvecs(es))
    return run(data, f"sve.mov.sel.{es}", ops, Assembler.sve_mov)


@oracle(("es", SIZES))
def _sel_z(es, data):
    return run(data, f"sve.sel.z.{es}", st.tuples(zvecs(es), preds(15), zvecs(es), zvecs(es)), Assembler.sel)


@oracle(("mn", ["sve_and", "sve_orr", "sve_eor", "sve_bic"]))
def _logical(mn, data):
    return run(data, f"sve.{mn[4:]}.z.d", st.tuples(zvecs("d"), zvecs("d"), zvecs("d")), getattr(Assembler, mn))


@oracle(("mn", ["zip1", "zip2", "uzp1", "uzp2", "trn1", "trn2"]), ("es", SIZES))
def _permute_z(mn, es, data):
    return run(data, f"sve.{mn}.z.{es}", st.tuples(zvecs(es), zvecs(es), zvecs(es)), getattr(Assembler, f"sve_{mn}"))


@pytest.mark.parametrize("chunk", chunk_params(FORMS, 24))
def test_forms(chunk) -> None:
    check_chunk(chunk)


def test_form_names_unique() -> None:
    assert len({f.name for f in FORMS}) == len(FORMS) >= 347


# -- illegal operands ------------------------------------------------------------
ILLEGAL = [
    # (call, words the message must contain)
    (lambda a: a.ptrue(p0, "all"), "Pd"),
    (lambda a: a.ptrue(p0.s, "vl9"), "pattern"),
    (lambda a: a.ptrue(p0.s, 32), "pattern"),
    (lambda a: a.pfalse(p0.s), "Pd"),
    (lambda a: a.whilelt(p0.s, w0, x1), "all be X or all be W"),
    (lambda a: a.whilelo(p0.s, sp, x1), "Rn"),
    (lambda a: a.cntw(w0), "Rd"),
    (lambda a: a.cntw(x0, "all", 17), "mul"),
    (lambda a: a.cntd(x0, "all", 0), "mul"),
    (lambda a: a.incw(sp), "Rdn"),
    (lambda a: a.addvl(x0, x1, 32), "imm"),
    (lambda a: a.addvl(xzr, x1, 1), "Rd"),
    (lambda a: a.rdvl(sp, 1), "Rd"),
    (lambda a: a.rdvl(x0, -33), "imm"),
    (lambda a: a.ld1w(z0.s, p8.z, mem(x0)), "Pg"),
    (lambda a: a.ld1w(z0.s, p0.m, mem(x0)), "Pg"),
    (lambda a: a.ld1w(z0.s, p0, mem(x0)), "Pg"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, vl=8)), "mul vl"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, vl=-9)), "mul vl"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, 16)), "address"),
    (lambda a: a.ld1w(z0.h, p0.z, mem(x0)), "Zt"),
    (lambda a: a.ld1d(z0.s, p0.z, mem(x0)), "Zt"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, x1, "lsl", 3)), "address"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, x1)), "address"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, xzr, "lsl", 2)), "Xm"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(xzr)), "base"),
    (lambda a: a.st1d(z0.d, p0.z, mem(x0)), "Pg"),
    (lambda a: a.st1w(z0.s, p8, mem(x0)), "Pg"),
    (lambda a: a.st1w([z0.s, z1.s], p0, mem(x0)), "Zt"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, z1.s, "lsl", 2)), "uxtw|sxtw"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, z1.s, "sxtw", 3)), "address"),
    (lambda a: a.ld1w(z0.s, p0.z, mem(x0, z1.d)), "address"),
    (lambda a: a.ld1b(z0.s, p0.z, mem(x0, z1.s, "uxtw", 0)), "address"),
    (lambda a: a.ld1d(z0.d, p0.z, mem(x0, z1.d, "lsl", 2)), "lsl #3"),
    (lambda a: a.ld1d(z0.d, p0.z, mem(xzr, z1.d)), "base"),
    (lambda a: a.st1w(z0.s, p8, mem(x0, z1.s, "sxtw")), "Pg"),
    (lambda a: a.st1d(z0.d, p0, mem(x0, z1.s, "sxtw")), "address"),
    (lambda a: a.index(z0.s, 16, 1), "start"),
    (lambda a: a.index(z0.s, 0, -17), "step"),
    (lambda a: a.index(z0.s, x1, 1), "W register"),
    (lambda a: a.index(z0.d, 0, w1), "X register"),
    (lambda a: a.index(z0.q, 0, 1), "Zd"),
    (lambda a: a.ld1rw(z0.s, p0.z, mem(x0, 256)), "offset"),
    (lambda a: a.ld1rw(z0.s, p0.z, mem(x0, 2)), "offset"),
    (lambda a: a.ld1rd(z0.d, p0.z, mem(x0, -8)), "offset"),
    (lambda a: a.ld1rqw(z0.s, p0.z, mem(x0, 128)), "offset"),
    (lambda a: a.ld1rqw(z0.s, p0.z, mem(x0, 8)), "offset"),
    (lambda a: a.ld1rqw(z0.d, p0.z, mem(x0)), "Zt"),
    (lambda a: a.sve_ldr(z0.s, mem(x0)), "Rt"),
    (lambda a: a.sve_ldr(z0, mem(x0, vl=256)), "mul vl"),
    (lambda a: a.sve_mla(z0.s, p0.m, z1.s, z2.d), "element sizes"),
    (lambda a: a.sve_mla(z0.s, p0.z, z1.s, z2.s), "Pg"),
    (lambda a: a.sve_fmla(z0.s, p0.m, z1.s, z2.d), "element sizes"),
    (lambda a: a.sve_fmla(z0.b, p0.m, z1.b, z2.b), "Zda"),
    (lambda a: a.sve_fmla(z0.s, p0.z, z1.s, z2.s), "Pg"),
    (lambda a: a.sve_fmla(z0.s, p8.m, z1.s, z2.s), "Pg"),
    (lambda a: a.sve_fmla(z0.s, z1.s, z8.s[0]), "Zm register"),
    (lambda a: a.sve_fmla(z0.s, z1.s, z2.s[4]), "Zm index"),
    (lambda a: a.sve_fmla(z0.d, z1.d, z16.d[0]), "Zm register"),
    (lambda a: a.sve_fmla(z0.d, z1.d, z2.d[2]), "Zm index"),
    (lambda a: a.sve_fmla(z0.h, z1.h, z8.h[0]), "Zm register"),
    (lambda a: a.sve_fmla(z0.s, z1.s, z2.d[0]), "Zm"),
    (lambda a: a.fmad(z0.s, p0.m, z1.s, z2.h), "element sizes"),
    (lambda a: a.sve_fadd(z0.s, p0.m, z1.s, z2.s), "Zdn and Zn"),
    (lambda a: a.sve_fadd(z0.s, p0.m, z0.s, 2.0), "imm"),
    (lambda a: a.sve_fmul(z0.s, p0.m, z0.s, 1.0), "imm"),
    (lambda a: a.sve_fmax(z0.s, p0.m, z0.s, 0.5), "imm"),
    (lambda a: a.sve_fdiv(z0.s, p0.m, z0.s, 1.0), "no immediate"),
    (lambda a: a.sve_fadd(z0.b, z1.b, z2.b), "Zd"),
    (lambda a: a.sve_dup(z0.b, 256), "imm"),
    (lambda a: a.sve_dup(z0.s, 128), "imm"),
    (lambda a: a.sve_dup(z0.h, 32768), "imm"),
    (lambda a: a.sve_mov(z0.s, x1), "Rn"),
    (lambda a: a.sve_mov(z0.d, w1), "Rn"),
    (lambda a: a.sve_mov(z0.s, WReg(31)), "Rn"),
    (lambda a: a.sve_dup(z0.s, z1.s[16]), "Zn index"),
    (lambda a: a.sve_dup(z0.q, z1.q[4]), "Zn index"),
    (lambda a: a.sve_dup(z0.s, z1.d[0]), "Zn"),
    (lambda a: a.sve_mov(z0.s, z1.s), "Zd"),
    (lambda a: a.sve_mov(z0.s, p0.z, z1.s), "Pg"),
    (lambda a: a.sel(z0.s, p0.m, z1.s, z2.s), "Pg"),
    (lambda a: a.sel(z0.s, p0, z1.s, z2.h), "element sizes"),
    (lambda a: a.sve_zip1(z0.s, z1.s, z2.d), "element sizes"),
    (lambda a: a.sve_zip1(p0.s, p1.s, p2.d), "element sizes"),
    (lambda a: a.sve_trn1(z0.s, z1.s, p2.s), "Zm"),
    (lambda a: a.ptest(p0, p1.s), "Pn"),
    (lambda a: a.faddv(s0, p0, z1.d), "element sizes"),
    (lambda a: a.faddv(d0, p0, z1.h), "element sizes"),
    (lambda a: a.faddv(b0, p0, z1.b), "Vd"),
    (lambda a: a.faddv(h0, p0, z1.b), "Zn"),
    (lambda a: a.faddv(z0.s, p0, z1.s), "Vd"),
    (lambda a: a.faddv(s0, p0, z1), "Zn"),
    (lambda a: a.faddv(s0, p8, z1.s), "Pg"),
    (lambda a: a.faddv(s0, p0.m, z1.s), "Pg"),
    (lambda a: a.sve_fmaxv(s0, p0.z, z1.s), "Pg"),
    (lambda a: a.sve_fminnmv(x0, p0, z1.d), "Vd"),
    (lambda a: a.cntp(x0, p1.s, p2.s), "Pg"),
]


@pytest.mark.parametrize(("call", "needle"), ILLEGAL)
def test_illegal_operands(call, needle):
    a = Assembler()
    with pytest.raises(EncodingError, match=needle):
        call(a)
    assert len(a) == 0


def test_messages_name_mnemonic_and_range():
    a = Assembler()
    with pytest.raises(EncodingError, match=r"^fmla: Zm register must be in 0\.\.7, got 8"):
        a.sve_fmla(z0.s, z1.s, z8.s[0])
    with pytest.raises(EncodingError, match=r"^ld1w: .*-8\.\.7"):
        a.ld1w(z0.s, p0.z, mem(x0, vl=8))
    with pytest.raises(EncodingError, match=r"^dup: imm must be -128\.\.127 or a multiple of 256"):
        a.sve_dup(z0.s, 300)
    with pytest.raises(EncodingError, match=r"^faddv: Pg must be a predicate p0\.\.p7, got p8"):
        a.faddv(s0, p8, z1.s)


def test_listing_reassembles():
    """A mixed SVE program round-trips through llvm-mc (the listing is valid input)."""
    a = Assembler()
    a.ptrue(p0.s)
    a.whilelo(p1.s, x0, x1)
    a.ld1w(z0.s, p1.z, mem(x2, x0, "lsl", 2))
    a.ld1rw(z1.s, p0.z, mem(x3, 4))
    a.sve_fmla(z2.s, p1.m, z0.s, z1.s)
    a.sve_fmla(z3.s, z0.s, z1.s[3])
    a.sve_fmax(z2.s, p1.m, z2.s, 0.0)
    a.faddv(s4, p1, z2.s)
    a.st1w(z2.s, p1, mem(x4, x0, "lsl", 2))
    a.incw(x0)
    a.addvl(sp, sp, -2)
    a.sve_str(z0, mem(sp, vl=1))
    assert_llvm_matches(a, "sve.program")
