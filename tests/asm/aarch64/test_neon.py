"""NEON encoders against llvm-mc, operands over their full ranges.

Every encoding form draws, in each hypothesis example, its operand lists into
an Assembler of its own; the forms are checked in chunks (`tests.asm.oracle`),
all programs of a chunk's example compared with one llvm-mc run.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from asm import EncodingError
from asm.aarch64 import Assembler, mem, post, pre, s0, sp, v0, v1, v2, v3, v31, w1, w2, x0, x1, x2, xzr
from asm.aarch64.registers import ELEM_BYTES, ScalarReg, VElem, VElemGroup, VReg
from tests.asm.aarch64.strategies import vecs, vnums, wregs, xregs
from tests.asm.oracle import Form, assert_llvm_matches, check_chunk, chunk_params

FP = ("2s", "4s", "2d")
BYTES = ("8b", "16b")
ALL = ("8b", "16b", "4h", "8h", "2s", "4s", "1d", "2d")
NO_1D = ("8b", "16b", "4h", "8h", "2s", "4s", "2d")


# -- local strategies -------------------------------------------------------------------
def elems(esize: str) -> st.SearchStrategy[VElem]:
    """Indexed elements ``v<n>.<esize>[i]`` over every register and index."""
    lanes = 16 // ELEM_BYTES[esize]
    return st.builds(lambda n, i: VElem(n, esize, i), vnums(), st.integers(0, lanes - 1))


def scalars(esize: str) -> st.SearchStrategy[ScalarReg]:
    return vnums().map(lambda n: ScalarReg(n, esize))


def groups_2h() -> st.SearchStrategy[VElemGroup]:
    return st.builds(lambda n, i: VElemGroup(n, "2h", i), vnums(), st.integers(0, 3))


def reglists(arrangement: str, n: int) -> st.SearchStrategy[list]:
    """``n`` consecutive registers (modulo 32) with one arrangement."""
    attr = arrangement[-1] + arrangement[:-1]
    return vnums().map(lambda i: [getattr(VReg((i + k) % 32), attr) for k in range(n)])


def lanelists(esize: str, n: int) -> st.SearchStrategy[list]:
    lanes = 16 // ELEM_BYTES[esize]
    return st.builds(lambda i, j: [VElem((i + k) % 32, esize, j) for k in range(n)], vnums(), st.integers(0, lanes - 1))


def addresses(mode: str, transfer: int) -> st.SearchStrategy:
    """``[xn|sp]`` ("none"), ``[xn|sp], #transfer`` ("imm") or ``[xn|sp], xm`` ("reg")."""
    bases = xregs(sp=True)
    if mode == "none":
        return bases.map(mem)
    if mode == "imm":
        return bases.map(lambda b: post(b, transfer))
    return st.builds(post, bases, xregs(zr=False))


def _method(name: str):
    """``Assembler.<name>`` (shared mnemonics dispatch on operand type)."""

    def call(a: Assembler, *args, **kwargs):
        return getattr(a, name)(*args, **kwargs)

    return call


def _program(
    data, form: str, name: str, ops: st.SearchStrategy, max_size: int = 48, first: tuple = ()
) -> list[tuple[str, Assembler]]:
    """Draw a list of operand tuples (after one drawn from each strategy in ``first``) and emit them."""
    seq = [data.draw(f, label=form) for f in first]
    seq += data.draw(st.lists(ops, min_size=0 if first else 1, max_size=max_size), label=form)
    a = Assembler()
    call = _method(name)
    for o in seq:
        if isinstance(o, dict):
            call(a, *o["args"], **o["kw"])
        else:
            call(a, *o)
    return [(form, a)]


#: every oracle form with its hypothesis example count; checked in chunks by `test_forms`
FORMS: list[Form] = []


def _cases(examples: int, *rows) -> None:
    """Register (form, mnemonic, operand strategy) rows with ``examples`` hypothesis examples each."""
    for form, name, ops in rows:
        FORMS.append(Form(form, examples, lambda data, f=form, n=name, o=ops: _program(data, f, n, o)))


