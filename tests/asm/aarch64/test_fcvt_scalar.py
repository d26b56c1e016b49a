"""Scalar ``fcvt`` (h/s/d to another of them) against llvm-mc over every register pair, and its
operand errors (the conversion kernels' one-element tails use ``fcvt s, h`` / ``fcvt h, s``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import strategies as st

from asm import EncodingError
from asm.aarch64 import Assembler, V, x0
from asm.aarch64.registers import ScalarReg
from tests.asm.aarch64.strategies import vnums
from tests.asm.oracle import Form, check_chunk, chunk_params

PAIRS = [(d, s) for d, s in itertools.permutations("hsd", 2)]


def _program(dst: str, src: str, data) -> list:
    regs = st.tuples(vnums(), vnums())
    a = Assembler()
    for rd, rn in data.draw(st.lists(regs, min_size=1, max_size=32), label=f"fcvt {dst}, {src}"):
        a.fcvt(ScalarReg(rd, dst), ScalarReg(rn, src))
    return [(f"fcvt.{dst}.{src}", a)]


FORMS = [Form(f"fcvt.{d}.{s}", 10, lambda data, d=d, s=s: _program(d, s, data)) for d, s in PAIRS]


@pytest.mark.parametrize("chunk", chunk_params(FORMS, 6))
def test_forms(chunk) -> None:
    check_chunk(chunk, isa="aarch64")


def test_kernel_forms() -> None:
    a = Assembler()
    a.fcvt(V[1].S, V[0].H)
    a.fcvt(V[2].H, V[0].S)
    assert a.words == [0x1EE24001, 0x1E23C002]


@pytest.mark.parametrize(
    "rd, rn, word",
    [(V[0].S, V[1].S, "rd"), (V[0].Q, V[1].S, "rd"), (V[0].S, V[1].B, "rn"), (x0, V[1].H, "rd"), (V[0].S, x0, "rn")],
)
def test_rejects_bad_operands(rd, rn, word) -> None:
    with pytest.raises(EncodingError, match=word):
        Assembler().fcvt(rd, rn)
