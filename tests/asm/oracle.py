"""Byte-for-byte comparison of our encoders with llvm-mc.

`assert_llvm_matches(asm, form)` assembles the instruction lines of a program
with one llvm-mc process and compares every instruction's bytes. ``form`` names
the encoder form under test (mnemonic, operand form, element size); the
distinct forms checked are counted and printed at the end of the run.
"""

from __future__ import annotations

from asm import llvm

FORMS: dict[str, set[str]] = {"aarch64": set(), "x86_64": set()}


def _instruction_lines(listing: str) -> list[str]:
    lines = []
    for raw in listing.splitlines():
        text = raw.split("//")[0].strip()
        if text and not text.endswith(":"):
            lines.append(text)
    return lines


def assert_llvm_matches(asm, form: str, isa: str = "aarch64") -> None:
    """Assert that every instruction of ``asm`` encodes exactly as llvm-mc does.

    ``asm`` is an AArch64 or x86-64 Assembler whose instructions use numeric
    branch offsets (no labels). Records ``form`` as checked.
    """
    lines = _instruction_lines(asm.listing())
    assert lines, "no instructions emitted"
    if isa == "aarch64":
        ours = [w.to_bytes(4, "little") for w in asm.words]
        theirs = llvm.encode_lines(lines)
    else:
        ours = asm.instruction_bytes()
        theirs = llvm.encode_lines(lines, triple=llvm.X86_64_TRIPLE, mattr="")
    assert len(ours) == len(theirs) == len(lines)
    bad = [(t, o.hex(), e.hex()) for t, o, e in zip(lines, ours, theirs, strict=True) if o != e]
    assert not bad, "encodings differ from llvm-mc (text, ours, llvm):\n" + "\n".join(map(str, bad[:20]))
    FORMS[isa].add(form)
