"""The x86-64 `Assembler`: instruction bytes, labels, fixups and a listing.

Encoders live in mixins (`base` for general purpose instructions, `simd` for
VEX/EVEX); each mnemonic method checks its operands, builds the bytes with the
encoding-class builders of `asm.x86_64.encoding` and calls `emit` with the
Intel-syntax text that llvm-mc accepts.

    a = Assembler()
    loop = a.new_label("loop")
    a.bind(loop)
    a.vfmadd231ps(zmm0, zmm1, bcst(rsi + 64))
    a.dec(rdi)
    a.jnz(loop)               # near (rel32); a.jnz(loop, short=True) for rel8
    a.ret()
    code = a.code()
    print(a.listing())

Every instruction has a fixed length when it is emitted (no relaxation), so
label positions are known as soon as a label is bound; fixups (branch rel8 /
rel32 and RIP-relative disp32) are patched by `code()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asm.errors import EncodingError
from asm.x86_64.base import BaseMixin
from asm.x86_64.labels import Fixup, Label
from asm.x86_64.simd import SimdMixin


@dataclass
class Instruction:
    """One emitted instruction: its bytes (fixups unresolved), text and position."""

    data: bytes
    text: str
    pos: int
    fixup: Fixup | None = None


@dataclass
class Assembler(BaseMixin, SimdMixin):
    """Collects instructions with their text; `code()` resolves labels."""

    name: str = "kernel"
    instructions: list[Instruction] = field(default_factory=list)
    _lines: list[Instruction | Label] = field(default_factory=list)
    _label_count: int = 0
    _pos: int = 0

    # -- emission -----------------------------------------------------------
    def emit(self, data: bytes, text: str, fixup: Fixup | None = None) -> None:
        """Append one instruction's bytes with its assembly text."""
        inst = Instruction(bytes(data), text, self._pos, fixup)
        self.instructions.append(inst)
        self._lines.append(inst)
        self._pos += len(data)

    def db(self, data: bytes) -> None:
        """Emit raw bytes (listed as ``.byte``)."""
        self.emit(data, ".byte " + ", ".join(f"{b:#04x}" for b in data))

    # -- labels -------------------------------------------------------------
    def new_label(self, name: str = "L") -> Label:
        """A fresh unbound label with a listing-unique name ``.L<name>_<n>``."""
        self._label_count += 1
        return Label(f".L{name}_{self._label_count}")

    def bind(self, label: Label) -> Label:
        """Bind ``label`` to the current position."""
        if label.pos is not None:
            raise EncodingError(f"label {label.name} is already bound")
        label.pos = self._pos
        self._lines.append(label)
        return label

    def label(self, name: str = "L") -> Label:
        """Create and bind a label here (for backward branches)."""
        return self.bind(self.new_label(name))

    @property
    def pos(self) -> int:
        """Current position in bytes."""
        return self._pos

    # -- results ------------------------------------------------------------
    @staticmethod
    def _resolve(inst: Instruction) -> bytes:
        f = inst.fixup
        if f is None:
            return inst.data
        if f.label.pos is None:
            raise EncodingError(f"{f.mnemonic}: label {f.label.name} is never bound")
        rel = f.label.pos + f.addend - (inst.pos + len(inst.data))
        lo, hi = -(1 << (8 * f.width - 1)), (1 << (8 * f.width - 1)) - 1
        if not lo <= rel <= hi:
            kind = "short (rel8)" if f.width == 1 else "rel32"
            raise EncodingError(f"{f.mnemonic}: {kind} offset to {f.label.name} must be in {lo}..{hi} bytes, got {rel}")
        field_ = (rel & ((1 << (8 * f.width)) - 1)).to_bytes(f.width, "little")
        return inst.data[: f.offset] + field_ + inst.data[f.offset + f.width :]

    def instruction_bytes(self) -> list[bytes]:
        """Each instruction's final bytes, in order, with labels resolved."""
        return [self._resolve(i) for i in self.instructions]

    def code(self) -> bytes:
        """Machine code with every label resolved."""
        return b"".join(self.instruction_bytes())

    def listing(self, addresses: bool = False) -> str:
        """The program in Intel syntax (``.intel_syntax noprefix``), one instruction per line.

        With ``addresses`` each instruction line carries its offset and bytes
        as a ``//`` comment (still valid input for llvm-mc).
        """
        out = []
        for item in self._lines:
            if isinstance(item, Label):
                out.append(f"{item.name}:")
            elif addresses:
                out.append(f"    {item.text:<56} // {item.pos:#06x}: {self._resolve(item).hex(' ')}")
            else:
                out.append(f"    {item.text}")
        return "\n".join(out)

    def __len__(self) -> int:
        return len(self.instructions)