# -- Advanced SIMD three same ---------------------------------------------------------
FP_THREE_SAME = ("fadd", "fsub", "fmul", "fdiv", "fmax", "fmin", "fmaxnm", "fminnm", "fmla", "fmls", "faddp")
LOGIC = (("and_", "and"), ("orr", "orr"), ("eor", "eor"), ("bic", "bic"), ("orn", "orn"))
LOGIC += (("bsl", "bsl"), ("bit", "bit"), ("bif", "bif"))

THREE_SAME = [(f"{mn}.vec.{t}", mn, st.tuples(vecs(t), vecs(t), vecs(t))) for mn in FP_THREE_SAME for t in FP]
THREE_SAME += [(f"{text}.vec.{t}", mn, st.tuples(vecs(t), vecs(t), vecs(t))) for mn, text in LOGIC for t in BYTES]


INTS = ("8b", "16b", "4h", "8h", "2s", "4s")
THREE_SAME += [(f"mla.vec.{t}", "mla", st.tuples(vecs(t), vecs(t), vecs(t))) for t in INTS]

_cases(2, *THREE_SAME)


# -- by element -----------------------------------------------------------------------
BY_ELEMENT = []
for _mn in ("fmla", "fmls", "fmul"):
    BY_ELEMENT += [(f"{_mn}.elem.{t}", _mn, st.tuples(vecs(t), vecs(t), elems(t[-1]))) for t in FP]
    BY_ELEMENT += [(f"{_mn}.elem.scalar.{e}", _mn, st.tuples(scalars(e), scalars(e), elems(e))) for e in "sd"]

# integer mla by element: a halfword element's register is v0..v15 (its index takes the M bit)
H_ELEMS = st.builds(lambda n, i: VElem(n, "h", i), st.integers(0, 15), st.integers(0, 7))
BY_ELEMENT += [(f"mla.elem.{t}", "mla", st.tuples(vecs(t), vecs(t), elems("s"))) for t in ("2s", "4s")]
BY_ELEMENT += [(f"mla.elem.{t}", "mla", st.tuples(vecs(t), vecs(t), H_ELEMS)) for t in ("4h", "8h")]

_cases(3, *BY_ELEMENT)


# -- two-register misc, pairwise ------------------------------------------------------
TWO_REG = [(f"{mn}.vec.{t}", mn, st.tuples(vecs(t), vecs(t))) for mn in ("fabs", "fneg", "fsqrt") for t in FP]
TWO_REG += [
    ("fcvtl.4s", "fcvtl", st.tuples(vecs("4s"), vecs("4h"))),
    ("fcvtl.2d", "fcvtl", st.tuples(vecs("2d"), vecs("2s"))),
    ("fcvtl2.4s", "fcvtl2", st.tuples(vecs("4s"), vecs("8h"))),
    ("fcvtl2.2d", "fcvtl2", st.tuples(vecs("2d"), vecs("4s"))),
    ("fcvtn.4h", "fcvtn", st.tuples(vecs("4h"), vecs("4s"))),
    ("fcvtn.2s", "fcvtn", st.tuples(vecs("2s"), vecs("2d"))),
    ("fcvtn2.8h", "fcvtn2", st.tuples(vecs("8h"), vecs("4s"))),
    ("fcvtn2.4s", "fcvtn2", st.tuples(vecs("4s"), vecs("2d"))),
    ("bfcvtn.4h", "bfcvtn", st.tuples(vecs("4h"), vecs("4s"))),
    ("bfcvtn2.8h", "bfcvtn2", st.tuples(vecs("8h"), vecs("4s"))),
    ("faddp.scalar.s", "faddp", st.tuples(scalars("s"), vecs("2s"))),
    ("faddp.scalar.d", "faddp", st.tuples(scalars("d"), vecs("2d"))),
]


_cases(3, *TWO_REG)


