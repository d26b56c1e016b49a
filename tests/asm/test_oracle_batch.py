"""The batched llvm-mc oracle (`tests.asm.oracle`): one llvm-mc run for many forms, and failures
that still name the form and the instruction."""

from __future__ import annotations

import re

import pytest
from hypothesis import strategies as st

from asm import llvm
from asm.aarch64 import Assembler as A64
from asm.aarch64 import v0, v1, v2, x0, x1, x2
from asm.x86_64 import Assembler as X86
from asm.x86_64.registers import GPR64
from tests.asm import oracle
from tests.asm.oracle import Form, assert_llvm_matches_many, check_chunk, chunk_params, chunked


@pytest.fixture(autouse=True)
def _forms_untouched():
    """These tests' made-up form names stay out of the run's count of checked forms."""
    saved = {isa: set(forms) for isa, forms in oracle.FORMS.items()}
    yield
    for isa, forms in oracle.FORMS.items():
        forms.clear()
        forms.update(saved.get(isa, ()))


@pytest.fixture
def llvm_calls(monkeypatch) -> list[list[str]]:
    """The lines of every llvm-mc run the oracle makes (the real llvm-mc still runs)."""
    calls: list[list[str]] = []
    real = llvm.encode_lines

    def counting(lines, *args, **kwargs):
        calls.append(list(lines))
        return real(lines, *args, **kwargs)

    monkeypatch.setattr(llvm, "encode_lines", counting)
    return calls


def a64_add() -> A64:
    a = A64()
    a.add(x0, x1, x2)
    a.add(x2, x0, 4095)
    return a


def a64_fadd() -> A64:
    a = A64()
    a.fadd(v0.s4, v1.s4, v2.s4)
    a.fmla(v2.d2, v0.d2, v1.d2)
    a.fadd(v1.s2, v2.s2, v0.s2)
    return a


def x86_mov() -> X86:
    a = X86()
    a.mov(GPR64[0], GPR64[9])
    a.add(GPR64[3], 1 << 20)
    return a


class Corrupted:
    """An assembler whose instruction ``index`` encodes one bit off (the listing is unchanged)."""

    def __init__(self, asm, index: int) -> None:
        self.asm, self.index = asm, index

    def listing(self) -> str:
        return self.asm.listing()

    @property
    def words(self) -> list[int]:
        words = list(self.asm.words)
        words[self.index] ^= 1 << 12
        return words

    def instruction_bytes(self) -> list[bytes]:
        out = list(self.asm.instruction_bytes())
        out[self.index] = bytes([out[self.index][0] ^ 1]) + out[self.index][1:]
        return out


class Listing:
    """An assembler with a given listing and the bytes of another."""

    def __init__(self, text: str, asm) -> None:
        self.text, self.asm = text, asm

    def listing(self) -> str:
        return self.text

    @property
    def words(self) -> list[int]:
        return self.asm.words


def test_many_programs_one_llvm_run_and_forms_recorded(llvm_calls):
    progs = [("batch.add", a64_add()), ("batch.fadd", a64_fadd())]
    assert_llvm_matches_many(progs)
    assert len(llvm_calls) == 1
    assert len(llvm_calls[0]) == 5
    assert {"batch.add", "batch.fadd"} <= oracle.FORMS["aarch64"]


def test_x86_programs(llvm_calls):
    assert_llvm_matches_many([("batch.x86.a", x86_mov()), ("batch.x86.b", x86_mov())], isa="x86_64")
    assert len(llvm_calls) == 1
    assert {"batch.x86.a", "batch.x86.b"} <= oracle.FORMS["x86_64"]


@pytest.mark.parametrize("isa, make, index", [("aarch64", a64_fadd, 1), ("x86_64", x86_mov, 1)])
def test_wrong_bytes_name_form_and_instruction(isa, make, index):
    good, bad = make(), make()
    text = oracle._instruction_lines(bad.listing())[index]
    ours = Corrupted(bad, index)
    ours_hex = (ours.words[index].to_bytes(4, "little") if isa == "aarch64" else ours.instruction_bytes()[index]).hex()
    with pytest.raises(AssertionError) as info:
        assert_llvm_matches_many([("batch.good", good), ("batch.bad", ours)], isa)
    message = str(info.value)
    assert f"('batch.bad', '{text}', '{ours_hex}'," in message
    assert "batch.good" not in message
    assert not {"batch.good", "batch.bad"} & oracle.FORMS[isa]


