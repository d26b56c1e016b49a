"""AArch64 assembler: typed registers, encoders and listings.

from asm.aarch64 import Assembler, x0, x1, v0, mem, post, za0, za0h
"""

from asm.aarch64.assembler import Assembler, Label
from asm.aarch64.memory import Mem, mem, post, pre
from asm.aarch64.registers import *  # noqa: F403  (x0.., w0.., v0.., z0.., p0..)
from asm.aarch64.registers import REGISTERS, P, V, W, X, Z
from asm.aarch64.sme import *  # noqa: F403  (za, za0..za7, za0h..za7h, za0v..za7v)
from asm.aarch64.sme import ZA_REGISTERS

__all__ = ["Assembler", "Label", "Mem", "mem", "pre", "post", "REGISTERS", "X", "W", "V", "Z", "P"]
__all__ += [*REGISTERS, *ZA_REGISTERS]