# -- permute, extract -----------------------------------------------------------------
PERMUTE = [
    (f"{mn}.{t}", mn, st.tuples(vecs(t), vecs(t), vecs(t)))
    for mn in ("zip1", "zip2", "uzp1", "uzp2", "trn1", "trn2")
    for t in NO_1D
]
PERMUTE += [(f"ext.{t}", "ext", st.tuples(vecs(t), vecs(t), vecs(t), st.integers(0, int(t[:-1]) - 1))) for t in BYTES]


_cases(2, *PERMUTE)


# -- copy: dup, ins, umov, smov, mov aliases -----------------------------------------
def _gp(esize: str) -> st.SearchStrategy:
    return xregs() if esize == "d" else wregs()


COPY = [(f"dup.elem.{t}", "dup", st.tuples(vecs(t), elems(t[-1]))) for t in NO_1D]
COPY += [(f"dup.gen.{t}", "dup", st.tuples(vecs(t), _gp(t[-1]))) for t in NO_1D]
COPY += [(f"dup.scalar.{e}", "dup", st.tuples(scalars(e), elems(e))) for e in "bhsd"]
COPY += [(f"mov.scalar.{e}", "mov", st.tuples(scalars(e), elems(e))) for e in "bhsd"]
COPY += [(f"ins.elem.{e}", "ins", st.tuples(elems(e), elems(e))) for e in "bhsd"]
COPY += [(f"ins.gen.{e}", "ins", st.tuples(elems(e), _gp(e))) for e in "bhsd"]
COPY += [(f"mov.elem.{e}", "mov", st.tuples(elems(e), elems(e))) for e in "bhsd"]
COPY += [(f"mov.gen.{e}", "mov", st.tuples(elems(e), _gp(e))) for e in "bhsd"]
COPY += [(f"umov.{e}", "umov", st.tuples(_gp(e), elems(e))) for e in "bhsd"]
COPY += [("mov.togen.s", "mov", st.tuples(wregs(), elems("s"))), ("mov.togen.d", "mov", st.tuples(xregs(), elems("d")))]
COPY += [(f"smov.w.{e}", "smov", st.tuples(wregs(), elems(e))) for e in "bh"]
COPY += [(f"smov.x.{e}", "smov", st.tuples(xregs(), elems(e))) for e in "bhs"]
COPY += [(f"mov.vec.{t}", "mov", st.tuples(vecs(t), vecs(t))) for t in BYTES]


_cases(2, *COPY)


# -- modified immediate ---------------------------------------------------------------
def _imm8_shift(t: str, shifts: tuple[int, ...], kind: str = "lsl"):
    return st.builds(
        lambda r, v, s: {"args": (r, v), "kw": {kind: s}}, vecs(t), st.integers(0, 255), st.sampled_from(shifts)
    )


_BYTEMASK = st.integers(0, 255).map(lambda m: sum(0xFF << (8 * i) for i in range(8) if m >> i & 1))
MODIMM = [(f"movi.{t}", "movi", st.tuples(vecs(t), st.integers(0, 255))) for t in BYTES]
MODIMM += [(f"movi.lsl.{t}", "movi", _imm8_shift(t, (0, 8))) for t in ("4h", "8h")]
MODIMM += [(f"movi.lsl.{t}", "movi", _imm8_shift(t, (0, 8, 16, 24))) for t in ("2s", "4s")]
MODIMM += [(f"movi.msl.{t}", "movi", _imm8_shift(t, (8, 16), "msl")) for t in ("2s", "4s")]
MODIMM += [
    ("movi.2d", "movi", st.tuples(vecs("2d"), _BYTEMASK)),
    ("movi.d", "movi", st.tuples(scalars("d"), _BYTEMASK)),
]
MODIMM += [("movi.zero.2d", "movi", st.tuples(vecs("2d"), st.just(0)))]
MODIMM += [(f"mvni.lsl.{t}", "mvni", _imm8_shift(t, (0, 8))) for t in ("4h", "8h")]
MODIMM += [(f"mvni.lsl.{t}", "mvni", _imm8_shift(t, (0, 8, 16, 24))) for t in ("2s", "4s")]
MODIMM += [(f"mvni.msl.{t}", "mvni", _imm8_shift(t, (8, 16), "msl")) for t in ("2s", "4s")]


