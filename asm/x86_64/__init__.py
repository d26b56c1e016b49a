"""x86-64 assembler: typed registers, memory operands, labels, encoders and listings.

    from asm.x86_64 import Assembler, rax, rsi, rdi, zmm0, zmm1, k1, qword, zmmword, bcst, ptr, rip

Registers: ``rax``..``r15`` and ``eax``..``r15d`` (`Gpr`), ``xmm0``..``xmm31``,
``ymm0``..``ymm31``, ``zmm0``..``zmm31`` (`Vec`), ``k0``..``k7`` (`KReg`),
``cl`` (shift counts), ``rip`` (RIP-relative addresses). Lists: ``GPR64``,
``GPR32``, ``XMM``, ``YMM``, ``ZMM``, ``KREGS``. Registers are interned
(``Vec(1, 256) is ymm1``) and compare by identity.

Addresses: ``rax + rbx * 8 + 64``, ``rbx * 4 - 8`` (no base), ``rip + 16``,
``rip + label + 8``. Memory operands wrap an address with a size:
``ptr(addr)`` (size implied by the instruction), ``byte/word/dword/qword/
xmmword/ymmword/zmmword(addr)``, and ``bcst(addr)`` for EVEX embedded
broadcast ``{1toN}``. Displacements use disp8 or disp32 (EVEX: disp8*N)
exactly as llvm-mc chooses.

Masks: ``zmm0.mask(k1)`` is ``zmm0 {k1}``, ``zmm0.maskz(k1)`` is
``zmm0 {k1} {z}``, ``zmmword(rax).mask(k1)`` a masked store, ``k1.mask(k2)``
a masked compare destination.

Labels: ``l = a.new_label("loop")``; ``a.bind(l)`` (or ``a.label()`` to create
and bind); ``a.jmp(l)``, ``a.jne(l)``, ``a.call(l)`` are near (rel32, listed as
``{disp32} jne .Lloop_1``); ``a.jne(l, short=True)`` is rel8 and raises in
`code()` when out of range. ``qword(rip + l)`` addresses data at a label.

Instructions are methods named like the mnemonic, operands in Intel order
(destination first); Python keywords get a trailing underscore (``and_``,
``or_``). `Assembler.code()` gives the bytes, `listing()` the Intel-syntax
text (``.intel_syntax noprefix``) and `instruction_bytes()` each
instruction's resolved bytes. Invalid operands raise `asm.EncodingError`.
An instruction form met before (mnemonic and equal operands) is emitted from
a cache of its bytes and text (`asm.x86_64.assembler`).

Modules: `registers`, `memory`, `labels`, `encoding` (REX, ModR/M+SIB+disp,
VEX and EVEX prefix builders), `operands` (checks), `base` (general purpose
instructions), `simd` (AVX/AVX2/FMA/AVX-512), `assembler`.
"""

from asm.x86_64.assembler import Assembler, Instruction
from asm.x86_64.labels import Label
from asm.x86_64.memory import Addr, Mem, bcst, byte, dword, mem, ptr, qword, word, xmmword, ymmword, zmmword
from asm.x86_64.registers import *  # noqa: F403  (rax.., eax.., xmm0.., ymm0.., zmm0.., k0.., cl, rip)
from asm.x86_64.registers import GPR32, GPR64, KREGS, REGISTERS, XMM, YMM, ZMM, Gpr, KReg, Masked, Vec

__all__ = [
    "Assembler",
    "Instruction",
    "Label",
    "Addr",
    "Mem",
    "mem",
    "ptr",
    "byte",
    "word",
    "dword",
    "qword",
    "xmmword",
    "ymmword",
    "zmmword",
    "bcst",
    "Gpr",
    "Vec",
    "KReg",
    "Masked",
    "GPR64",
    "GPR32",
    "XMM",
    "YMM",
    "ZMM",
    "KREGS",
    "REGISTERS",
    *REGISTERS,
]
