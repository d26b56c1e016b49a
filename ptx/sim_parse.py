"""Parsing PTX text into kernels, instructions and operands for the simulator."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from . import types as T
from .sim_memory import SHARED_BASE, SimError

# --------------------------------------------------------------------------- parsing


@dataclass
class Operand:
    kind: str  # reg, imm, sreg, sym, addr, vec, label
    name: str = ""
    value: int = 0  # imm: bits / int value ; addr: offset
    float_bits: int | None = None  # 0f / 0d literals: (bits, width)
    items: list[Operand] = field(default_factory=list)
    pred: str | None = None  # shfl "d|p"
    # imm: read-only bit arrays per (type, thread count), built on first use (see _Cta.raw)
    bits: dict = field(default_factory=dict, init=False, repr=False, compare=False)


@dataclass
class Instr:
    line: int
    text: str
    op: str
    mods: tuple[str, ...]
    ops: list[Operand]
    guard: str | None = None
    negate: bool = False
    guard_op: Operand | None = field(default=None, init=False, repr=False, compare=False)
    names_space: bool = field(default=False, init=False, repr=False, compare=False)
    # the registers it writes or reads directly (not through an address): if none holds a tracked
    # state space and it names none, the instruction changes no state space (see sim_rules)
    space_regs: frozenset = field(default=frozenset(), init=False, repr=False, compare=False)
    cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see _shfl

    def __post_init__(self) -> None:
        if self.guard is not None:
            self.guard_op = Operand("reg", name=self.guard)
        # does it name a symbol or convert a state space (give a register a state space to track)?
        names_space, regs = self.op == "cvta", []
        for o in self.ops:
            if o.kind == "reg":
                regs.append(o.name)
            elif o.kind == "vec":
                regs += [r.name for r in o.items if r.kind == "reg"]
            elif o.kind == "sym":
                names_space = True
        self.names_space, self.space_regs = names_space, frozenset(regs)


@dataclass
class KernelCode:
    name: str
    params: list[tuple[str, str]]  # (type, name)
    shared: dict[str, tuple[int, int]]  # name -> (shared address, nbytes)
    shared_end: int
    code: list[Instr]
    labels: dict[str, int]
    reqntid: tuple[int, ...] | None
    param_bytes: dict[str, int] = field(default_factory=dict)  # array parameters (tensor maps): name -> bytes
    extern: dict[str, int] = field(default_factory=dict)  # dynamic (.extern) shared arrays: name -> align
    param_offset: dict[str, int] = field(default_factory=dict)  # .param-space address of each parameter
    param_end: int = 0  # bytes of the .param space (the window of its generic addresses)


_SPECIAL = re.compile(r"^%(tid|ntid|ctaid|nctaid)\.[xyz]$|^%(laneid|warpid)$")
_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(")
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+(\w+)(?:\[(\d+)\])?")
_EXTERN = re.compile(r"^\.extern\s+\.shared\s+\.align\s+(\d+)\s+\.\w+\s+(\w+)\[\]\s*;")
_SHARED = re.compile(r"\.shared\s+\.align\s+(\d+)\s+\.(\w+)\s+(\w+)\[(\d+)\]")
_LABEL = re.compile(r"^([$\w]+):$")
_GUARD = re.compile(r"^@(!?)(%\w+)\s+(.*)$")


_ADDRESS = re.compile(r"^([%$\w.]+)\s*([+-]\s*\d+)?$")
_F32_LIT = re.compile(r"^0[fF][0-9a-fA-F]{8}$")
_F64_LIT = re.compile(r"^0[dD][0-9a-fA-F]{16}$")
_INT_LIT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uU]?$")
_NAME = re.compile(r"^[$A-Za-z_][$\w]*$")


def _split(s: str) -> list[str]:
    if "[" not in s and "{" not in s:  # nothing nested: every comma splits
        out = [x.strip() for x in s.split(",")]
        if not out[-1]:
            out.pop()
        return out
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


@lru_cache(maxsize=1 << 16)
def _operand(tok: str, labels_ok: bool) -> Operand:
    """The operand token ``tok`` parsed. Cached by text: operands are shared between
    instructions and kernels, so nothing may change one after parsing (the imm bit arrays of
    ``Operand.bits`` are a cache of values that depend only on the operand)."""
    tok = tok.strip()
    if tok.startswith("{"):
        return Operand("vec", items=[_operand(t, False) for t in _split(tok[1:-1])])
    if tok.startswith("[") and "{" in tok:  # [tensorMap, {c0, c1, ...}]
        base, vec = tok[1:-1].split(",", 1)
        return Operand("tmap", name=base.strip(), items=[_operand(base, False), _operand(vec, False)])
    if tok.startswith("["):
        inner = tok[1:-1].strip()
        m = _ADDRESS.match(inner)
        if not m:
            raise SimError(f"cannot parse address {tok!r}")
        off = int(m.group(2).replace(" ", "")) if m.group(2) else 0
        base = m.group(1)
        return Operand("addr", name=base, value=off, items=[_operand(base, False)])
    if tok == "_":
        return Operand("sink", name="_")
    if "|" in tok:
        d, p = tok.split("|")
        return replace(_operand(d, False), pred=p.strip())  # a copy: the cached d stays as it is
    if tok.startswith("%"):
        return Operand("sreg" if _SPECIAL.match(tok) else "reg", name=tok)
    if _F32_LIT.match(tok):
        return Operand("imm", value=int(tok[2:], 16), float_bits=32)
    if _F64_LIT.match(tok):
        return Operand("imm", value=int(tok[2:], 16), float_bits=64)
    if _INT_LIT.match(tok):
        return Operand("imm", value=int(tok.rstrip("uU"), 0))
    if _NAME.match(tok):
        return Operand("label" if labels_ok else "sym", name=tok)
    raise SimError(f"cannot parse operand {tok!r}")


class Program:
    """The kernels of a PTX module text, parsed once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.kernels: dict[str, KernelCode] = {}
        lines = text.splitlines()
        self.extern = {m.group(2): int(m.group(1)) for m in (_EXTERN.match(x.strip()) for x in lines) if m}
        i = 0
        while i < len(lines):
            m = _ENTRY.search(lines[i])
            if not m:
                i += 1
                continue
            i = self._kernel(m.group(1), lines, i)

    def _kernel(self, name: str, lines: list[str], i: int) -> int:
        params, head = [], []
        while "{" not in lines[i]:
            head.append(lines[i])
            i += 1
        found = _PARAM.findall("\n".join(head))
        params = [(t, n) for _, t, n, _ in found]
        param_bytes = {n: int(c) * T.bits(t) // 8 for _, t, n, c in found if c}
        # the .param space as the ABI lays it out: in order, each parameter at its alignment
        param_offset, pend = {}, 0
        for al, t, n, c in found:
            size = max(1, T.bits(t) // 8) * (int(c) if c else 1)
            align = int(al) if al else max(1, T.bits(t) // 8)
            pend = -(-pend // align) * align
            param_offset[n] = pend
            pend += size
        reqntid = None
        m = re.search(r"\.reqntid\s+([\d,\s]+)", "\n".join(head))
        if m:
            reqntid = tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
        i += 1
        code: list[Instr] = []
        labels: dict[str, int] = {}
        shared: dict[str, tuple[int, int]] = {}
        end = SHARED_BASE
        while i < len(lines) and lines[i].strip() != "}":
            raw, lineno = lines[i].split("//")[0].strip(), i + 1
            i += 1
            if not raw:
                continue
            ms = _SHARED.match(raw)
            if ms:
                align, t, sname, count = int(ms.group(1)), ms.group(2), ms.group(3), int(ms.group(4))
                end = -(-end // align) * align
                nbytes = count * T.bits(t) // 8
                shared[sname] = (end, nbytes)
                end += nbytes
                continue
            if raw.startswith("."):
                continue
            ml = _LABEL.match(raw)
            if ml:
                labels[ml.group(1)] = len(code)
                continue
            code.append(self._instr(raw, lineno))
        for ins in code:
            for o in ins.ops:
                if o.kind == "label" and o.name not in labels:
                    raise SimError(f"{name}: line {ins.line}: label {o.name} is not defined")
        self.kernels[name] = KernelCode(
            name,
            [(t, n) for t, n in params],
            shared,
            end,
            code,
            labels,
            reqntid,
            param_bytes,
            dict(self.extern),
            param_offset,
            pend,
        )
        return i

    @staticmethod
    def _instr(raw: str, lineno: int) -> Instr:
        text = raw.rstrip(";").strip()
        guard, neg = None, False
        m = _GUARD.match(text)
        if m:
            neg, guard, text = m.group(1) == "!", m.group(2), m.group(3)
        parts = text.split(None, 1)
        opcode = parts[0].split(".")
        rest = parts[1] if len(parts) > 1 else ""
        ops = [_operand(t, opcode[0] == "bra") for t in _split(rest)]
        return Instr(lineno, raw, opcode[0], tuple(opcode[1:]), ops, guard, neg)


@lru_cache(maxsize=64)
def _program(text: str) -> Program:
    return Program(text)
