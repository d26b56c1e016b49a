"""The AArch64 `Assembler`: instruction words, labels, fixups and a listing.

Encoders live in mixins, one module per part of the ISA (`base`, `neon`,
`sve`, `sme`); each mnemonic method checks its operands, builds the 32-bit word and
calls `emit(word, text)` with the assembly text LLVM would accept.

    a = Assembler()
    loop = a.new_label("loop")
    a.bind(loop)
    a.subs(x0, x0, 1)
    a.b_ne(loop)
    a.ret()
    code = a.code()          # bytes, little endian
    print(a.listing())
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asm.aarch64.base import BaseMixin
from asm.aarch64.neon import NeonMixin
from asm.aarch64.registers import PQual, PReg, PVec, ZElem, ZReg, ZVec
from asm.aarch64.sme import SmeMixin
from asm.aarch64.sve import SveMixin
from asm.errors import EncodingError

# fixup kind -> (bit position, width) of the signed word offset in the instruction
FIXUP_FIELDS = {"imm26": (0, 26), "imm19": (5, 19), "imm14": (5, 14)}


@dataclass(eq=False)
class Label:
    """A code position; bound once with `Assembler.bind`. ``pos`` is in bytes."""

    name: str
    pos: int | None = None

    def __str__(self) -> str:
        return self.name


@dataclass
class _Fixup:
    index: int  # word index
    label: Label
    kind: str
    mnemonic: str


@dataclass
class Assembler(NeonMixin, BaseMixin, SmeMixin, SveMixin):
    """Collects instruction words with their text; `code()` resolves labels."""

    name: str = "kernel"
    words: list[int] = field(default_factory=list)
    _lines: list[tuple[int | None, str]] = field(default_factory=list)  # (word index or None for labels, text)
    _fixups: list[_Fixup] = field(default_factory=list)
    _label_count: int = 0

    # -- emission -----------------------------------------------------------
    def emit(self, word: int, text: str) -> None:
        """Append one 32-bit instruction word with its assembly text."""
        if not 0 <= word < 1 << 32:
            raise EncodingError(f"{text}: word {word:#x} does not fit 32 bits")
        self._lines.append((len(self.words), text))
        self.words.append(word)

    def inst(self, word: int) -> None:
        """Emit a raw instruction word (listed as ``.inst 0x...``)."""
        self.emit(word, f".inst {word:#010x}")

    def emit_branch(self, word: int, text: str, target: Label | int, kind: str, mnemonic: str) -> None:
        """Emit a pc-relative instruction; ``target`` is a Label or a byte offset."""
        if isinstance(target, Label):
            self._fixups.append(_Fixup(len(self.words), target, kind, mnemonic))
            self.emit(word, text.replace("{target}", target.name))
            return
        self.emit(self._patch(word, target, kind, mnemonic), text.replace("{target}", f"#{target}"))

    @staticmethod
    def _patch(word: int, offset: int, kind: str, mnemonic: str) -> int:
        if kind == "adr":  # byte offset split into immlo (bits 29-30) and immhi (bits 5-23)
            if not isinstance(offset, int) or not -(1 << 20) <= offset < 1 << 20:
                raise EncodingError(f"{mnemonic}: offset must be in {-(1 << 20)}..{(1 << 20) - 1} bytes, got {offset}")
            offset &= (1 << 21) - 1
            return word | (offset & 3) << 29 | (offset >> 2) << 5
        lo, width = FIXUP_FIELDS[kind]
        limit = 4 << (width - 1)
        if not isinstance(offset, int) or offset % 4 or not -limit <= offset < limit:
            raise EncodingError(
                f"{mnemonic}: branch offset must be a multiple of 4 in {-limit}..{limit - 4} bytes, got {offset}"
            )
        field_ = (offset >> 2) & ((1 << width) - 1)
        return word | (field_ << lo)

    # -- labels -------------------------------------------------------------
    def new_label(self, name: str = "L") -> Label:
        """A fresh unbound label with a listing-unique name ``.L<name>_<n>``."""
        self._label_count += 1
        return Label(f".L{name}_{self._label_count}")

    def bind(self, label: Label) -> Label:
        """Bind ``label`` to the current position."""
        if label.pos is not None:
            raise EncodingError(f"label {label.name} is already bound")
        label.pos = self.pos
        self._lines.append((None, f"{label.name}:"))
        return label

    def label(self, name: str = "L") -> Label:
        """Create and bind a label here (for backward branches)."""
        return self.bind(self.new_label(name))

    @property
    def pos(self) -> int:
        """Current position in bytes."""
        return 4 * len(self.words)

    # -- results ------------------------------------------------------------
    def code(self) -> bytes:
        """Machine code with every label resolved (little endian)."""
        words = list(self.words)
        for f in self._fixups:
            if f.label.pos is None:
                raise EncodingError(f"{f.mnemonic}: label {f.label.name} is never bound")
            words[f.index] = self._patch(words[f.index], f.label.pos - 4 * f.index, f.kind, f.mnemonic)
        return b"".join(w.to_bytes(4, "little") for w in words)

    def listing(self, addresses: bool = False) -> str:
        """The program as assembly text, one instruction per line.

        With ``addresses`` each instruction line carries its byte offset and
        encoding as a comment (still valid input for llvm-mc).
        """
        words = self.code() if addresses else b""
        out = []
        for index, text in self._lines:
            if index is None:
                out.append(text)
            elif addresses:
                w = int.from_bytes(words[4 * index : 4 * index + 4], "little")
                out.append(f"    {text:<48} // {4 * index:#06x}: {w:08x}")
            else:
                out.append(f"    {text}")
        return "\n".join(out)

    def __len__(self) -> int:
        return len(self.words)


# Mnemonics shared by SVE and NEON/base: SVE operands (z/p registers) go to
# ``SveMixin.sve_<name>``, everything else down the MRO (NEON, then base).
_SVE_OPERANDS = (ZVec, ZReg, ZElem, PVec, PReg, PQual)


def _sve_dispatch(mnemonic: str):
    sve = getattr(SveMixin, "sve_" + mnemonic)
    name = mnemonic + "_" if mnemonic == "and" else mnemonic

    def method(self, *args, **kwargs):
        if args and isinstance(args[0], _SVE_OPERANDS):
            return sve(self, *args, **kwargs)
        return getattr(super(Assembler, self), name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{mnemonic}``: SVE operands go to `SveMixin.sve_{mnemonic}`, others to the NEON/base form."
    return name, method


for _mnemonic in [n[4:] for n in vars(SveMixin) if n.startswith("sve_")]:
    setattr(Assembler, *_sve_dispatch(_mnemonic))
