"""LLVM's assembler and machine-code analyzer as oracles.

`llvm-mc` turns a listing into bytes (the oracle for every encoder) and
`llvm-mca` estimates cycles per iteration of a loop body. Tools are found as
``llvm-mc-NN`` (newest first) or plain ``llvm-mc`` on PATH, or via
``MINIJIT_LLVM_BIN`` (a directory). Subprocesses get argument lists, never a
shell.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

AARCH64_TRIPLE = "aarch64"
AARCH64_MATTR = "+sve,+sve2,+bf16,+i8mm"
X86_64_TRIPLE = "x86_64"

_ENCODING = re.compile(r"encoding: \[([^\]]*)\]")
SHT_NOBITS = 8


class LlvmError(RuntimeError):
    """An LLVM tool is missing or rejected its input (the message holds its log)."""


@functools.cache
def find_tool(name: str) -> str:
    """Absolute path of an LLVM tool (``llvm-mc``, ``llvm-mca``, ``llvm-objcopy``).

    Raises LlvmError when it is not installed.
    """
    bindir = os.environ.get("MINIJIT_LLVM_BIN")
    if bindir:
        cand = Path(bindir) / name
        if cand.is_file():
            return str(cand)
    for version in range(25, 13, -1):
        path = shutil.which(f"{name}-{version}")
        if path:
            return path
    path = shutil.which(name)
    if path:
        return path
    raise LlvmError(f"{name} not found: install Debian package 'llvm' (or llvm-19), or set MINIJIT_LLVM_BIN")


def _run(args: list[str], text: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, input=text, capture_output=True, text=True, check=False)


def encode_lines(lines: list[str], triple: str = AARCH64_TRIPLE, mattr: str = AARCH64_MATTR) -> list[bytes]:
    """Assemble instructions one per line with ``--show-encoding``; bytes per line.

    x86-64 lines are Intel syntax (``.intel_syntax noprefix`` is prepended).

    All lines go through one llvm-mc process. Raises LlvmError naming the first
    rejected line.
    """
    args = [find_tool("llvm-mc"), f"--triple={triple}", "--show-encoding"]
    if mattr:
        args.append(f"-mattr={mattr}")
    prologue = ".intel_syntax noprefix\n" if triple.startswith("x86") else ""
    proc = _run(args, prologue + "\n".join(lines) + "\n")
    if proc.returncode != 0:
        raise LlvmError(_explain(proc.stderr, lines, 1 if prologue else 0))
    out = []
    for m in _ENCODING.finditer(proc.stdout):
        items = [s.strip() for s in m.group(1).split(",") if s.strip()]
        try:
            out.append(bytes(int(s, 0) for s in items))
        except ValueError:  # fixup placeholders like 0bAAAAAAAA
            raise LlvmError(f"unresolved fixup in encoding: {m.group(0)}") from None
    if len(out) != len(lines):
        raise LlvmError(f"llvm-mc returned {len(out)} encodings for {len(lines)} lines:\n{proc.stdout}")
    return out


def _explain(stderr: str, lines: list[str], skip: int = 0) -> str:
    m = re.search(r"<stdin>:(\d+):", stderr)
    if m:
        n = int(m.group(1)) - skip
        if 1 <= n <= len(lines):
            return f"llvm-mc rejected line {n}: {lines[n - 1]!r}\n{stderr}"
    return f"llvm-mc failed:\n{stderr}"


def assemble(listing: str, triple: str = AARCH64_TRIPLE, mattr: str = AARCH64_MATTR) -> bytes:
    """Assemble a whole listing (labels allowed) and return its ``.text`` bytes (read from the ELF
    object that llvm-mc writes to a pipe: one process, no temporary files)."""
    if triple.startswith("x86"):
        listing = ".intel_syntax noprefix\n" + listing
    args = [find_tool("llvm-mc"), f"--triple={triple}", "-filetype=obj", "-o", "-"]
    if mattr:
        args.append(f"-mattr={mattr}")
    proc = subprocess.run(args, input=(listing + "\n").encode(), capture_output=True, check=False)
    if proc.returncode != 0:
        raise LlvmError(_explain(proc.stderr.decode(errors="replace"), listing.splitlines()))
    return elf_section(proc.stdout, ".text")


def elf_section(obj: bytes, name: str) -> bytes:
    """The contents of section ``name`` of a little-endian ELF64 object (what ``llvm-objcopy -O
    binary --only-section=NAME`` writes); empty when there is no such section. LlvmError when
    ``obj`` is not such an object."""
    if obj[:4] != b"\x7fELF" or len(obj) < 64 or obj[4] != 2 or obj[5] != 1:
        raise LlvmError(f"not a little-endian ELF64 object ({len(obj)} bytes, starting {obj[:8]!r})")
    shoff, shentsize, shnum, shstrndx = struct.unpack_from("<Q10xHHH", obj, 0x28)

    def header(i: int) -> tuple[int, int, int, int]:
        sh_name, sh_type, _, _, offset, size = struct.unpack_from("<IIQQQQ", obj, shoff + i * shentsize)
        return sh_name, sh_type, offset, size

    _, _, strtab, strsize = header(shstrndx)
    want = name.encode()
    for i in range(shnum):
        sh_name, sh_type, offset, size = header(i)
        end = obj.find(b"\0", strtab + sh_name, strtab + strsize)
        if end < 0:
            raise LlvmError(f"ELF section {i}: its name runs past the section name table")
        if obj[strtab + sh_name : end] == want:
            return b"" if sh_type == SHT_NOBITS else obj[offset : offset + size]
    return b""


@dataclass(frozen=True)
class McaReport:
    """Summary of an llvm-mca run over a loop body."""

    mcpu: str
    iterations: int
    instructions: int
    total_cycles: int
    block_rthroughput: float
    text: str

    @property
    def cycles_per_iteration(self) -> float:
        return self.total_cycles / self.iterations


def mca(
    body: str, mcpu: str, triple: str = AARCH64_TRIPLE, mattr: str = AARCH64_MATTR, iterations: int = 200
) -> McaReport:
    """Run ``llvm-mca`` on a loop body (no labels or branches needed)."""
    args = [
        find_tool("llvm-mca"),
        f"-mtriple={triple}",
        f"-mcpu={mcpu}",
        f"-iterations={iterations}",
    ]
    if mattr:
        args.append(f"-mattr={mattr}")
    proc = _run(args, body + "\n")
    if proc.returncode != 0:
        raise LlvmError(f"llvm-mca failed for -mcpu={mcpu}:\n{proc.stderr}")

    def grab(key: str) -> str:
        m = re.search(rf"^{key}:\s*([0-9.]+)", proc.stdout, re.M)
        if not m:
            raise LlvmError(f"llvm-mca output lacks {key!r}:\n{proc.stdout[:2000]}")
        return m.group(1)

    return McaReport(
        mcpu=mcpu,
        iterations=int(grab("Iterations")),
        instructions=int(grab("Instructions")),
        total_cycles=int(grab("Total Cycles")),
        block_rthroughput=float(grab("Block RThroughput")),
        text=proc.stdout,
    )
