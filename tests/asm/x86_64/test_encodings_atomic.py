"""Atomics and synchronization (xadd, cmpxchg with and without lock, xchg, pause, mfence, sfence, syscall)
against llvm-mc, byte for byte, plus their operand errors.

Same scheme as `test_encodings`: one hypothesis test per form, each example a
list of instructions with operands over their full legal ranges, compared
with one llvm-mc run.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import EncodingError
from asm.x86_64 import Assembler, eax, ecx, qword, rax, rcx, rdi
from tests.asm.oracle import assert_llvm_matches
from tests.asm.x86_64.strategies import gprs, mems
from tests.asm.x86_64.test_encodings import Case

CASES: list[Case] = []


def case(name: str, ops: st.SearchStrategy, method: str) -> None:
    CASES.append(Case(name, ops, method))


for w in (64, 32):
    for mn in ("xadd", "cmpxchg"):
        case(f"{mn} r{w}, r{w}", st.tuples(gprs(w), gprs(w)), mn)
        case(f"{mn} m{w}, r{w}", st.tuples(mems(w // 8), gprs(w)), mn)
        case(f"lock {mn} m{w}, r{w}", st.tuples(mems(w // 8), gprs(w), st.just(True)), f"{mn}_locked")
    case(f"xchg r{w}, r{w}", st.tuples(gprs(w), gprs(w)), "xchg")
    case(f"xchg m{w}, r{w}", st.tuples(mems(w // 8), gprs(w)), "xchg")
    case(f"xchg r{w}, m{w}", st.tuples(gprs(w), mems(w // 8)), "xchg")
for mn in ("pause", "mfence", "sfence", "syscall"):
    case(mn, st.just(()), mn)


class _Assembler(Assembler):
    """`Assembler` with positional ``lock`` variants for the form table."""

    def xadd_locked(self, dst, src, lock):
        self.xadd(dst, src, lock=lock)

    def cmpxchg_locked(self, dst, src, lock):
        self.cmpxchg(dst, src, lock=lock)


@pytest.mark.parametrize("form", CASES, ids=str)
@settings(max_examples=4)
@given(data=st.data())
def test_form(form: Case, data) -> None:
    ops = data.draw(st.lists(form.ops, min_size=1, max_size=48), label="operands")
    a = _Assembler()
    emit = getattr(a, form.method)
    for o in ops:
        emit(*o)
    assert_llvm_matches(a, form.name, isa="x86_64")


def test_case_names_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES)


def test_register_edge_cases_match_llvm() -> None:
    """The rax/eax short forms and the 'xchg eax, eax' exception, each checked explicitly."""
    a = Assembler()
    for dst, src in ((rax, rax), (eax, eax), (rax, rcx), (rcx, rax), (eax, ecx), (ecx, eax)):
        a.xchg(dst, src)
    assert_llvm_matches(a, "xchg rax/eax edge cases", isa="x86_64")


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda a: a.xadd(rax, rcx, lock=True), "lock xadd: dst must be a memory operand"),
        (lambda a: a.cmpxchg(rcx, rax, lock=True), "lock cmpxchg: dst must be a memory operand"),
        (lambda a: a.xadd(qword(rdi), ecx), "xadd: dst must be a dword ptr memory operand"),
        (lambda a: a.xadd(rax, ecx), "xadd: operands must all be 64-bit or all 32-bit"),
        (lambda a: a.xchg(rax, 5), "xchg: src must be a register"),
        (lambda a: a.cmpxchg(qword(rdi), 1), "cmpxchg: src must be a register"),
    ],
)
def test_operand_errors(call, needle: str) -> None:
    with pytest.raises(EncodingError, match=needle.replace("(", r"\(")):
        call(Assembler())


def test_lock_listing_text() -> None:
    """The lock prefix is part of the instruction's text and bytes (one instruction, one line)."""
    a = Assembler()
    a.xadd(qword(rdi + 8), rax, lock=True)
    assert a.listing().strip() == "lock xadd qword ptr [rdi + 8], rax"
    assert len(a.instructions) == 1 and a.code()[0] == 0xF0
    assert_llvm_matches(a, "lock xadd m64, r64", isa="x86_64")