def test_llvm_returning_fewer_instructions_fails(monkeypatch):
    real = llvm.encode_lines
    monkeypatch.setattr(llvm, "encode_lines", lambda lines, *a, **k: real(lines, *a, **k)[:-1])
    with pytest.raises(AssertionError, match=r"llvm-mc returned 4 encodings for 5 instructions of forms 'batch.add'"):
        assert_llvm_matches_many([("batch.add", a64_add()), ("batch.fadd", a64_fadd())])
    assert "batch.add" not in oracle.FORMS["aarch64"]


def test_rejected_line_names_its_form():
    bogus = Listing("    add x0, x1, x2\n    addz x2, x0, x1\n", a64_add())
    with pytest.raises(llvm.LlvmError, match=r"form 'batch.bogus': llvm-mc rejected line 2"):
        assert_llvm_matches_many([("batch.add", a64_add()), ("batch.bogus", bogus)])


def test_listing_and_bytes_of_different_length():
    short = Listing("    add x0, x1, x2\n", a64_add())
    with pytest.raises(AssertionError, match=r"batch.short: 2 encodings for 1 listing lines"):
        assert_llvm_matches_many([("batch.short", short)])


def test_empty_program_and_bad_arguments():
    with pytest.raises(AssertionError, match="batch.empty: no instructions emitted"):
        assert_llvm_matches_many([("batch.add", a64_add()), ("batch.empty", A64())])
    with pytest.raises(ValueError, match="programs"):
        assert_llvm_matches_many([])
    with pytest.raises(ValueError, match="isa must be one of"):
        assert_llvm_matches_many([("batch.add", a64_add())], isa="riscv")


def _form(name: str, examples: int = 2) -> Form:
    return Form(name, examples, lambda data: [(name, a64_add())])


def test_chunks_group_by_examples_keep_order_and_name_first_and_last():
    forms = [_form(f"f{i}", 2 + i % 2) for i in range(7)]
    chunks = chunked(forms, 2)
    assert [[f.name for f in c.forms] for c in chunks] == [["f0", "f2"], ["f4", "f6"], ["f1", "f3"], ["f5"]]
    assert [c.examples for c in chunks] == [2, 2, 3, 3]
    assert [p.id for p in chunk_params(forms, 2)] == ["f0 .. f2 (2)", "f4 .. f6 (2)", "f1 .. f3 (2)", "f5"]
    with pytest.raises(ValueError, match=r"repeated: \['f0'\]"):
        chunked([_form("f0"), _form("f0")], 4)
    with pytest.raises(ValueError, match="size"):
        chunked(forms, 0)


def test_check_chunk_draws_every_form_in_every_example_with_one_llvm_run_each(llvm_calls):
    drawn: dict[str, list[int]] = {"chunk.a": [], "chunk.b": []}

    def programs(name: str):
        def draw(data):
            n = data.draw(st.integers(0, 4095), label=name)
            drawn[name].append(n)
            a = A64()
            a.add(x0, x1, n)
            return [(name, a)]

        return draw

    chunk = chunked([Form("chunk.a", 3, programs("chunk.a")), Form("chunk.b", 3, programs("chunk.b"))], 8)[0]
    check_chunk(chunk)
    assert len(drawn["chunk.a"]) == len(drawn["chunk.b"]) == len(llvm_calls) == 3
    assert all(len(lines) == 2 for lines in llvm_calls)
    assert {"chunk.a", "chunk.b"} <= oracle.FORMS["aarch64"]


def test_check_chunk_failure_names_the_form():
    def broken(data):
        data.draw(st.integers(0, 1))
        return [("chunk.broken", Corrupted(a64_add(), 0))]

    chunk = chunked([_form("chunk.fine"), Form("chunk.broken", 2, broken)], 8)[0]
    with pytest.raises(AssertionError, match=re.escape("('chunk.broken', 'add x0, x1, x2',")):
        check_chunk(chunk)
