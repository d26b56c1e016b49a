"""``vpslld dst, src, imm8`` against llvm-mc, byte for byte (VEX register forms, EVEX zmm / 16..31 /
masked / memory / ``{1toN}`` forms), and its operand errors.

Same scheme as `test_encodings`: each form draws a list of instructions with operands over their
full legal ranges in every hypothesis example, compared with one llvm-mc run per chunk. (``vpaddd``,
``vpaddq`` and ``vpsllq`` are `asm.x86_64.simd_int`'s, tested with it.)
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from asm.errors import EncodingError
from asm.x86_64 import Assembler
from asm.x86_64.registers import KReg, Vec, rax
from tests.asm.oracle import check_chunk, chunk_params
from tests.asm.x86_64.strategies import bcsts, int_range, masked, mems, vregs
from tests.asm.x86_64.test_encodings import CHUNK, Case, oracle_forms

IMM8 = int_range(0, 255, (0, 1, 23, 31, 32, 52, 255))


@st.composite
def shift_operands(draw, src: str):
    """(dst, src, imm8): ``src`` "vex" (xmm/ymm 0..15 registers), "evex" (xmm/ymm/zmm 0..31,
    masks), "m" (memory, EVEX) or "b" (dword broadcast, EVEX)."""
    if src == "vex":
        bits = draw(st.sampled_from([128, 256]))
        return draw(vregs(bits, 15)), draw(vregs(bits, 15)), draw(IMM8)
    bits = draw(st.sampled_from([128, 256, 512]))
    dst = draw(masked(draw(vregs(bits))))
    operand = {"evex": vregs(bits), "m": mems(bits // 8), "b": bcsts(4)}[src]
    return dst, draw(operand), draw(IMM8)


CASES = [Case(f"vpslld {form}", shift_operands(form), "vpslld") for form in ("vex", "evex", "m", "b")]


@pytest.mark.parametrize("chunk", chunk_params(oracle_forms(CASES, 20), CHUNK))
def test_forms(chunk) -> None:
    check_chunk(chunk, isa="x86_64")


def test_vpslld_exponent_field() -> None:
    """The form the exp kernels use: ymm, VEX, shift 23 (the fp32 exponent field)."""
    a = Assembler()
    a.vpslld(Vec(2, 256), Vec(9, 256), 23)
    assert a.code() == bytes([0xC4, 0xC1, 0x6D, 0x72, 0xF1, 23])
    assert a.listing().strip().endswith("vpslld ymm2, ymm9, 23")


@pytest.mark.parametrize(
    "operands, word",
    [
        ((Vec(0, 256), Vec(1, 128), 1), "src"),  # mixed widths
        ((Vec(0, 256), Vec(1, 256), 256), "imm"),
        ((Vec(0, 256), Vec(1, 256), -1), "imm"),
        ((rax, Vec(1, 256), 1), "dst"),
        ((Vec(0, 256), Vec(1, 256), 1.0), "imm"),
    ],
)
def test_vpslld_rejects_bad_operands(operands, word) -> None:
    with pytest.raises(EncodingError, match=word):
        Assembler().vpslld(*operands)


def test_vpslld_masked_needs_evex() -> None:
    a = Assembler()
    a.vpslld(Vec(3, 256).mask(KReg(1), zero=True), Vec(4, 256), 5)
    assert a.code()[0] == 0x62  # EVEX
