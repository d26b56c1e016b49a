"""Every x86-64 encoder form against llvm-mc, byte for byte.

Every form (mnemonic x operand form x width) draws, in each hypothesis
example, a list of up to 48 instructions with operands over their full legal
ranges into an Assembler of its own; the forms are checked in chunks, all
programs of a chunk's example compared with one llvm-mc run (a mismatch names
its form).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import strategies as st

from asm.x86_64 import Assembler
from asm.x86_64.registers import cl
from asm.x86_64.simd import ARITH3, ARITH3_IMM, MOVES
from tests.asm.oracle import Form, check_chunk, chunk_params
from tests.asm.x86_64.strategies import (
    bcsts,
    gpr32s,
    gpr64s,
    gprs,
    int_range,
    kregs,
    masked,
    mems,
    vregs,
)


@dataclass(frozen=True)
class Case:
    name: str
    ops: st.SearchStrategy
    method: str

    def __str__(self) -> str:
        return self.name


#: hypothesis examples per form; every form is drawn in each example of its chunk
EXAMPLES = 4
#: forms per llvm-mc run
CHUNK = 24


def draw_program(form: Case, data) -> list[tuple[str, Assembler]]:
    """Draw 1..48 operand tuples for ``form`` and emit them into an Assembler of its own."""
    ops = data.draw(st.lists(form.ops, min_size=1, max_size=48), label=form.name)
    a = Assembler()
    emit = getattr(a, form.method)
    for o in ops:
        emit(*o)
    return [(form.name, a)]


def oracle_forms(cases: list[Case], examples: int = EXAMPLES) -> list[Form]:
    """Each case as an oracle `Form` with ``examples`` hypothesis examples."""
    return [Form(c.name, examples, lambda data, c=c: draw_program(c, data)) for c in cases]


CASES: list[Case] = []


def case(name: str, ops: st.SearchStrategy, method: str) -> None:
    CASES.append(Case(name, ops, method))


IMM = {64: int_range(-(1 << 31), (1 << 31) - 1), 32: int_range(-(1 << 31), (1 << 32) - 1)}

# -- general purpose ------------------------------------------------------------------------
for mn in ["add", "sub", "and", "or", "xor", "cmp"]:
    meth = mn + "_" if mn in ("and", "or") else mn
    for w in (64, 32):
        case(f"{mn} r{w}, r{w}", st.tuples(gprs(w), gprs(w)), meth)
        case(f"{mn} r{w}, imm", st.tuples(gprs(w), IMM[w]), meth)
        case(f"{mn} r{w}, m{w}", st.tuples(gprs(w), mems(w // 8)), meth)
        case(f"{mn} m{w}, r{w}", st.tuples(mems(w // 8), gprs(w)), meth)
        case(f"{mn} m{w}, imm", st.tuples(mems(w // 8, sized=True), IMM[w]), meth)

for w in (64, 32):
    case(f"mov r{w}, r{w}", st.tuples(gprs(w), gprs(w)), "mov")
    case(f"mov r{w}, m{w}", st.tuples(gprs(w), mems(w // 8)), "mov")
    case(f"mov m{w}, r{w}", st.tuples(mems(w // 8), gprs(w)), "mov")
    case(f"mov m{w}, imm", st.tuples(mems(w // 8, sized=True), IMM[w]), "mov")
    case(f"lea r{w}, m", st.tuples(gprs(w), mems(None)), "lea")
    case(f"imul r{w}, r{w}", st.tuples(gprs(w), gprs(w)), "imul")
    case(f"imul r{w}, m{w}", st.tuples(gprs(w), mems(w // 8)), "imul")
    case(f"imul r{w}, r{w}, imm", st.tuples(gprs(w), gprs(w), IMM[w]), "imul")
    case(f"imul r{w}, m{w}, imm", st.tuples(gprs(w), mems(w // 8), IMM[w]), "imul")
    case(f"test r{w}, r{w}", st.tuples(gprs(w), gprs(w)), "test")
    case(f"test r{w}, imm", st.tuples(gprs(w), IMM[w]), "test")
    case(f"test m{w}, r{w}", st.tuples(mems(w // 8), gprs(w)), "test")
    case(f"test r{w}, m{w}", st.tuples(gprs(w), mems(w // 8)), "test")
    case(f"test m{w}, imm", st.tuples(mems(w // 8, sized=True), IMM[w]), "test")
    for mn in ("inc", "dec", "div", "neg"):
        case(f"{mn} r{w}", st.tuples(gprs(w)), mn)
        case(f"{mn} m{w}", st.tuples(mems(w // 8, sized=True)), mn)
    for mn in ("shl", "shr", "sar"):
        case(f"{mn} r{w}, imm", st.tuples(gprs(w), int_range(0, 255)), mn)
        case(f"{mn} r{w}, cl", st.tuples(gprs(w), st.just(cl)), mn)
        case(f"{mn} m{w}, imm", st.tuples(mems(w // 8, sized=True), int_range(0, 255)), mn)
        case(f"{mn} m{w}, cl", st.tuples(mems(w // 8, sized=True), st.just(cl)), mn)
case("mov r64, imm64", st.tuples(gpr64s(), int_range(-(1 << 63), (1 << 64) - 1, (1 << 32, -(1 << 32)))), "mov")
case("mov r32, imm32", st.tuples(gpr32s(), IMM[32]), "mov")
for mn in ("push", "pop"):
    case(f"{mn} r64", st.tuples(gpr64s()), mn)
    case(f"{mn} m64", st.tuples(mems(8)), mn)
for mn in ("jmp", "call"):
    case(f"{mn} r64", st.tuples(gpr64s()), mn)
    case(f"{mn} m64", st.tuples(mems(8)), mn)
for mn in ("prefetcht0", "prefetcht1", "prefetcht2", "prefetchnta"):
    case(f"{mn} m8", st.tuples(mems(1)), mn)
case("ret imm16", st.tuples(int_range(0, 0xFFFF)), "ret")
case("ret", st.just(()), "ret")
case("vzeroupper", st.just(()), "vzeroupper")


# -- VEX / EVEX -----------------------------------------------------------------------------
@st.composite
def vform(draw, *, vex: bool, evex: bool, src2: str, esize: int = 4, nsrc: int = 2, zero: bool = True):
    """(dst, [src1,] src2) for a full-vector instruction: a VEX draw (xmm/ymm 0..15, no mask) or an
    EVEX draw (xmm/ymm/zmm 0..31, masks). ``src2`` is "r" (register), "m" (memory) or "b" (broadcast)."""
    use_vex = vex and src2 != "b" and (not evex or draw(st.booleans()))
    if use_vex:
        bits, top, dst = draw(st.sampled_from([128, 256])), 15, None
    else:
        bits, top = draw(st.sampled_from([128, 256, 512])), 31
        dst = draw(masked(draw(vregs(bits)), zero=zero))
    if dst is None:
        dst = draw(vregs(bits, top))
    srcs = [draw(vregs(bits, top)) for _ in range(nsrc - 1)]
    if src2 == "r":
        last = draw(vregs(bits, top))
    elif src2 == "m":
        last = draw(mems(bits // 8))
    else:
        last = draw(bcsts(esize))
    return (dst, *srcs, last)


for mn, op in ARITH3.items():
    vex_ok = op.wv is not None
    for form, label in (("r", "v, v, v"), ("m", "v, v, m"), ("b", "v, v, m{1toN}")):
        case(f"{mn} {label}", vform(vex=vex_ok, evex=True, src2=form, esize=op.esize), mn)

for mn, op in ARITH3_IMM.items():
    for form, label in (("r", "v, v, v, imm8"), ("m", "v, v, m, imm8"), ("b", "v, v, m{1toN}, imm8")):
        strat = st.tuples(vform(vex=True, evex=True, src2=form, esize=op.esize), int_range(0, 255))
        case(f"{mn} {label}", strat.map(lambda t: (*t[0], t[1])), mn)

for mn in MOVES:
    case(f"{mn} v, v", vform(vex=True, evex=True, src2="r", nsrc=1), mn)
    case(f"{mn} v, m", vform(vex=True, evex=True, src2="m", nsrc=1), mn)


@st.composite
def vstore(draw, widths=(128, 256, 512), masks: bool = True):
    use_vex = draw(st.booleans())
    bits = draw(st.sampled_from([w for w in widths if not use_vex or w < 512]))
    src = draw(vregs(bits, 15 if use_vex else 31))
    dst = draw(mems(bits // 8))
    if masks and not use_vex:
        dst = draw(masked(dst, zero=False))
    return dst, src


for mn in MOVES:
    case(f"{mn} m, v", vstore(), mn)
for mn in ("vmovntps", "vmovntpd"):  # non-temporal stores: no masking
    case(f"{mn} m, v", vstore(masks=False), mn)


@st.composite
def vbroadcast(draw, esize: int, src: str):
    use_vex = draw(st.booleans())
    widths = [128, 256] if esize == 4 else [256]
    if use_vex:
        bits, top, dst = draw(st.sampled_from(widths)), 15, None
    else:
        bits, top = draw(st.sampled_from([*widths, 512])), 31
        dst = draw(masked(draw(vregs(bits))))
    dst = dst if dst is not None else draw(vregs(bits, top))
    return dst, draw(vregs(128, top)) if src == "r" else draw(mems(esize))


for mn, es in (("vbroadcastss", 4), ("vbroadcastsd", 8)):
    case(f"{mn} v, xmm", vbroadcast(es, "r"), mn)
    case(f"{mn} v, m", vbroadcast(es, "m"), mn)


@st.composite
def vcmp(draw, src2: str, esize: int):
    bits = draw(st.sampled_from([128, 256, 512]))
    dst = draw(kregs())
    if draw(st.booleans()):
        dst = dst.mask(draw(kregs(1)))
    src1 = draw(vregs(bits))
    last = {"r": vregs(bits), "m": mems(bits // 8), "b": bcsts(esize)}[src2]
    return dst, src1, draw(last), draw(int_range(0, 31))


for mn, es in (("vcmpps", 4), ("vcmppd", 8)):
    for form, label in (("r", "k, v, v, imm"), ("m", "k, v, m, imm"), ("b", "k, v, m{1toN}, imm")):
        case(f"{mn} {label}", vcmp(form, es), mn)

Y15, X15 = vregs(256, 15), vregs(128, 15)
case("vperm2f128 ymm, ymm, ymm, imm8", st.tuples(Y15, Y15, Y15, int_range(0, 255)), "vperm2f128")
case("vperm2f128 ymm, ymm, m256, imm8", st.tuples(Y15, Y15, mems(32), int_range(0, 255)), "vperm2f128")
case("vinsertf128 ymm, ymm, xmm, imm", st.tuples(Y15, Y15, X15, st.integers(0, 1)), "vinsertf128")
case("vinsertf128 ymm, ymm, m128, imm", st.tuples(Y15, Y15, mems(16), st.integers(0, 1)), "vinsertf128")
case("vextractf128 xmm, ymm, imm", st.tuples(X15, Y15, st.integers(0, 1)), "vextractf128")
case("vextractf128 m128, ymm, imm", st.tuples(mems(16), Y15, st.integers(0, 1)), "vextractf128")


@st.composite
def vinsert(draw, part: int, widths: tuple[int, ...], mem: bool):
    bits = draw(st.sampled_from(widths))
    dst = draw(masked(draw(vregs(bits))))
    src2 = draw(mems(part // 8)) if mem else draw(vregs(part))
    return dst, draw(vregs(bits)), src2, draw(st.integers(0, bits // part - 1))


@st.composite
def vextract(draw, part: int, widths: tuple[int, ...], mem: bool):
    bits = draw(st.sampled_from(widths))
    dst = draw(masked(draw(mems(part // 8)), zero=False)) if mem else draw(masked(draw(vregs(part))))
    return dst, draw(vregs(bits)), draw(st.integers(0, bits // part - 1))


for mn, part, widths in (("f32x4", 128, (256, 512)), ("f32x8", 256, (512,)), ("f64x4", 256, (512,))):
    case(f"vinsert{mn} v, v, v, imm", vinsert(part, widths, False), f"vinsert{mn}")
    case(f"vinsert{mn} v, v, m, imm", vinsert(part, widths, True), f"vinsert{mn}")
    case(f"vextract{mn} v, v, imm", vextract(part, widths, False), f"vextract{mn}")
    case(f"vextract{mn} m, v, imm", vextract(part, widths, True), f"vextract{mn}")

for mn, size in (("kmovw", 2), ("kmovb", 1)):
    case(f"{mn} k, r32", st.tuples(kregs(), gpr32s()), mn)
    case(f"{mn} r32, k", st.tuples(gpr32s(), kregs()), mn)
    case(f"{mn} k, k", st.tuples(kregs(), kregs()), mn)
    case(f"{mn} k, m", st.tuples(kregs(), mems(size)), mn)
    case(f"{mn} m, k", st.tuples(mems(size), kregs()), mn)


@pytest.mark.parametrize("chunk", chunk_params(oracle_forms(CASES), CHUNK))
def test_forms(chunk) -> None:
    check_chunk(chunk, isa="x86_64")


def test_case_names_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES) >= 80
