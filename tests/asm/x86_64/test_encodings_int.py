"""Integer vector forms (`asm.x86_64.simd_int`: vpaddd/q, vpmulld/q, vpmuludq, vpxor/d/q, vpsllq,
vpsrlq, vpshufd, vpbroadcastd/q) against llvm-mc, byte for byte.

Same scheme as `test_encodings`: each form draws, in every hypothesis example, a list of
instructions with operands over their full legal ranges (VEX and EVEX registers, masks, memory,
embedded broadcast where the form has one); the forms of a chunk are compared with one llvm-mc run.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from asm import EncodingError
from asm.x86_64 import Assembler, bcst, rax, ymm0, ymm16, zmm0, zmm1
from asm.x86_64.simd_int import BROADCASTS, INT3, SHIFT_IMM
from tests.asm.oracle import check_chunk, chunk_params
from tests.asm.x86_64.strategies import bcsts, int_range, masked, mems, vregs
from tests.asm.x86_64.test_encodings import CHUNK, Case, oracle_forms, vbroadcast, vform

CASES: list[Case] = []


def case(name: str, ops: st.SearchStrategy, method: str) -> None:
    CASES.append(Case(name, ops, method))


for mn, op in INT3.items():
    vex_ok, evex_ok = op.wv is not None, op.we is not None
    forms = [("r", "v, v, v"), ("m", "v, v, m")] + ([("b", "v, v, m{1toN}")] if evex_ok else [])
    for form, label in forms:
        case(f"{mn} {label}", vform(vex=vex_ok, evex=evex_ok, src2=form, esize=op.esize), mn)


@st.composite
def src_imm(draw, src: str, esize: int):
    """(dst, src, imm8) of a two-operand form with an immediate: VEX (xmm/ymm 0..15) or EVEX
    (xmm/ymm/zmm 0..31, masks); ``src`` "r", "m" or "b" (EVEX broadcast)."""
    use_vex = src != "b" and draw(st.booleans())
    if use_vex:
        bits = draw(st.sampled_from([128, 256]))
        dst, top = draw(vregs(bits, 15)), 15
    else:
        bits, top = draw(st.sampled_from([128, 256, 512])), 31
        dst = draw(masked(draw(vregs(bits))))
    last = {"r": vregs(bits, top), "m": mems(bits // 8), "b": bcsts(esize)}[src]
    return dst, draw(last), draw(int_range(0, 255))


for mn, (op, _) in SHIFT_IMM.items():
    for form, label in (("r", "v, v, imm8"), ("m", "v, m, imm8"), ("b", "v, m{1toN}, imm8")):
        case(f"{mn} {label}", src_imm(form, op.esize), mn)
for form, label in (("r", "v, v, imm8"), ("m", "v, m, imm8"), ("b", "v, m{1toN}, imm8")):
    case(f"vpshufd {label}", src_imm(form, 4), "vpshufd")


@st.composite
def vpbroadcast(draw, esize: int, src: str):
    """vpbroadcastd/q take xmm destinations too (vbroadcastsd does not)."""
    if esize == 8 and draw(st.booleans()):
        dst = draw(vregs(128, 15))
        return dst, draw(vregs(128, 15)) if src == "r" else draw(mems(esize))
    return draw(vbroadcast(4, src))[0], draw(vregs(128, 15)) if src == "r" else draw(mems(esize))


for mn, (_, es) in BROADCASTS.items():
    case(f"{mn} v, xmm", vpbroadcast(es, "r"), mn)
    case(f"{mn} v, m", vpbroadcast(es, "m"), mn)
    case(f"{mn} v(evex), xmm16..31", st.tuples(vregs(512), vregs(128, 31)), mn)


@pytest.mark.parametrize("chunk", chunk_params(oracle_forms(CASES), CHUNK))
def test_forms(chunk) -> None:
    check_chunk(chunk, isa="x86_64")


def test_case_names_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES) >= 30


def test_bad_operands_refused() -> None:
    a = Assembler()
    a.vpmullq(ymm0, ymm0, ymm0)  # AVX512DQ only: a ymm form is EVEX (AVX512VL)
    assert a.instruction_bytes()[-1][0] == 0x62
    with pytest.raises(EncodingError, match="vpxor"):  # VEX only: zmm needs vpxord/vpxorq
        a.vpxor(zmm0, zmm0, zmm1)
    with pytest.raises(EncodingError, match="vpxor"):
        a.vpxor(ymm16, ymm0, ymm0)
    with pytest.raises(EncodingError, match="imm"):
        a.vpsllq(ymm0, ymm0, 256)
    with pytest.raises(EncodingError, match="vpbroadcastd"):
        a.vpbroadcastd(ymm0, bcst(rax))  # a broadcast operand is no broadcast source
    with pytest.raises(EncodingError, match="vpbroadcastq"):
        a.vpbroadcastq(ymm0, ymm0)
