"""Vector shifts by an immediate (NEON ``shl``, SVE unpredicated ``lsl``) against llvm-mc, every
register, element size and shift; their bad operands raise EncodingError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import EncodingError
from asm.aarch64 import Assembler, V, Z
from tests.asm.aarch64.strategies import vecs, zvecs
from tests.asm.oracle import assert_llvm_matches

NEON = ("8b", "16b", "4h", "8h", "2s", "4s", "2d")
BITS = {"b": 8, "h": 16, "s": 32, "d": 64}


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_neon_shl(data):
    programs = []
    for arr in NEON:
        ops = st.tuples(vecs(arr), vecs(arr), st.integers(0, BITS[arr[-1]] - 1))
        a = Assembler()
        for rd, rn, sh in data.draw(st.lists(ops, min_size=1, max_size=16), label=arr):
            a.shl(rd, rn, sh)
        programs.append(a)
    for arr, a in zip(NEON, programs, strict=True):
        assert_llvm_matches(a, f"shl.vec.{arr}")


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_sve_lsl_imm(data):
    for es, bits in BITS.items():
        ops = st.tuples(zvecs(es), zvecs(es), st.integers(0, bits - 1))
        a = Assembler()
        for zd, zn, sh in data.draw(st.lists(ops, min_size=1, max_size=16), label=es):
            a.lsl(zd, zn, sh)
        assert_llvm_matches(a, f"sve.lsl.imm.{es}")


@pytest.mark.parametrize(
    "emit",
    [
        lambda a: a.shl(V[0].s4, V[1].s4, 32),
        lambda a: a.shl(V[0].s4, V[1].s4, -1),
        lambda a: a.shl(V[0].s4, V[1].d2, 3),
        lambda a: a.shl(V[0].d1, V[1].d1, 3),
        lambda a: a.lsl(Z[0].s, Z[1].s, 32),
        lambda a: a.lsl(Z[0].d, Z[1].s, 3),
    ],
)
def test_bad_operands(emit):
    with pytest.raises(EncodingError):
        emit(Assembler())