_cases(2, *MODIMM)


# -- BF16 -----------------------------------------------------------------------------
BF16 = [
    ("bfdot.vec.2s", "bfdot", st.tuples(vecs("2s"), vecs("4h"), vecs("4h"))),
    ("bfdot.vec.4s", "bfdot", st.tuples(vecs("4s"), vecs("8h"), vecs("8h"))),
    ("bfdot.elem.2s", "bfdot", st.tuples(vecs("2s"), vecs("4h"), groups_2h())),
    ("bfdot.elem.4s", "bfdot", st.tuples(vecs("4s"), vecs("8h"), groups_2h())),
]
BF16 += [(f"{mn}.4s", mn, st.tuples(vecs("4s"), vecs("8h"), vecs("8h"))) for mn in ("bfmmla", "bfmlalb", "bfmlalt")]


_cases(3, *BF16)


# -- loads and stores: one test per (mnemonic, registers, arrangement); every listing mixes all three
# address modes ([xn|sp], [xn|sp], #transfer and [xn|sp], xm) --------------------------------------------------
MODES = ("none", "imm", "reg")


def _ldst(form: str, name: str, regs: st.SearchStrategy, transfer: int) -> None:
    """Register a load/store form (3 examples): one instruction per address mode, then up to 24 mixed."""
    first = tuple(st.tuples(regs, addresses(m, transfer)) for m in MODES)
    ops = st.tuples(regs, st.sampled_from(MODES).flatmap(lambda m: addresses(m, transfer)))
    FORMS.append(Form(form, 3, lambda data: _program(data, form, name, ops, max_size=24, first=first)))


def _ldst_multiple_cases():
    rows = []
    for mn in ("ld1", "st1"):
        for n in (1, 2, 3, 4):
            rows += [(mn, n, t) for t in ALL]
    for mn in ("ld2", "st2", "ld3", "st3", "ld4", "st4"):
        rows += [(mn, int(mn[2]), t) for t in NO_1D]
    return rows


for _mn, _n, _t in _ldst_multiple_cases():
    _transfer = _n * (16 if _t in ("16b", "8h", "4s", "2d") else 8)
    _regs = reglists(_t, _n) if _n > 1 else st.one_of(vecs(_t), reglists(_t, 1))
    _ldst(f"{_mn}.multi.{_n}x{_t}", _mn, _regs, _transfer)

for _t in ALL:
    for _n in (1, 2, 3, 4):
        _regs = reglists(_t, _n) if _n > 1 else st.one_of(vecs(_t), reglists(_t, 1))
        _ldst(f"ld{_n}r.{_t}", f"ld{_n}r", _regs, _n * ELEM_BYTES[_t[-1]])

for _e in "bhsd":
    for _mn in ("ld1", "st1", "ld2", "st2", "ld3", "st3", "ld4", "st4"):
        _n = int(_mn[2])
        _regs = lanelists(_e, _n) if _n > 1 else st.one_of(elems(_e), lanelists(_e, 1))
        _ldst(f"{_mn}.lane.{_e}", _mn, _regs, _n * ELEM_BYTES[_e])


@pytest.mark.parametrize("chunk", chunk_params(FORMS, 24))
def test_forms(chunk) -> None:
    check_chunk(chunk)


def test_form_names_unique() -> None:
    assert len({f.name for f in FORMS}) == len(FORMS) >= 374


