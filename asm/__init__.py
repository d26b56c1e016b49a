"""Pure-Python instruction encoders (AArch64, x86-64).

`asm` knows nothing of tensors: it turns typed operands into machine code and
keeps the assembly text of every instruction so that a program prints as a
listing an external assembler (llvm-mc) accepts.
"""

from asm.errors import EncodingError

__all__ = ["EncodingError"]
