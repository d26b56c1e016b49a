"""Base AArch64 encoders against llvm-mc, operands drawn over their legal ranges."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import EncodingError
from asm.aarch64 import Assembler, mem, post, pre
from asm.aarch64.base import CONDITIONS, EXTENDS, PRFOPS
from asm.aarch64.registers import ScalarReg, WReg, XReg
from tests.asm.aarch64.strategies import wregs, xregs
from tests.asm.oracle import Form, assert_llvm_matches, check_chunk, chunk_params

OPS = st.lists  # shorthand
EXAMPLES = 4  # hypothesis examples per oracle form


def gp(sf: int, **kw):
    return xregs(**kw) if sf else wregs(**kw)


def program(form: str, calls) -> tuple[str, Assembler]:
    """``calls`` (method name, operands) emitted into an Assembler of ``form``'s own."""
    a = Assembler()
    for name, args in calls:
        getattr(a, name)(*args)
    return form, a


def draw_run(data, form: str, mn: str, operands, max_size: int = 48) -> list[tuple[str, Assembler]]:
    """Draw 1..max_size operand tuples and emit ``mn`` on each of them as ``form``."""
    ops = data.draw(OPS(operands, min_size=1, max_size=max_size), label=form)
    return [program(form, [(mn, o) for o in ops])]


def xw(sf: int) -> str:
    """The form-name suffix of the register width: "x" or "w"."""
    return "xw"[1 - sf]


#: every oracle form; checked in chunks by `test_forms` (one llvm-mc run per chunk and example)
FORMS: list[Form] = []


def oracle(name: str, fn, **params) -> None:
    """Register ``fn(data, name, **params)`` (returns (form, Assembler) programs) with 4 examples."""
    FORMS.append(Form(name, EXAMPLES, functools.partial(fn, form=name, **params)))


def _move_wide(data, form, sf, mn):
    ops = st.tuples(gp(sf), st.integers(0, 0xFFFF), st.sampled_from([0, 16, 32, 48][: 4 if sf else 2]))
    return draw_run(data, form, mn, ops)


def _mov_register(data, form, sf):
    return draw_run(data, form, "mov", st.tuples(gp(sf), gp(sf)))


def _mov_sp(data, form):
    pairs = st.tuples(xregs(sp=True), xregs(zr=False)).flatmap(lambda t: st.sampled_from([t, t[::-1]]))
    return draw_run(data, form, "mov", pairs, max_size=32)


def _add_sub_immediate(data, form, sf, mn):
    rd = gp(sf, sp=not mn.endswith("s"))
    ops = st.tuples(rd, gp(sf, sp=True), st.integers(0, 4095), st.just("lsl"), st.sampled_from([0, 12]))
    return draw_run(data, form, mn, ops)


def _add_sub_shifted(data, form, sf, mn):
    r = gp(sf)
    ops = st.tuples(r, r, r, st.sampled_from(["lsl", "lsr", "asr"]), st.integers(0, 63 if sf else 31))
    return draw_run(data, form, mn, ops)


def _add_sub_extended(data, form, sf, mn):
    flags = mn.endswith("s")
    ext = data.draw(st.sampled_from(list(EXTENDS)), label=form)
    wide = EXTENDS[ext] & 3 == 3
    if not sf and wide:
        ext = "uxtw"
        wide = False
    rm = xregs() if sf and wide else wregs()
    ops = st.tuples(gp(sf, sp=not flags), gp(sf, sp=True), rm, st.just(ext), st.integers(0, 4))
    return draw_run(data, form, mn, ops)


def _cmp(data, form, sf):
    imms = data.draw(OPS(st.tuples(gp(sf, sp=True), st.integers(0, 4095)), min_size=1, max_size=24), label=form)
    regs = data.draw(
        OPS(
            st.tuples(gp(sf), gp(sf), st.sampled_from(["lsl", "lsr", "asr"]), st.integers(0, 31)),
            min_size=1,
            max_size=24,
        ),
        label=form,
    )
    return [program(form, [("cmp", o) for o in imms] + [("cmp", o) for o in regs])]


def _multiply(data, form, sf, mn, nops):
    return draw_run(data, form, mn, st.tuples(*[gp(sf)] * nops))


def _shift_immediate_and_register(data, form, sf, mn):
    imm = draw_run(data, f"{mn}.imm.{xw(sf)}", mn, st.tuples(gp(sf), gp(sf), st.integers(0, 63 if sf else 31)), 32)
    return imm + draw_run(data, f"{mn}.reg.{xw(sf)}", mn, st.tuples(gp(sf), gp(sf), gp(sf)), max_size=32)


