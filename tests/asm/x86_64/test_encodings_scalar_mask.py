"""Scalar (ss/sd), vmaskmov, vblendv and VEX vcmp forms against llvm-mc, byte for byte.

Same scheme as `test_encodings`: each form draws, in every hypothesis example,
a list of instructions with operands over their full legal ranges; the forms
of a chunk are compared with one llvm-mc run per example.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from asm.x86_64.simd import BLENDV, MASKMOVES, SCALAR3
from tests.asm.oracle import check_chunk, chunk_params
from tests.asm.x86_64.strategies import int_range, mems, vregs
from tests.asm.x86_64.test_encodings import CHUNK, Case, oracle_forms

CASES: list[Case] = []


def case(name: str, ops: st.SearchStrategy, method: str) -> None:
    CASES.append(Case(name, ops, method))


X31 = vregs(128)
for mn, op in SCALAR3.items():
    case(f"{mn} xmm, xmm, xmm", st.tuples(X31, X31, X31), mn)
    case(f"{mn} xmm, xmm, m", st.tuples(X31, X31, mems(op.esize)), mn)

for mn, es in (("vmovss", 4), ("vmovsd", 8)):
    case(f"{mn} xmm, m", st.tuples(X31, mems(es)), mn)
    case(f"{mn} m, xmm", st.tuples(mems(es), X31), mn)


@st.composite
def vex_vectors(draw, n: int, last_mem: bool = False):
    """``n`` VEX registers of one width (xmm/ymm 0..15); with ``last_mem`` the last is a memory operand."""
    bits = draw(st.sampled_from([128, 256]))
    regs = [draw(vregs(bits, 15)) for _ in range(n)]
    if last_mem:
        regs[-1] = draw(mems(bits // 8))
    return bits, regs


for mn in MASKMOVES:
    case(f"{mn} v, v, m", vex_vectors(3, last_mem=True).map(lambda t: tuple(t[1])), mn)
    case(f"{mn} m, v, v", vex_vectors(3, last_mem=True).map(lambda t: (t[1][2], t[1][0], t[1][1])), mn)

for mn in BLENDV:
    case(f"{mn} v, v, v, v", vex_vectors(4).map(lambda t: tuple(t[1])), mn)
    case(
        f"{mn} v, v, m, v",
        vex_vectors(4, last_mem=True).map(lambda t: (t[1][1], t[1][0], t[1][3], t[1][2])),
        mn,
    )

for mn in ("vcmpps", "vcmppd"):
    for label, mem in (("v, v, v, imm", False), ("v, v, m, imm", True)):
        strat = st.tuples(vex_vectors(3, last_mem=mem), int_range(0, 31)).map(lambda t: (*t[0][1], t[1]))
        case(f"{mn} {label}", strat, mn)


@pytest.mark.parametrize("chunk", chunk_params(oracle_forms(CASES), CHUNK))
def test_forms(chunk) -> None:
    check_chunk(chunk, isa="x86_64")


def test_case_names_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