# -- errors ---------------------------------------------------------------------------
ERRORS = [
    (lambda a: a.fadd(v0.h8, v1.h8, v2.h8), "fadd: rd must be a vector with arrangement 2s/4s/2d"),
    (lambda a: a.fadd(v0.s4, v1.s4, v2.s2), "arrangements must match"),
    (lambda a: a.fmla(v0.s4, v1.s4, v2.d2), "rm=v2.2d"),
    (lambda a: a.fmla(x0, x1, x1), "fmla: rd must be a vector"),
    (lambda a: a.fmla(v0.s4, v1.s4, v2.d[1]), "fmla: rd must be a vector with arrangement 2d"),
    (lambda a: a.fmul(s0, v1.S, v2.d[1]), "fmul: rd must be a scalar register d0..d31"),
    (lambda a: a.fmla(v0.s4, v1.s4, v2.s[4]), "v2.s must be in 0..3"),
    (lambda a: a.fmla(v0.d2, v1.d2, v2.d[2]), "v2.d must be in 0..1"),
    (lambda a: a.mla(v0.d2, v1.d2, v2.d2), "mla: rd must be a vector with arrangement 8b/16b/4h/8h/2s/4s"),
    (lambda a: a.mla(v0.d2, v1.d2, v2.d[1]), "mla: rm must be an indexed element of size h/s"),
    (lambda a: a.mla(v0.h8, v1.h8, v31.h[1]), "mla: rm must be v0..v15 for a halfword element"),
    (lambda a: a.mla(v0.s4, v1.s2, v2.s[1]), "arrangements must match"),
    (lambda a: _method("eor")(a, v0.s4, v1.s4, v2.s4), "eor: rd must be a vector with arrangement 8b/16b"),
    (lambda a: _method("orr")(a, v0.b16, v1.b16, v2.b8), "arrangements must match"),
    (lambda a: a.zip1(v0.d1, v1.d1, v2.d1), "zip1: rd must be a vector with arrangement"),
    (lambda a: a.trn2(v0.s4, v1.h8, v2.s4), "trn2: arrangements must match, got rd=v0.4s, rn=v1.8h"),
    (lambda a: a.ext(v0.b8, v1.b8, v2.b8, 8), "ext: index must be in 0..7"),
    (lambda a: a.ext(v0.b16, v1.b16, v2.b16, 16), "ext: index must be in 0..15"),
    (lambda a: a.faddp(s0, v1.d2), "faddp: rn must be a vector with arrangement 2s"),
    (lambda a: a.fcvtl(v0.s4, v1.h8), "fcvtl: rn must be a vector with arrangement 4h"),
    (lambda a: a.fcvtn2(v0.h4, v1.s4), "fcvtn2: rd must be a vector with arrangement 8h"),
    (lambda a: a.dup(v0.s4, x1), "dup: rn must be an indexed element of size s or a W register"),
    (lambda a: a.dup(v0.d1, v1.d[0]), "dup: rd must be a vector"),
    (lambda a: a.dup(v0.s4, v1.h[0]), "dup: rn must be"),
    (lambda a: a.ins(v0.s[1], v1.d[0]), "ins: rn must be an indexed element of size s"),
    (lambda a: a.ins(v0.d[1], w1), "ins: rn must be"),
    (lambda a: _method("mov")(a, w1, v1.h[0]), "mov: rn must be an indexed element of size s"),
    (lambda a: a.umov(x0, v1.s[0]), "umov: rn must be an indexed element of size d"),
    (lambda a: a.movi(v0.b16, 256), "movi: imm must be in 0..255"),
    (lambda a: a.movi(v0.d2, 0x12), "movi: imm must be a 64-bit value whose bytes"),
    (lambda a: a.movi(v0.s4, 1, lsl=4), "movi: lsl must be in 0..24 in steps of 8"),
    (lambda a: a.movi(v0.h8, 1, lsl=16), "movi: lsl must be in 0..8"),
    (lambda a: a.movi(v0.s4, 1, msl=24), "movi: msl must be in 8..16"),
    (lambda a: a.movi(v0.b16, 1, lsl=8), "movi: shift must be absent"),
    (lambda a: a.bfdot(v0.s4, v1.h4, v2.h4), "bfdot: rn must be a vector with arrangement 8h"),
    (lambda a: a.bfdot(v0.s4, v1.h8, v2.h[1]), "bfdot: rm must be"),
    (lambda a: a.bfdot(v0.s4, v1.h8, VElemGroup(2, "2h", 4)), "v2.2h must be in 0..3"),
    (lambda a: a.bfmmla(v0.s2, v1.h8, v2.h8), "bfmmla: rd must be a vector with arrangement 4s"),
    (lambda a: a.ld1([v0.s4, v1.s4], post(x0, 16)), "ld1: post-index must be #32"),
    (lambda a: a.ld1(v0.s2, post(x0, 16)), "ld1: post-index must be #8"),
    (lambda a: a.ld1([v0.s4, v2.s4], mem(x0)), "ld1: registers must be consecutive"),
    (lambda a: a.ld1([v0.s4, v1.s2], mem(x0)), "arrangements must match"),
    (lambda a: a.ld1([v0.s4] * 5, mem(x0)), "ld1: registers must be a list of 1/2/3/4"),
    (lambda a: a.ld1(v0.s4, pre(x0, 16)), "ld1: address must be"),
    (lambda a: a.ld1(v0.s4, mem(x0, 16)), "ld1: address must be"),
    (lambda a: a.ld1(v0.s4, mem(x0, x1)), "ld1: address must be"),
    (lambda a: a.ld1(v0.s4, post(x0, xzr)), "ld1: post-index register must be"),
    (lambda a: a.st1(v0.s4, post(x0, w2)), "st1: post-index must be"),
    (lambda a: a.st1(v0.s4, mem(xzr)), "st1: address base must be"),
    (lambda a: a.st1(v0.s4, x0), "st1: address must be"),
    (lambda a: a.ld2([v0.d1, v1.d1], mem(x0)), "ld2: register 0 must be a vector with arrangement"),
    (lambda a: a.ld3([v0.s4, v1.s4], mem(x0)), "ld3: registers must be a list of 3"),
    (lambda a: a.ld1r(v0.s4, post(x0, 16)), "ld1r: post-index must be #4"),
    (lambda a: a.ld4r([v0.h8, v1.h8, v2.h8, v3.h8], post(sp, 16)), "ld4r: post-index must be #8"),
    (lambda a: a.ld2([v0.s[1], v1.s[2]], mem(x0)), "ld2: register 1 must be v<n>.s[1]"),
    (lambda a: a.ld1(v31.s[1], post(x0, 8)), "ld1: post-index must be #4"),
]