def _logical_shifted(data, form, sf, mn):
    r = gp(sf)
    ops = st.tuples(r, r, r, st.sampled_from(["lsl", "lsr", "asr", "ror"]), st.integers(0, 63 if sf else 31))
    return draw_run(data, form, mn, ops)


def _csel(data, form, sf):
    conds = [c for c in CONDITIONS if len(c) == 2]
    return draw_run(data, form, "csel", st.tuples(gp(sf), gp(sf), gp(sf), st.sampled_from(conds)))


def offsets(bits: int):
    lim = 4 << (bits - 1)
    return st.integers(-lim // 4, lim // 4 - 1).map(lambda i: 4 * i)


def _b_bl(data, form, mn):
    return draw_run(data, form, mn, st.tuples(offsets(26)))


def _adr(data, form):
    return draw_run(data, form, "adr", st.tuples(xregs(), st.integers(-(1 << 20), (1 << 20) - 1)))


def _b_cond(data, form):
    return draw_run(data, form, "b_cond", st.tuples(st.sampled_from(list(CONDITIONS)), offsets(19)))


def _cbz(data, form, sf, mn):
    return draw_run(data, form, mn, st.tuples(gp(sf), offsets(19)))


def _tbz(data, form, mn):
    xs = data.draw(OPS(st.tuples(xregs(), st.integers(0, 63), offsets(14)), min_size=1, max_size=32), label=form)
    ws = data.draw(OPS(st.tuples(wregs(), st.integers(0, 31), offsets(14)), min_size=1, max_size=16), label=form)
    return [program(form, [(mn, o) for o in xs + ws])]


def _branch_register_nop_svc(data, form):
    regs = data.draw(OPS(xregs(), min_size=1, max_size=16), label=form)
    return [
        program("br", [("br", (r,)) for r in regs]),
        program("blr", [("blr", (r,)) for r in regs]),
        program("ret", [("ret", (r,)) for r in regs] + [("ret", ())]),
        program("nop", [("nop", ())]),
        program("svc", [("svc", (i,)) for i in data.draw(OPS(st.integers(0, 0xFFFF), min_size=1, max_size=8))]),
    ]


KINDS = {"x": 3, "w": 2, "b": 0, "h": 1, "s": 2, "d": 3, "q": 4}


def rt_of(kind: str):
    if kind == "x":
        return xregs()
    if kind == "w":
        return wregs()
    return st.integers(0, 31).map(lambda i: ScalarReg(i, kind))


def _ldr_str_forms(data, form, kind, mn):
    log2 = KINDS[kind]
    scale = 1 << log2
    base = xregs(sp=True)
    rt = rt_of(kind)
    uoff = st.tuples(rt, st.builds(mem, base, st.integers(0, 4095).map(lambda i: i * scale)))
    out = draw_run(data, f"{mn}.uoff.{kind}", mn, uoff, max_size=32)
    unscaled = st.tuples(rt, st.builds(mem, base, st.integers(-256, -1)))
    out += draw_run(data, f"{mn[:2]}ur.{kind}", mn, unscaled, max_size=16)
    idx = data.draw(
        OPS(
            st.tuples(rt, st.builds(pre, base, st.integers(-256, 255)) | st.builds(post, base, st.integers(-256, 255))),
            min_size=1,
            max_size=32,
        ),
        label=f"{mn}.prepost.{kind}",
    )
    if kind in "xw":  # writeback into the transferred register is unpredictable (EncodingError, tested below)
        idx = [o for o in idx if o[0].idx != o[1].base.idx] or [(XReg(1) if kind == "x" else WReg(1), pre(XReg(2), 8))]
    out.append(program(f"{mn}.prepost.{kind}", [(mn, o) for o in idx]))
    regoff = st.one_of(
        st.builds(mem, base, xregs(), st.sampled_from(["lsl", "sxtx"]), st.sampled_from([None, log2])),
        st.builds(mem, base, wregs(), st.sampled_from(["uxtw", "sxtw"]), st.sampled_from([None, log2])),
    )
    return out + draw_run(data, f"{mn}.regoff.{kind}", mn, st.tuples(rt, regoff), max_size=32)


def _ldrb_strb(data, form, mn):
    base = xregs(sp=True)
    addr = st.one_of(
        st.builds(mem, base, st.integers(0, 4095)),
        st.builds(pre, base, st.integers(-256, 255)),
        st.builds(post, base, st.integers(-256, 255)),
        st.builds(mem, base, xregs(), st.just("lsl"), st.just(0)),
        st.builds(mem, base, xregs()),
    )
    ops = data.draw(OPS(st.tuples(wregs(), addr), min_size=1, max_size=48), label=form)
    ops = [o for o in ops if o[1].mode == "offset" or o[0].idx != o[1].base.idx] or [(WReg(0), mem(XReg(1)))]
    return [program(form, [(mn, o) for o in ops])]


def _ldp_stp(data, form, kind, mn, mode):
    scale = 1 << KINDS[kind]
    make = {"offset": mem, "pre": pre, "post": post}[mode]
    addr = st.builds(make, xregs(sp=True), st.integers(-64, 63).map(lambda i: i * scale))
    ops = data.draw(OPS(st.tuples(rt_of(kind), rt_of(kind), addr), min_size=1, max_size=48), label=form)
    if mn == "ldp":  # identical registers in a load pair are unpredictable and llvm rejects them
        ops = [
            o
            for o in ops
            if o[0] != o[1] and not (mode != "offset" and kind in "xw" and o[2].base.idx in (o[0].idx, o[1].idx))
        ]
    elif mode != "offset" and kind in "xw":
        ops = [o for o in ops if o[2].base.idx not in (o[0].idx, o[1].idx)]
    return [program(form, [(mn, o) for o in ops])] if ops else []


def _prfm(data, form):
    uoff = st.builds(mem, xregs(sp=True), st.integers(0, 4095).map(lambda i: 8 * i))
    out = draw_run(data, "prfm.uoff", "prfm", st.tuples(st.sampled_from(list(PRFOPS)), uoff))
    regoff = st.builds(mem, xregs(sp=True), xregs(), st.just("lsl"), st.sampled_from([None, 3]))
    return out + draw_run(data, "prfm.regoff", "prfm", st.tuples(st.sampled_from(list(PRFOPS)), regoff), max_size=24)


for _sf in (1, 0):
    for _mn in ("movz", "movk", "movn"):
        oracle(f"{_mn}.{xw(_sf)}", _move_wide, sf=_sf, mn=_mn)
    oracle(f"mov.reg.{xw(_sf)}", _mov_register, sf=_sf)
    for _mn in ("add", "adds", "sub", "subs"):
        oracle(f"{_mn}.imm.{xw(_sf)}", _add_sub_immediate, sf=_sf, mn=_mn)
        oracle(f"{_mn}.shifted.{xw(_sf)}", _add_sub_shifted, sf=_sf, mn=_mn)
        oracle(f"{_mn}.extended.{xw(_sf)}", _add_sub_extended, sf=_sf, mn=_mn)
    oracle(f"cmp.{xw(_sf)}", _cmp, sf=_sf)
    for _mn, _nops in (("mul", 3), ("madd", 4), ("msub", 4), ("udiv", 3), ("sdiv", 3)):
        oracle(f"{_mn}.{xw(_sf)}", _multiply, sf=_sf, mn=_mn, nops=_nops)
    for _mn in ("lsl", "lsr", "asr"):
        oracle(f"{_mn}.imm+reg.{xw(_sf)}", _shift_immediate_and_register, sf=_sf, mn=_mn)
    for _mn in ("and_", "orr", "eor", "ands"):
        oracle(f"{_mn.rstrip('_')}.reg.{xw(_sf)}", _logical_shifted, sf=_sf, mn=_mn)
    oracle(f"csel.{xw(_sf)}", _csel, sf=_sf)
    for _mn in ("cbz", "cbnz"):
        oracle(f"{_mn}.{xw(_sf)}", _cbz, sf=_sf, mn=_mn)
oracle("mov.sp", _mov_sp)
for _mn in ("b", "bl"):
    oracle(_mn, _b_bl, mn=_mn)
oracle("adr", _adr)
oracle("b.cond", _b_cond)
for _mn in ("tbz", "tbnz"):
    oracle(_mn, _tbz, mn=_mn)
oracle("br+blr+ret+nop+svc", _branch_register_nop_svc)
for _mn in ("ldr", "str"):
    for _kind in KINDS:
        oracle(f"{_mn}.{_kind} (uoff, unscaled, prepost, regoff)", _ldr_str_forms, kind=_kind, mn=_mn)
for _mn in ("ldrb", "strb"):
    oracle(_mn, _ldrb_strb, mn=_mn)
for _mode in ("offset", "pre", "post"):
    for _mn in ("ldp", "stp"):
        for _kind in ("x", "w", "s", "d", "q"):
            oracle(f"{_mn}.{_mode}.{_kind}", _ldp_stp, kind=_kind, mn=_mn, mode=_mode)
oracle("prfm.uoff+regoff", _prfm)


@pytest.mark.parametrize("chunk", chunk_params(FORMS, 24))
def test_forms(chunk) -> None:
    check_chunk(chunk)


def test_form_names_unique() -> None:
    assert len({f.name for f in FORMS}) == len(FORMS) >= 119


@settings(max_examples=30)
@given(value=st.integers(-(1 << 63), (1 << 64) - 1) | st.sampled_from([0, -1, 1 << 63, 0xFFFF0000FFFF]), rd=xregs())
def test_mov_constant_materialises_value(value, rd):
    """Any 64-bit constant becomes movz/movn+movk; llvm agrees and the value is right."""
    a = Assembler()
    a.mov(rd, value)
    assert len(a) <= 4
    assert_llvm_matches(a, "mov.imm64")
    # evaluate the sequence
    acc = 0
    for w in a.words:
        opc, hw, imm16 = w >> 29 & 3, w >> 21 & 3, w >> 5 & 0xFFFF
        if opc == 2:
            acc = imm16 << 16 * hw
        elif opc == 0:
            acc = ~(imm16 << 16 * hw) & (1 << 64) - 1
        else:
            acc = acc & ~(0xFFFF << 16 * hw) | imm16 << 16 * hw
    assert acc == value & (1 << 64) - 1


# -- illegal operands -------------------------------------------------------------------

X0, X1, W1 = XReg(0), XReg(1), WReg(1)
SP, XZR = XReg(31, sp=True), XReg(31)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda a: a.add(X0, X1, 4096), "imm must be in 0..4095"),
        (lambda a: a.add(X0, X1, 1, "lsl", 8), "shift amount must be in 0..12 in steps of 12"),
        (lambda a: a.add(X0, W1, 1), "all be X or all be W"),
        (lambda a: a.adds(SP, X1, 1), "rd must be a register other than sp"),
        (lambda a: a.movz(W1, 1, 32), "shift must be in 0..16 in steps of 16"),
        (lambda a: a.movk(X0, 0x10000), "imm16 must be in 0..65535"),
        (lambda a: a.mov(W1, 1 << 32), "imm must be an int in"),
        (lambda a: a.lsl(X0, X1, 64), "shift must be in 0..63"),
        (lambda a: a.ldr(X0, mem(X1, 32761)), "offset must be a multiple of 8 in 0..32760 or in -256..255"),
        (lambda a: a.ldr(X0, pre(X1, 256)), "offset must be in -256..255"),
        (lambda a: a.ldr(X0, mem(XZR, 8)), "base must be a register other than xzr"),
        (lambda a: a.ldr(X0, mem(X1, X0, "lsl", 2)), "index shift must be 0 or 3"),
        (lambda a: a.ldr(X0, mem(X1, W1, "lsl")), "index extend"),
        (lambda a: a.ldp(X0, W1, mem(X1)), "two registers of one kind"),
        (lambda a: a.ldp(X0, X1, mem(X1, 4)), "offset must be in -512..504 in steps of 8"),
        (lambda a: a.ldp(X0, X0, mem(X1)), "rt2 must be a register other than rt"),
        (lambda a: a.stp(X0, X1, pre(X1, 16)), "other than the written-back base"),
        (lambda a: a.ldr(X0, post(X0, 8)), "other than the written-back base"),
        (lambda a: a.b(2), "multiple of 4"),
        (lambda a: a.b_cond("eq", 1 << 20), "branch offset"),
        (lambda a: a.tbz(W1, 32, 0), "bit must be in 0..31"),
        (lambda a: a.csel(X0, X0, X0, "first"), "condition must be one of"),
        (lambda a: a.b_cond("xx", 0), "condition must be one of"),
        (lambda a: a.prfm("pldl4keep", mem(X0)), "prfop must be one of"),
        (lambda a: a.svc(1 << 16), "imm16 must be in 0..65535"),
        (lambda a: a.br(W1), "rn must be an X register"),
    ],
)
def test_illegal_operands_raise(call, needle):
    with pytest.raises(EncodingError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        call(Assembler())


def test_labels_forward_backward_and_listing_reassembles():
    """A program with labels: bytes equal llvm-mc's object code for the listing."""
    from asm import llvm

    a = Assembler()
    fwd = a.new_label("done")
    top = a.label("top")
    a.cbz(X0, fwd)
    a.sub(X0, X0, 1)
    a.tbnz(X1, 3, top)
    a.b_ne(top)
    a.b(top)
    a.adr(X1, fwd)
    a.adr(X1, top)
    a.bind(fwd)
    a.ret()
    assert llvm.assemble(a.listing()) == a.code()
    with pytest.raises(EncodingError, match="already bound"):
        a.bind(fwd)
    b = Assembler()
    b.b(b.new_label("nowhere"))
    with pytest.raises(EncodingError, match="never bound"):
        b.code()
