"""AArch64 assembler: typed registers, encoders and listings.

from asm.aarch64 import Assembler, x0, x1, v0, mem, post
"""

from asm.aarch64.assembler import Assembler, Label
from asm.aarch64.memory import Mem, mem, post, pre
from asm.aarch64.registers import *  # noqa: F403  (x0.., w0.., v0.., z0.., p0..)
from asm.aarch64.registers import REGISTERS, P, V, W, X, Z

__all__ = ["Assembler", "Label", "Mem", "mem", "pre", "post", "REGISTERS", "X", "W", "V", "Z", "P", *REGISTERS]
