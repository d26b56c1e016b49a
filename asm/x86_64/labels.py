"""Labels and pc-relative fixups."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class Label:
    """A code position; bound once with `Assembler.bind`. ``pos`` is in bytes.

    ``rip + label`` (or ``label + 8``) is a RIP-relative address.
    """

    name: str
    pos: int | None = None

    def __str__(self) -> str:
        return self.name

    def __add__(self, disp: int):
        from asm.x86_64.memory import Addr

        return Addr(rip=True, label=self) + disp


@dataclass
class Fixup:
    """A pc-relative field of ``width`` bytes at ``offset`` in its instruction.

    It receives ``label.pos + addend - end of instruction``.
    """

    offset: int
    width: int
    label: Label
    addend: int
    mnemonic: str
