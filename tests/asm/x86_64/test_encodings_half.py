"""``vcvtph2ps`` / ``vcvtps2ph`` (F16C VEX forms, AVX-512 EVEX forms) and ``vpinsrw`` / ``vpextrw``
(VEX; the conversion kernels' one-element tails) against llvm-mc, byte for byte, and their operand errors.

Same scheme as `test_encodings`: each form draws a list of instructions with operands over their
legal ranges (registers, every addressing form, masks, imm8 0..255) in every hypothesis example,
compared with one llvm-mc run per chunk.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from asm.errors import EncodingError
from asm.x86_64 import Assembler, dword, qword, word, xmmword, ymmword
from asm.x86_64.registers import KReg, Vec, rax, rdi
from tests.asm.oracle import check_chunk, chunk_params
from tests.asm.x86_64.strategies import gpr32s, int_range, masked, mems, vregs
from tests.asm.x86_64.test_encodings import CHUNK, Case, oracle_forms

IMM8 = int_range(0, 255, (0, 1, 3, 4, 7, 8))


@st.composite
def widen_operands(draw, form: str):
    """(dst, src) of vcvtph2ps: ``form`` "vex" (xmm/ymm 0..15) or "evex" (any width, 0..31, masks);
    the source a register or memory of half the destination's bytes."""
    if form == "vex":
        bits, top = draw(st.sampled_from([128, 256])), 15
        dst = draw(vregs(bits, top))
    else:
        bits, top = draw(st.sampled_from([128, 256, 512])), 31
        dst = draw(masked(draw(vregs(bits, top))))
    src = draw(st.one_of(vregs(max(bits // 2, 128), top), mems(bits // 16)))
    return dst, src


@st.composite
def narrow_operands(draw, form: str):
    """(dst, src, imm8) of vcvtps2ph: a register destination ({k}{z} for EVEX) or memory ({k})."""
    if form == "vex":
        bits, top = draw(st.sampled_from([128, 256])), 15
        src = draw(vregs(bits, top))
        dst = draw(st.one_of(vregs(128, top), mems(bits // 16)))
    else:
        bits, top = draw(st.sampled_from([128, 256, 512])), 31
        src = draw(vregs(bits, top))
        if draw(st.booleans()):
            dst = draw(masked(draw(vregs(max(bits // 2, 128), top))))
        else:
            dst = draw(masked(draw(mems(bits // 16)), zero=False))
    return dst, src, draw(IMM8)


@st.composite
def word_operands(draw, method: str):
    """vpinsrw (dst, src1, r32/m16, imm8) or vpextrw (r32/m16, xmm, imm8), xmm0..15."""
    other = draw(st.one_of(gpr32s(), mems(2)))
    if method == "vpinsrw":
        return draw(vregs(128, 15)), draw(vregs(128, 15)), other, draw(IMM8)
    return other, draw(vregs(128, 15)), draw(IMM8)


CASES = [Case(m, word_operands(m), m) for m in ("vpinsrw", "vpextrw")]
CASES += [Case(f"vcvtph2ps {f}", widen_operands(f), "vcvtph2ps") for f in ("vex", "evex")]
CASES += [Case(f"vcvtps2ph {f}", narrow_operands(f), "vcvtps2ph") for f in ("vex", "evex")]


@pytest.mark.parametrize("chunk", chunk_params(oracle_forms(CASES, 20), CHUNK))
def test_forms(chunk) -> None:
    check_chunk(chunk, isa="x86_64")


def test_kernel_forms() -> None:
    """The forms the conversion kernels use, as bytes (VEX for ymm, EVEX zmm with a memory operand)."""
    a = Assembler()
    a.vcvtph2ps(Vec(1, 256), xmmword(rax + 16))
    a.vcvtps2ph(xmmword(rdi), Vec(2, 256), 0)
    a.vcvtph2ps(Vec(0, 512).maskz(KReg(1)), ymmword(rax + 64))
    a.vcvtps2ph(ymmword(rdi + 32).mask(KReg(1)), Vec(3, 512), 0)
    assert a.instruction_bytes() == [
        bytes.fromhex("c4e27d134810"),
        bytes.fromhex("c4e37d1d1700"),
        bytes.fromhex("62f27dc9134002"),
        bytes.fromhex("62f37d491d5f0100"),
    ]


@pytest.mark.parametrize(
    "method, operands, word",
    [
        ("vcvtph2ps", (Vec(0, 256), Vec(1, 256)), "src"),  # source must be half the width
        ("vcvtph2ps", (Vec(0, 256), qword(rax)), "src"),  # m128 for a ymm destination
        ("vcvtph2ps", (rax, Vec(1, 128)), "dst"),
        ("vcvtph2ps", (Vec(0, 512), Vec(1, 128)), "src"),
        ("vcvtps2ph", (Vec(0, 256), Vec(1, 256), 0), "dst"),
        ("vcvtps2ph", (xmmword(rax), Vec(1, 128), 0), "dst"),  # m64 for an xmm source
        ("vcvtps2ph", (Vec(0, 128), Vec(1, 256), 256), "imm"),
        ("vcvtps2ph", (Vec(0, 128), Vec(1, 256), -1), "imm"),
        ("vcvtps2ph", (Vec(0, 128), rax, 0), "src"),
        ("vcvtps2ph", (xmmword(rax).mask(KReg(1), zero=True), Vec(1, 256), 0), "dst mask"),
        ("vpinsrw", (Vec(16, 128), Vec(1, 128), word(rax), 0), "dst"),  # VEX only
        ("vpinsrw", (Vec(0, 128), Vec(1, 128), rax, 0), "src2"),  # r32
        ("vpinsrw", (Vec(0, 128), Vec(1, 128), dword(rax), 0), "src2"),
        ("vpinsrw", (Vec(0, 128), Vec(1, 128), word(rax), 256), "imm"),
        ("vpextrw", (word(rax), Vec(1, 256), 0), "src"),
        ("vpextrw", (rax, Vec(1, 128), 0), "dst"),
        ("vpextrw", (word(rdi), Vec(1, 128), -1), "imm"),
    ],
)
def test_rejects_bad_operands(method, operands, word) -> None:
    with pytest.raises(EncodingError, match=word):
        getattr(Assembler(), method)(*operands)
