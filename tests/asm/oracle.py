"""Byte-for-byte comparison of our encoders with llvm-mc.

`assert_llvm_matches(asm, form)` assembles the instruction lines of a program
with one llvm-mc process and compares every instruction's bytes. ``form`` names
the encoder form under test (mnemonic, operand form, element size); the
distinct forms checked are counted and printed at the end of the run.

`assert_llvm_matches_many(programs, isa)` does the same for many programs, one
per form, with a single llvm-mc process (process start-up is most of an
oracle's cost). `Form` and `chunked` build the batched oracle tests: a form
draws its operands from hypothesis ``data`` and emits them into programs of
its own; `check_chunk` runs every form of a chunk in each hypothesis example
and compares them all with one llvm-mc run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm

FORMS: dict[str, set[str]] = {"aarch64": set(), "x86_64": set()}


def _instruction_lines(listing: str) -> list[str]:
    lines = []
    for raw in listing.splitlines():
        text = raw.split("//")[0].strip()
        if text and not text.endswith(":"):
            lines.append(text)
    return lines


def _our_bytes(asm: Any, isa: str) -> list[bytes]:
    if isa == "aarch64":
        return [w.to_bytes(4, "little") for w in asm.words]
    return asm.instruction_bytes()


def _llvm_bytes(lines: list[str], isa: str) -> list[bytes]:
    if isa == "aarch64":
        return llvm.encode_lines(lines)
    return llvm.encode_lines(lines, triple=llvm.X86_64_TRIPLE, mattr="")


def _check_isa(isa: str) -> None:
    if isa not in FORMS:
        raise ValueError(f"isa must be one of {sorted(FORMS)}, got {isa!r}")


def assert_llvm_matches(asm: Any, form: str, isa: str = "aarch64") -> None:
    """Assert that every instruction of ``asm`` encodes exactly as llvm-mc does.

    ``asm`` is an AArch64 or x86-64 Assembler whose instructions use numeric
    branch offsets (no labels). Records ``form`` as checked.
    """
    assert_llvm_matches_many([(form, asm)], isa)


def assert_llvm_matches_many(programs: Sequence[tuple[str, Any]], isa: str = "aarch64") -> None:
    """Assert that every instruction of every program encodes exactly as llvm-mc does, with ONE llvm-mc run.

    ``programs`` is a list of (form, Assembler): each Assembler holds the
    instructions of one form (numeric branch offsets, no labels). A mismatch
    names the form, the instruction text, our bytes and llvm-mc's bytes; an
    instruction llvm-mc rejects is reported with its form. Records every form
    as checked.
    """
    _check_isa(isa)
    if not programs:
        raise ValueError("programs must hold at least one (form, Assembler)")
    parts: list[tuple[str, list[str], list[bytes]]] = []
    for form, asm in programs:
        lines = _instruction_lines(asm.listing())
        assert lines, f"{form}: no instructions emitted"
        ours = _our_bytes(asm, isa)
        assert len(ours) == len(lines), f"{form}: {len(ours)} encodings for {len(lines)} listing lines"
        parts.append((form, lines, ours))
    every_line = [line for _, lines, _ in parts for line in lines]
    try:
        theirs = _llvm_bytes(every_line, isa)
    except llvm.LlvmError as err:
        for form, lines, _ in parts:  # find the form llvm-mc rejects (only on failure: one run per form)
            try:
                _llvm_bytes(lines, isa)
            except llvm.LlvmError as own:
                raise llvm.LlvmError(f"form {form!r}: {own}") from err
        raise
    assert len(theirs) == len(every_line), (
        f"llvm-mc returned {len(theirs)} encodings for {len(every_line)} instructions of forms "
        + ", ".join(repr(form) for form, _, _ in parts)
    )
    bad = []
    at = 0
    for form, lines, ours in parts:
        for text, o, e in zip(lines, ours, theirs[at : at + len(lines)], strict=True):
            if o != e:
                bad.append((form, text, o.hex(), e.hex()))
        at += len(lines)
    assert not bad, "encodings differ from llvm-mc (form, text, ours, llvm):\n" + "\n".join(map(str, bad[:20]))
    FORMS[isa].update(form for form, _ in programs)


@dataclass(frozen=True)
class Form:
    """One oracle test's worth of forms: ``programs(data)`` draws operands with hypothesis ``data``
    and returns (form, Assembler) pairs, one per form it checks; ``examples`` is how many
    hypothesis examples it gets (as when it was a test of its own)."""

    name: str
    examples: int
    programs: Callable[[Any], list[tuple[str, Any]]]

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Chunk:
    """Forms checked together: every form is drawn in each of ``examples`` hypothesis examples."""

    forms: tuple[Form, ...]
    examples: int

    def __str__(self) -> str:
        first, last = self.forms[0].name, self.forms[-1].name
        return f"{first} .. {last} ({len(self.forms)})" if len(self.forms) > 1 else first


def chunked(forms: Sequence[Form], size: int) -> list[Chunk]:
    """Split ``forms`` into chunks of at most ``size`` forms with equal ``examples`` (the order of
    ``forms`` is kept within each example count, so the chunks and their names are stable)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    names = [f.name for f in forms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"form names must be unique, repeated: {dup}")
    out = []
    for n in sorted({f.examples for f in forms}):
        group = [f for f in forms if f.examples == n]
        out += [Chunk(tuple(group[i : i + size]), n) for i in range(0, len(group), size)]
    return out


def chunk_params(forms: Sequence[Form], size: int) -> list:
    """`chunked` as pytest parameters whose ids name the chunk's first and last form."""
    return [pytest.param(c, id=str(c)) for c in chunked(forms, size)]


def check_chunk(chunk: Chunk, isa: str = "aarch64") -> None:
    """Run ``chunk.examples`` hypothesis examples; each draws every form's programs and compares
    them all with llvm-mc in one run."""
    _check_isa(isa)

    @settings(max_examples=chunk.examples)
    @given(data=st.data())
    def run(data) -> None:
        programs: list[tuple[str, Any]] = []
        for form in chunk.forms:
            programs += form.programs(data)
        assert_llvm_matches_many(programs, isa)

    run()