@pytest.mark.parametrize("call, message", ERRORS, ids=[m for _, m in ERRORS])
def test_errors(call, message):
    with pytest.raises(EncodingError, match=None) as info:
        call(Assembler())
    assert message in str(info.value), str(info.value)


def test_nothing_emitted_on_error():
    a = Assembler()
    with pytest.raises(EncodingError):
        a.ld1([v0.s4, v1.s4], post(x0, 16))
    assert len(a) == 0


def test_listing_text():
    a = Assembler()
    a.fmla(v0.s4, v1.s4, v2.s[3])
    a.ld1([v31.s4, v0.s4], post(sp, x2))
    a.movi(v0.d2, 0)
    _method("mov")(a, v0.s[1], w2)
    a.bfdot(v0.s4, v1.h8, VElemGroup(2, "2h", 3))
    assert a.listing().split("\n") == [
        "    fmla v0.4s, v1.4s, v2.s[3]",
        "    ld1 { v31.4s, v0.4s }, [sp], x2",
        "    movi v0.2d, #0x0",
        "    mov v0.s[1], w2",
        "    bfdot v0.4s, v1.8h, v2.2h[3]",
    ]


def test_vector_aliases_reach_neon():
    a = Assembler()
    a.mov(v0.b16, v1.b16)
    a.orr(v0.b16, v1.b16, v2.b16)
    a.and_(v0.b8, v1.b8, v2.b8)
    a.eor(v0.b8, v1.b8, v2.b8)
    a.mov(v0.s[1], w2)
    a.mov(x0, x1)  # still the base module's
    a.mov(w1, 7)
    assert_llvm_matches(a, "mov.dispatch")
