"""C function signatures of generated kernels and checks of Python call arguments.

``Signature.parse("void(const float*, const float*, float*, int64_t, int64_t)")``
describes what a kernel takes; ``Signature.check(args)`` validates the Python
arguments of a call before any machine code runs (docs/decisions.md, "Arrays in, arrays out"):
pointers must be numpy arrays whose dtype matches the pointee, integers must
fit their C type, floats must be real numbers.

Pure Python plus numpy (no cffi), so the native runtime and the AArch64
emulator share it. Assumes an LP64 ABI (``long`` and ``size_t`` are 64 bits),
true for Linux and macOS on x86-64 and AArch64.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ArgSpec", "Signature", "SCALAR_TYPES"]


@dataclass(frozen=True)
class _Scalar:
    kind: str  # "void" | "int" | "float" | "double"
    ctype: str  # canonical C spelling
    dtype: str | None  # numpy dtype name of the type (None for void)
    bits: int = 0
    signed: bool = True


def _int(ctype: str, bits: int, signed: bool) -> _Scalar:
    return _Scalar("int", ctype, f"{'' if signed else 'u'}int{bits}", bits, signed)


# Spelling (words joined by one space) -> canonical scalar type.
SCALAR_TYPES: dict[str, _Scalar] = {
    "void": _Scalar("void", "void", None),
    "float": _Scalar("float", "float", "float32", 32),
    "double": _Scalar("double", "double", "float64", 64),
    **{f"int{b}_t": _int(f"int{b}_t", b, True) for b in (8, 16, 32, 64)},
    **{f"uint{b}_t": _int(f"uint{b}_t", b, False) for b in (8, 16, 32, 64)},
    "int": _int("int", 32, True),
    "signed": _int("int", 32, True),
    "signed int": _int("int", 32, True),
    "unsigned": _int("unsigned int", 32, False),
    "unsigned int": _int("unsigned int", 32, False),
    "long": _int("long", 64, True),
    "long int": _int("long", 64, True),
    "signed long": _int("long", 64, True),
    "long long": _int("long long", 64, True),
    "unsigned long": _int("unsigned long", 64, False),
    "unsigned long long": _int("unsigned long long", 64, False),
    "size_t": _int("size_t", 64, False),
    "ssize_t": _int("ssize_t", 64, True),
    "ptrdiff_t": _int("ptrdiff_t", 64, True),
    "intptr_t": _int("intptr_t", 64, True),
    "uintptr_t": _int("uintptr_t", 64, False),
}
_TYPE_WORDS = {w for spelling in SCALAR_TYPES for w in spelling.split()}
_KEYWORDS = _TYPE_WORDS | {"const"}
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\*)|(\S))")
_SIG = re.compile(r"^\s*([^()]*?)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class ArgSpec:
    """One parameter.

    ``kind`` is "ptr", "int", "float" or "double"; ``ctype`` the canonical C
    text (e.g. "const float *"); ``const`` whether a pointee is const.
    ``pointee`` is the scalar type behind a pointer ("void" for ``void *``);
    ``dtype`` the numpy dtype name of the pointee (pointers; None for
    ``void *``) or of the value (scalars). ``bits``/``signed`` describe
    integers. ``name`` is the parameter name when the signature gives one.
    """

    kind: str
    ctype: str
    const: bool = False
    pointee: str | None = None
    dtype: str | None = None
    bits: int = 0
    signed: bool = True
    name: str | None = None

    def describe(self, index: int) -> str:
        label = f"argument {index}"
        if self.name:
            label += f" ({self.name})"
        return f"{label} [{self.ctype}]"


def _parse_type(text: str, what: str) -> tuple[_Scalar, int, bool, str | None]:
    """Parse one C type with optional name: (scalar, pointer depth, const pointee, name)."""
    toks: list[str] = []
    for m in _TOKEN.finditer(text):
        if m.group(3):
            raise ValueError(f"{what}: unexpected character {m.group(3)!r} in {text.strip()!r}")
        toks.append(m.group(1) or m.group(2))
    name = None
    if len(toks) > 1 and toks[-1] != "*" and toks[-1] not in _KEYWORDS:
        name = toks.pop()
    star = toks.index("*") if "*" in toks else len(toks)
    head, tail = toks[:star], toks[star:]
    const = "const" in head
    words = [t for t in head if t != "const"]
    if not words:
        raise ValueError(f"{what}: missing type in {text.strip()!r}")
    for t in tail:
        if t not in ("*", "const"):
            raise ValueError(f"{what}: unexpected {t!r} after '*' in {text.strip()!r}")
    depth = tail.count("*")
    spelling = " ".join(words)
    scalar = SCALAR_TYPES.get(spelling)
    if scalar is None:
        supported = ", ".join(sorted({s.ctype for s in SCALAR_TYPES.values()}))
        raise ValueError(f"{what}: unsupported C type {spelling!r} (supported: {supported}, and pointers to them)")
    if depth > 1:
        raise ValueError(f"{what}: pointer to pointer {text.strip()!r} is not supported")
    return scalar, depth, const, name


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Signature:
    """A parsed kernel signature: ``ret`` kind ("void" | "int" | "float" | "double")
    and its C type ``ret_ctype``, the parameters ``args``, and an optional ``name``.
    """

    ret: str
    ret_ctype: str
    args: tuple[ArgSpec, ...]
    name: str | None = None

    @classmethod
    def parse(cls, text: str | Signature) -> Signature:
        """Parse ``"ret(type, type, ...)"`` (optional function and parameter names).

        Raises ValueError naming the problem for malformed or unsupported text.
        """
        if isinstance(text, Signature):
            return text
        if not isinstance(text, str):
            raise TypeError(f"signature must be a str, got {type(text).__name__}")
        m = _SIG.match(text)
        if not m:
            raise ValueError(f"malformed signature {text!r}: expected 'ret(type, ...)'")
        ret_text, params = m.group(1), m.group(2)
        if not ret_text:
            raise ValueError(f"malformed signature {text!r}: missing return type")
        ret, depth, _, fname = _parse_type(ret_text, "return type")
        if depth:
            raise ValueError(f"return type {ret_text.strip()!r}: pointer return values are not supported")
        args: list[ArgSpec] = []
        pieces = params.split(",")
        if len(pieces) == 1 and pieces[0].strip() in ("", "void"):
            pieces = []
        for i, piece in enumerate(pieces):
            if not piece.strip():
                raise ValueError(f"malformed signature {text!r}: parameter {i} is empty")
            scalar, depth, const, pname = _parse_type(piece, f"parameter {i}")
            if depth:
                ctype = f"{'const ' if const else ''}{scalar.ctype} *"
                args.append(ArgSpec("ptr", ctype, const, pointee=scalar.ctype, dtype=scalar.dtype, bits=64, name=pname))
            elif scalar.kind == "void":
                raise ValueError(f"parameter {i}: 'void' is only allowed alone or behind a pointer")
            else:
                args.append(
                    ArgSpec(
                        scalar.kind,
                        scalar.ctype,
                        dtype=scalar.dtype,
                        bits=scalar.bits,
                        signed=scalar.signed,
                        name=pname,
                    )
                )
        return cls(ret.kind, ret.ctype, tuple(args), fname)

    def __str__(self) -> str:
        return f"{self.ret_ctype}({', '.join(a.ctype for a in self.args)})"

    def c_function_pointer(self) -> str:
        """C text of the function-pointer type, e.g. ``"void(*)(const float *, int64_t)"``."""
        return f"{self.ret_ctype}(*)({', '.join(a.ctype for a in self.args) or 'void'})"

    def check(self, args: tuple[Any, ...] | list[Any], *, unchecked: bool = False) -> tuple[Any, ...]:
        """Validate call arguments; return them normalized (ints as int, floats as float).

        Pointers take numpy arrays whose dtype matches the pointee (any dtype
        for ``void *``); with ``unchecked=True`` a Python int address is also
        accepted. Raises TypeError for a wrong count or type, ValueError for
        an integer out of range or a read-only array behind a non-const pointer.
        """
        if len(args) != len(self.args):
            raise TypeError(f"{self}: expected {len(self.args)} arguments, got {len(args)}")
        out: list[Any] = []
        for i, (spec, value) in enumerate(zip(self.args, args, strict=True)):
            if spec.kind == "ptr":
                out.append(_check_pointer(spec, i, value, unchecked))
            elif spec.kind == "int":
                if not _is_int(value):
                    raise TypeError(f"{spec.describe(i)}: expected an integer, got {type(value).__name__}")
                v = int(value)
                lo, hi = (
                    (-(1 << (spec.bits - 1)), (1 << (spec.bits - 1)) - 1) if spec.signed else (0, (1 << spec.bits) - 1)
                )
                if not lo <= v <= hi:
                    raise ValueError(f"{spec.describe(i)}: {v} is out of range [{lo}, {hi}]")
                out.append(v)
            else:
                if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
                    raise TypeError(f"{spec.describe(i)}: expected a real number, got {type(value).__name__}")
                out.append(float(value))
        return tuple(out)


def _check_pointer(spec: ArgSpec, index: int, value: Any, unchecked: bool) -> Any:
    if isinstance(value, np.ndarray):
        if spec.dtype is not None and value.dtype != np.dtype(spec.dtype):
            raise TypeError(
                f"{spec.describe(index)}: expected a numpy array of dtype {spec.dtype}, got dtype {value.dtype}"
            )
        if not spec.const and not value.flags.writeable:
            raise ValueError(f"{spec.describe(index)}: array is read-only but the pointer is not const")
        return value
    if unchecked and _is_int(value):
        address = int(value)
        if not 0 <= address < 1 << 64:
            raise ValueError(f"{spec.describe(index)}: address {address:#x} is not a 64-bit address")
        return address
    expected = f"a numpy array of dtype {spec.dtype}" if spec.dtype else "a numpy array"
    if not unchecked and _is_int(value):
        raise TypeError(f"{spec.describe(index)}: raw integer addresses need an unchecked kernel; expected {expected}")
    raise TypeError(f"{spec.describe(index)}: expected {expected}, got {type(value).__name__}")
