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

Generating a kernel emits hundreds of instructions, most of them forms seen
before (the same FMA on the same registers, the same load at the same
address), so the mnemonic methods sit behind one cache (`_cached`): a form
already encoded appends its bytes and text without checking and encoding the
operands again. The assembler keeps the instructions as parallel lists of
bytes and text (`instructions` builds the `Instruction` objects on demand).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asm.errors import EncodingError
from asm.x86_64.base import BaseMixin
from asm.x86_64.labels import Fixup, Label
from asm.x86_64.simd import SimdMixin
from asm.x86_64.simd_int import IntSimdMixin


@dataclass(slots=True)
class Instruction:
    """One emitted instruction: its bytes (fixups unresolved), text and position."""

    data: bytes
    text: str
    pos: int
    fixup: Fixup | None = None


@dataclass
class Assembler(BaseMixin, SimdMixin, IntSimdMixin):
    """Collects instructions with their text; `code()` resolves labels."""

    name: str = "kernel"
    _data: list[bytes] = field(default_factory=list)  # each instruction's bytes (fixups unresolved)
    _text: list[str] = field(default_factory=list)  # each instruction's text
    _fixups: dict[int, tuple[Fixup, int]] = field(default_factory=dict)  # instruction -> (fixup, position)
    _labels: list[tuple[int, Label]] = field(default_factory=list)  # (instructions before it, label), bind order
    _label_count: int = 0
    _pos: int = 0
    _instructions: list[Instruction] = field(default_factory=list)  # `instructions`, as far as built

    # -- emission -----------------------------------------------------------
    def emit(self, data: bytes, text: str, fixup: Fixup | None = None) -> None:
        """Append one instruction's bytes with its assembly text."""
        data = bytes(data)
        if fixup is not None:
            self._fixups[len(self._data)] = (fixup, self._pos)
        self._data.append(data)
        self._text.append(text)
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
        self._labels.append((len(self._data), label))
        return label

    def label(self, name: str = "L") -> Label:
        """Create and bind a label here (for backward branches)."""
        return self.bind(self.new_label(name))

    @property
    def pos(self) -> int:
        """Current position in bytes."""
        return self._pos

    @property
    def instructions(self) -> list[Instruction]:
        """Every emitted instruction, in order (built from the assembler's lists on demand)."""
        built = self._instructions
        if len(built) < len(self._data):
            pos = built[-1].pos + len(built[-1].data) if built else 0
            for i in range(len(built), len(self._data)):
                data = self._data[i]
                fix = self._fixups.get(i)
                built.append(Instruction(data, self._text[i], pos, None if fix is None else fix[0]))
                pos += len(data)
        return built

    # -- results ------------------------------------------------------------
    @staticmethod
    def _patch(data: bytes, f: Fixup, pos: int) -> bytes:
        """``data`` (an instruction at ``pos``) with its fixup field filled in."""
        if f.label.pos is None:
            raise EncodingError(f"{f.mnemonic}: label {f.label.name} is never bound")
        rel = f.label.pos + f.addend - (pos + len(data))
        lo, hi = -(1 << (8 * f.width - 1)), (1 << (8 * f.width - 1)) - 1
        if not lo <= rel <= hi:
            kind = "short (rel8)" if f.width == 1 else "rel32"
            raise EncodingError(f"{f.mnemonic}: {kind} offset to {f.label.name} must be in {lo}..{hi} bytes, got {rel}")
        field_ = (rel & ((1 << (8 * f.width)) - 1)).to_bytes(f.width, "little")
        return data[: f.offset] + field_ + data[f.offset + f.width :]

    def instruction_bytes(self) -> list[bytes]:
        """Each instruction's final bytes, in order, with labels resolved."""
        out = list(self._data)
        for i, (f, pos) in self._fixups.items():
            out[i] = self._patch(out[i], f, pos)
        return out

    def code(self) -> bytes:
        """Machine code with every label resolved."""
        return b"".join(self.instruction_bytes())

    def listing(self, addresses: bool = False) -> str:
        """The program in Intel syntax (``.intel_syntax noprefix``), one instruction per line.

        With ``addresses`` each instruction line carries its offset and bytes
        as a ``//`` comment (still valid input for llvm-mc).
        """
        if addresses:
            lines, pos = [], 0
            for data, text in zip(self.instruction_bytes(), self._text, strict=True):
                lines.append(f"    {text:<56} // {pos:#06x}: {data.hex(' ')}")
                pos += len(data)
        else:
            lines = ["    " + text for text in self._text]
        if self._labels:  # each label above the instruction that follows it (in bind order)
            merged, start = [], 0
            for i, label in self._labels:
                merged += lines[start:i]
                merged.append(f"{label.name}:")
                start = i
            lines = merged + lines[start:]
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self._data)


# -- the encoding cache ---------------------------------------------------------------------------
#: the most instruction forms `_ENCODED` keeps (it is emptied when full)
ENCODED_MAX = 1 << 15
#: (encoder, operands..., their types...) -> (bytes, text) of an instruction emitted without a fixup
_ENCODED: dict[tuple, tuple[bytes, str]] = {}


def encoding_cache_clear() -> None:
    """Forget every cached instruction encoding (`_cached`)."""
    _ENCODED.clear()


def _cached(encode):
    """``encode`` (an instruction method) behind a cache of its result: an instruction's bytes and
    text are a function of the mnemonic and the operands alone (registers are interned and compare
    by identity, addresses and memory operands by value), so a form seen before is appended from
    the cache (as `Assembler.emit` would) without checking or encoding its operands again. The
    operands' types are part of the key (``1`` and ``True`` are equal but only one is an
    immediate). Calls with keyword arguments, unhashable operands, and instructions with a label
    fixup (their bytes depend on positions) go to ``encode`` every time; so does anything that
    raises."""

    def method(self, *operands, **options):
        if options:
            return encode(self, *operands, **options)
        key = (encode, *operands, *map(type, operands))
        try:
            hit = _ENCODED.get(key)
        except TypeError:  # an unhashable operand: the encoder says what is wrong with it
            return encode(self, *operands)
        data = self._data
        if hit is not None:
            data.append(hit[0])
            self._text.append(hit[1])
            self._pos += len(hit[0])
            return None
        n = len(data)
        encode(self, *operands)
        if len(data) == n + 1 and n not in self._fixups:
            if len(_ENCODED) >= ENCODED_MAX:
                _ENCODED.clear()
            _ENCODED[key] = (data[n], self._text[n])
        return None

    method.__name__ = encode.__name__
    method.__qualname__ = f"Assembler.{encode.__name__}"
    method.__doc__ = encode.__doc__
    method.__wrapped__ = encode
    return method


for _name in sorted({*vars(BaseMixin), *vars(SimdMixin), *vars(IntSimdMixin)}):
    _fn = getattr(Assembler, _name)
    if not _name.startswith("_") and callable(_fn):
        setattr(Assembler, _name, _cached(_fn))
