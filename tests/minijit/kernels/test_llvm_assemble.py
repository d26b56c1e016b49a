"""`asm.llvm.assemble` reads ``.text`` from the object llvm-mc writes to a pipe: the bytes are what
``llvm-objcopy -O binary --only-section=.text`` extracts from the same object (the oracle it
replaced), and what the emitters encoded. (Here rather than under tests/asm: the callers that
reassemble kernel listings live in this folder.)"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from asm import llvm
from minijit import kernels
from minijit.runtime.harness import harness_program

try:
    llvm.find_tool("llvm-mc")
    llvm.find_tool("llvm-objcopy")
except llvm.LlvmError as e:  # pragma: no cover - the test command installs llvm
    pytest.skip(str(e), allow_module_level=True)


def objcopy_text(listing: str, triple: str, mattr: str) -> bytes:
    """The former path: llvm-mc into a file, llvm-objcopy extracts .text."""
    if triple.startswith("x86"):
        listing = ".intel_syntax noprefix\n" + listing
    with tempfile.TemporaryDirectory() as tmp:
        obj, raw = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.bin")
        args = [llvm.find_tool("llvm-mc"), f"--triple={triple}", "-filetype=obj", "-o", obj]
        subprocess.run([*args, *([f"-mattr={mattr}"] if mattr else [])], input=listing + "\n", text=True, check=True)
        cmd = [llvm.find_tool("llvm-objcopy"), "-O", "binary", "--only-section=.text", obj, raw]
        subprocess.run(cmd, check=True)
        return Path(raw).read_bytes()


CASES = {
    "aarch64 harness": lambda: (harness_program(), llvm.AARCH64_TRIPLE, llvm.AARCH64_MATTR),
    "aarch64-sve brgemm": lambda: (
        kernels.brgemm(13, 5, 3, 2, target="aarch64-sve"),
        llvm.AARCH64_TRIPLE,
        llvm.AARCH64_MATTR,
    ),
    "x86_64-avx2 brgemm": lambda: (kernels.brgemm(13, 5, 3, 2, target="x86_64-avx2"), llvm.X86_64_TRIPLE, ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_bytes_match_objcopy_and_the_emitted_code(case):
    prog, triple, mattr = CASES[case]()
    listing = prog.listing() if callable(prog.listing) else prog.listing
    code = prog.code() if callable(prog.code) else prog.code
    got = llvm.assemble(listing, triple, mattr)
    assert got == objcopy_text(listing, triple, mattr)
    assert got == code


def test_a_listing_without_code_gives_empty_text_like_objcopy():
    listing = ".data\n.byte 1, 2, 3"
    assert llvm.assemble(listing, llvm.X86_64_TRIPLE, "") == objcopy_text(listing, llvm.X86_64_TRIPLE, "") == b""
    obj = subprocess.run(
        [llvm.find_tool("llvm-mc"), "--triple=x86_64", "-filetype=obj", "-o", "-"],
        input=b'.text\nnop\n.section .other,"ax"\nret\n',
        capture_output=True,
        check=True,
    ).stdout
    assert llvm.elf_section(obj, ".text") == b"\x90" and llvm.elf_section(obj, ".other") == b"\xc3"
    assert llvm.elf_section(obj, ".missing") == b""


def test_rejected_listing_and_non_elf_input_raise():
    with pytest.raises(llvm.LlvmError, match="llvm-mc rejected line 2: 'bogus x0'"):
        llvm.assemble("ret\nbogus x0")
    with pytest.raises(llvm.LlvmError, match="not a little-endian ELF64 object"):
        llvm.elf_section(b"\x7fELF\x01\x01" + bytes(60), ".text")


def test_a_section_name_past_the_name_table_raises():
    import struct

    obj = bytearray(
        subprocess.run(
            [llvm.find_tool("llvm-mc"), "--triple=x86_64", "-filetype=obj", "-o", "-"],
            input=b".text\nnop\n",
            capture_output=True,
            check=True,
        ).stdout
    )
    shoff, shentsize, shnum, _ = struct.unpack_from("<Q10xHHH", obj, 0x28)
    for i in range(shnum):  # every section's name offset points past the name table
        struct.pack_into("<I", obj, shoff + i * shentsize, 0xFFFFFF)
    with pytest.raises(llvm.LlvmError, match="runs past the section name table"):
        llvm.elf_section(bytes(obj), ".text")
