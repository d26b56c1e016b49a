"""A functional simulator for the PTX this package emits: kernels run on the CPU, checked.

    mem = sim.Memory()
    x = mem.upload(np.arange(n, dtype=np.float32))          # device address (int)
    y = mem.alloc(4 * n)
    sim.launch(module.text(), "vadd", grid=(g, 1, 1), block=(256, 1, 1), args=(x, x, y, n), memory=mem)
    mem.read(y, np.float32, n)

It parses the PTX *text* (what ptxas would get) and executes one CTA at a time, all its threads
as numpy vectors. Threads diverge freely: each has its own program counter and the simulator
always runs the threads at the lowest one (min-PC reconvergence), which is exact for the
functional result of structured code. Nothing undefined passes silently; a :class:`SimError`
names the kernel, the PTX line and the threads when a kernel

- reads or writes global memory outside every allocation, or misaligned;
- uses an address in a state space the instruction does not take, or aligned less than the PTX ISA
  requires (the rule table :data:`ptx.sim_rules.RULES`, e.g. the .param-space address ``mov`` gives
  as ``cp.async.bulk.tensor``'s tensorMap, which wants a generic one): every address the simulator
  computes carries its state space (param, shared::cta, shared::cluster, global, generic), and the
  error names the rule;
- touches shared memory outside its arrays, reads bytes a ``cp.async`` has not completed
  (no ``cp.async.wait_group`` yet), or races: a byte written by one warp and read or written by
  another with no ``bar.sync`` between them (detected per barrier epoch, whatever the order);
- reads a register before any instruction wrote it (per thread);
- runs ``mma.sync.aligned`` / ``ldmatrix.sync.aligned`` with part of a warp, ``shfl.sync`` with
  a membermask that is not the set of threads executing it, or takes a lane outside it;
- waits at ``bar.sync`` while other threads of the CTA wait elsewhere or run to a different one;
- runs for more than ``max_steps`` instructions.

Numerics: integer ops wrap like the hardware; f32/f64 arithmetic is IEEE round-to-nearest
(``fma`` is computed in float64 and rounded once more, which can differ in the last bit in rare
cases); ``mma.sync`` and ``wgmma`` multiply the quantized inputs exactly and accumulate in float64
(the tensor core's internal order and precision are not modelled; ``wgmma`` reads tf32 operands
from raw fp32 in shared memory by truncating them to 10 mantissa bits, as an H200 does);
cvt.rna.tf32 (NaN: the H200's 0x7fc00000 with the sign kept), f16/bf16 packing
and the f32 <-> f16/bf16 conversions are bit-exact. Supported: the instructions
:mod:`ptx.builder` emits, except ``.b128`` registers and non-.rn float arithmetic rounding.
The simulator is slow (tens of microseconds per warp instruction): it is for tests of small
launches, never for timing.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from functools import cache, lru_cache

import numpy as np

from . import mma as _mma
from . import sim_rules as R
from . import types as T

__all__ = ["SimError", "Memory", "Program", "LaunchStats", "launch"]

SHARED_BASE = 1024  #: shared-window address of the first .shared array (0..1023 is invalid)
GENERIC_SHARED = 1 << 48  #: generic address of shared-window address 0 (cvta.shared)
GLOBAL_BASE = 1 << 40  #: first global allocation
PARAM_BASE = 1 << 47  #: generic address of the kernel parameters (cvta.param of .param-space address 0)
_GAP = 4096  #: unallocated bytes between global allocations (out-of-bounds accesses fault)
_MASK = {1: 1, 8: 0xFF, 16: 0xFFFF, 32: 0xFFFFFFFF, 64: 0xFFFFFFFFFFFFFFFF}
_U64 = np.uint64


class SimError(Exception):
    """A kernel did something undefined (or the simulator does not support it)."""


@cache
def _arange(n: int) -> np.ndarray:
    """np.arange(n) (int64), read-only: shared by every caller."""
    a = np.arange(n, dtype=np.int64)
    a.flags.writeable = False
    return a


# --------------------------------------------------------------------------- global memory


class Memory:
    """Simulated global memory: separate allocations with unmapped gaps between them."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._bufs: list[np.ndarray] = []
        self._next = GLOBAL_BASE
        self._table: tuple = (None, -1, None, None)  # (_bases, its length, bases, ends as arrays)
        self._lock = threading.Lock()  # allocations from several host threads (as cuMemAlloc allows)

    def alloc(self, nbytes: int, align: int = 256) -> int:
        """A zeroed allocation of ``nbytes`` bytes; returns its device address."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        buf = np.zeros(max(nbytes, 1), np.uint8)
        with self._lock:
            base = -(-self._next // align) * align
            self._bufs.append(buf)  # before its base: a reader that finds the base finds the buffer
            self._bases.append(base)
            self._next = base + max(nbytes, 1) + _GAP
        return base

    def upload(self, host: np.ndarray) -> int:
        """Copy ``host`` (any dtype, C-contiguous bytes) into a new allocation; its address."""
        raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
        addr = self.alloc(raw.size)
        self.write(addr, raw)
        return addr

    def _buffer(self, addr: int, nbytes: int) -> tuple[np.ndarray, int]:
        i = int(np.searchsorted(self._bases, addr, side="right")) - 1
        if i < 0 or addr + nbytes > self._bases[i] + self._bufs[i].size:
            raise SimError(f"host access to {nbytes} bytes at {addr:#x}: not inside one allocation")
        return self._bufs[i], addr - self._bases[i]

    def write(self, addr: int, host: np.ndarray) -> None:
        """Copy the bytes of ``host`` to device address ``addr``."""
        raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
        buf, off = self._buffer(addr, raw.size)
        buf[off : off + raw.size] = raw

    def read(self, addr: int, dtype, count: int) -> np.ndarray:
        """``count`` elements of ``dtype`` from device address ``addr`` (a copy)."""
        dt = np.dtype(dtype)
        buf, off = self._buffer(addr, dt.itemsize * count)
        return buf[off : off + dt.itemsize * count].copy().view(dt)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end addresses of the allocations (arrays, rebuilt after an allocation)."""
        lst, size, bases, ends = self._table
        if lst is not self._bases or size != len(self._bases):
            bases = np.asarray(self._bases, _U64)
            ends = bases + np.asarray([b.size for b in self._bufs[: len(bases)]], _U64)
            self._table = (self._bases, len(bases), bases, ends)
        return bases, ends

    def locate(self, addrs: np.ndarray, width: int, what: str) -> tuple[np.ndarray, np.ndarray]:
        """(allocation index, offset) of each address; SimError unless [a, a+width) is mapped."""
        a = addrs.astype(_U64)
        if len(self._bases) == 0:
            raise SimError(f"{what} at {int(a[0]):#x}: no global memory is allocated")
        bases, ends = self._arrays()
        i = np.searchsorted(bases, a, side="right") - 1
        ok = i >= 0
        ic = np.maximum(i, 0)
        ok &= a + _U64(width) <= ends[ic]
        if np.count_nonzero(ok) != ok.size:
            bad = int(a[~ok][0])
            raise SimError(f"{what} of {width} bytes at {bad:#x} is outside every allocation")
        return ic, (a - bases[ic]).astype(np.int64)

    def gather(self, addrs: np.ndarray, width: int, what: str) -> np.ndarray:
        """Bytes (n, width) at each address."""
        idx, off = self.locate(addrs, width, what)
        cols = _arange(width)
        if idx.size and not np.count_nonzero(idx != idx[0]):  # all in one allocation
            return self._bufs[idx[0]][off[:, None] + cols]
        out = np.empty((addrs.size, width), np.uint8)
        for j in np.unique(idx):
            sel = idx == j
            out[sel] = self._bufs[j][off[sel, None] + cols]
        return out

    def scatter(self, addrs: np.ndarray, data: np.ndarray, what: str) -> None:
        """Store bytes ``data`` (n, width) at each address (later threads win on overlap)."""
        width = data.shape[1]
        idx, off = self.locate(addrs, width, what)
        cols = _arange(width)
        if idx.size and not np.count_nonzero(idx != idx[0]):  # all in one allocation
            self._bufs[idx[0]][off[:, None] + cols] = data
            return
        for j in np.unique(idx):
            sel = idx == j
            self._bufs[j][off[sel, None] + cols] = data[sel]


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
    cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see _shfl

    def __post_init__(self) -> None:
        if self.guard is not None:
            self.guard_op = Operand("reg", name=self.guard)
        # does it name a symbol or convert a state space (give a register a state space to track)?
        self.names_space = self.op == "cvta" or any(o.kind == "sym" for o in self.ops)


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


def _operand(tok: str, labels_ok: bool) -> Operand:
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
        o = _operand(d, False)
        o.pred = p.strip()
        return o
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


# --------------------------------------------------------------------------- value conversion


def _width(t: str) -> int:
    return 1 if t == "pred" else T.bits(t)


def _from_bits_fn(t: str):
    """The conversion of raw register bits (uint64) to typed values of type ``t``."""
    k, w = T.kind(t), _width(t)
    if t == "pred":
        return lambda raw: (raw & _U64(1)).astype(bool)
    if t == "f32" or t == "tf32":  # uint64 -> uint32 keeps the low 32 bits
        return lambda raw: raw.astype(np.uint32).view(np.float32)
    if t == "f64":
        return lambda raw: raw.view(np.float64)
    if t == "f16":
        return lambda raw: raw.astype(np.uint16).view(np.float16)
    if t == "bf16":
        return lambda raw: _mma.bf16_bits_to_f32(raw.astype(np.uint16))
    if w == 64:
        return (lambda raw: raw.view(np.int64)) if k == "s" else (lambda raw: raw)
    narrow = np.dtype(f"uint{w}")
    if k == "s":  # sign-extend: the low w bits as a signed w-bit integer
        signed = np.dtype(f"int{w}")
        return lambda raw: raw.astype(narrow).view(signed).astype(np.int64)
    return lambda raw: raw.astype(narrow).astype(np.int64)


def _to_bits_fn(t: str):
    """The conversion of typed values (an array) of type ``t`` to raw bits (uint64)."""
    w = _width(t)
    if t == "pred":
        return lambda v: v.astype(_U64)
    if t in ("f32", "tf32"):
        return lambda v: np.asarray(v, np.float32).view(np.uint32).astype(_U64)
    if t == "f64":
        return lambda v: np.asarray(v, np.float64).view(_U64)
    if t == "f16":

        def f16(v):
            with np.errstate(over="ignore"):  # out of range rounds to inf, as cvt.rn.f16.f32 does
                return np.asarray(v, np.float16).view(np.uint16).astype(_U64)

        return f16
    if t == "bf16":
        return lambda v: _mma.f32_to_bf16_bits(v).astype(_U64)
    mask = _U64(_MASK[w])
    if w == 64:  # no bits to clear
        return lambda v: v if v.dtype == _U64 else v.astype(np.int64).view(_U64)
    return lambda v: (v if v.dtype == _U64 else v.astype(np.int64).view(_U64)) & mask


_FROM_BITS = {t: _from_bits_fn(t) for t in T.TYPES if t != "b128"}
_TO_BITS = {t: _to_bits_fn(t) for t in T.TYPES if t != "b128"}


def _from_bits(raw: np.ndarray, t: str) -> np.ndarray:
    """Typed values of raw register bits (uint64)."""
    return _FROM_BITS[t](raw)


def _to_bits(v, t: str, n: int) -> np.ndarray:
    """Raw bits (uint64, length n) of typed values ``v``."""
    out = _TO_BITS[t](np.asarray(v))
    return out if out.shape == (n,) else np.broadcast_to(out, (n,))


def _misaligned(a: np.ndarray, width: int) -> np.ndarray:
    """Nonzero where address ``a`` is not a multiple of ``width``."""
    return a & (width - 1) if width & (width - 1) == 0 else a % width


def _sel(c: _Cta, a: np.ndarray, exe: np.ndarray) -> np.ndarray:
    """a[exe] (``a`` itself when every thread executes: do not change it in place)."""
    return a if exe is c.ones else a[exe]


def _tids(c: _Cta, exe: np.ndarray) -> np.ndarray:
    """np.flatnonzero(exe)."""
    return c.tids if exe is c.ones else np.flatnonzero(exe)


def _imm_bits(o: Operand, t: str, n: int) -> np.ndarray:
    """Raw bits (uint64, length n, read-only) of an immediate operand read as type ``t``."""
    if o.float_bits == 32 and t == "f64":
        v = np.float64(np.uint32(o.value).view(np.float32))
        out = np.full(n, np.float64(v).view(_U64), _U64)
    elif o.float_bits is not None:
        out = np.full(n, o.value, _U64)
    elif T.is_float(t) and t != "tf32":
        out = _to_bits(np.full(n, float(o.value)), t, n).copy()
    else:
        out = np.full(n, o.value & _MASK[64], _U64)
    out.flags.writeable = False
    return out


# --------------------------------------------------------------------------- one CTA


@dataclass
class LaunchStats:
    """What a launch executed: CTAs, warp-instructions, released barriers, completed cp.async."""

    ctas: int = 0
    warp_instructions: int = 0
    barriers: int = 0
    async_copies: int = 0


class _Cta:
    def __init__(
        self,
        k: KernelCode,
        mem: Memory,
        params: dict,
        ctaid,
        nctaid,
        block,
        stats,
        max_steps,
        dyn_shared=0,
        pspace=None,
    ):
        self.k, self.mem, self.params, self.stats, self.max_steps = k, mem, params, stats, max_steps
        self.pspace = pspace or {}  # param-space address -> (name, bytes) of array parameters
        nx, ny, nz = block
        n = nx * ny * nz
        self.n = n
        lin = np.arange(n, dtype=np.int64)
        self.sregs = {
            "%tid.x": lin % nx,
            "%tid.y": (lin // nx) % ny,
            "%tid.z": lin // (nx * ny),
            "%laneid": lin % 32,
            "%warpid": lin // 32,
        }
        for ax, i in zip("xyz", range(3), strict=True):
            self.sregs[f"%ntid.{ax}"] = np.full(n, block[i], np.int64)
            self.sregs[f"%ctaid.{ax}"] = np.full(n, ctaid[i], np.int64)
            self.sregs[f"%nctaid.{ax}"] = np.full(n, nctaid[i], np.int64)
        self.sregs_u64 = {name: v.astype(_U64) for name, v in self.sregs.items()}
        for v in self.sregs_u64.values():
            v.flags.writeable = False
        self.lane, self.warp = lin % 32, lin // 32
        self.nwarps = -(-n // 32)
        self._pad = self.nwarps * 32 - n  # threads to add so that warps reshape as rows of 32
        self.ones = np.ones(n, bool)  # the mask of every thread; `exe is self.ones` is a fast path
        self.ones.flags.writeable = False
        self.tids = _arange(n)  # the indices of every thread (np.flatnonzero(self.ones))
        self._wv: dict[int, np.ndarray] = {}
        self.regs: dict[str, np.ndarray] = {}
        self.defined: dict[str, np.ndarray] = {}
        self.space: dict[str, np.ndarray] = {}  # registers holding addresses: state-space codes per thread (sim_rules)
        self.full_def: set[str] = set()  # registers defined in every thread (their reads need no check)
        self.shared = dict(k.shared)
        self.shared_end = k.shared_end
        for name, align in k.extern.items():  # dynamic shared memory: aligned as declared, no more
            base = -(-self.shared_end // 1024) * 1024 + (align if align < 1024 else 0)
            self.shared[name] = (base, dyn_shared)
            self.shared_end = base + dyn_shared
        if dyn_shared and not k.extern:
            raise SimError(f"{k.name}: {dyn_shared} bytes of dynamic shared memory but no .extern .shared array")
        self.smem = np.zeros(self.shared_end, np.uint8)
        size = self.shared_end
        self.w_warp = np.full(size, -1, np.int64)
        self.w_epoch = np.full(size, -1, np.int64)
        self.r_warp = np.full(size, -1, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)
        self.pending = np.zeros(size, np.int32)
        self.epoch = 0
        self.committed = np.zeros(n, np.int64)
        self.copies: list[dict] = []
        self.ctaid = ctaid
        # Hopper state: mbarriers, bulk tensor copies in flight, wgmma groups, proxy fences
        self.mbar: dict[int, dict] = {}
        self.mb_wait = np.full(n, -1, np.int64)  # mbarrier a thread is parked on (try_wait), -1: none
        self.tma: list[dict] = []
        self.async_reads = np.zeros(size, np.int32)  # bytes read by wgmma operations not yet waited for
        self.proxy_dirty = np.zeros(size, bool)  # generic writes not yet ordered by fence.proxy.async
        self.track = any(i.op == "wgmma" for i in k.code)
        self.step = 0
        self.cur_ins: Instr | None = None
        self.fence_step = np.full(n, -1, np.int64)
        self.gen_write: dict[str, np.ndarray] = {}
        # per accumulator register: wgmma operations not yet retired that write it, per thread (a
        # count: groups may chain on the same accumulators, each retiring at its own wait_group)
        self.inflight: dict[str, np.ndarray] = {}
        self.wg_open: dict[int, list] = {}
        self.wg_groups: dict[int, list] = {}

    # -- errors ------------------------------------------------------------------------------
    def fail(self, ins: Instr, msg: str, threads=None) -> None:
        who = ""
        if threads is not None:
            tids = np.flatnonzero(threads)[:4].tolist()
            who = f" (threads {tids}{'...' if np.count_nonzero(threads) > 4 else ''})"
        raise SimError(f"{self.k.name}: line {ins.line}: `{ins.text}`: {msg}; CTA {self.ctaid}{who}")

    # -- registers ---------------------------------------------------------------------------
    def raw(self, ins: Instr, o: Operand, t: str, exe: np.ndarray) -> np.ndarray:
        """Raw bits (uint64, one per thread) of a source operand."""
        if o.kind == "reg":
            if self.inflight and o.name in self.inflight and (self.inflight[o.name][exe] > 0).any():
                self.fail(ins, f"reads {o.name}, an accumulator of a wgmma not yet waited for (wgmma.wait_group)", exe)
            if o.name in self.full_def:
                return self.regs[o.name]
            r = self.regs.get(o.name)
            d = self.defined.get(o.name)
            if r is None or not d[exe].all():
                bad = exe if d is None else exe & ~d
                self.fail(ins, f"reads {o.name} before it is written", bad)
            return r
        if o.kind == "imm":
            v = o.bits.get((t, self.n))
            if v is None:
                v = o.bits[(t, self.n)] = _imm_bits(o, t, self.n)
            return v
        if o.kind == "sreg":
            return self.sregs_u64[o.name]
        if o.kind == "sym":
            if o.name in self.shared:
                return np.full(self.n, self.shared[o.name][0], _U64)
            if o.name in self.k.param_offset:  # its address in the .param state space (not generic)
                return np.full(self.n, self.k.param_offset[o.name], _U64)
            self.fail(ins, f"unknown symbol {o.name}")
        self.fail(ins, f"operand kind {o.kind} cannot be read as a value")
        raise AssertionError  # unreachable

    def get(self, ins: Instr, o: Operand, t: str, exe: np.ndarray) -> np.ndarray:
        return _FROM_BITS[t](self.raw(ins, o, t, exe))

    def put(self, name: str, value, t: str, exe: np.ndarray) -> None:
        """Write typed ``value`` (a float for float types: use :meth:`put_raw` for bit patterns)."""
        self.put_raw(name, _to_bits(value, t, self.n), exe)

    def put_raw(self, name: str, bits: np.ndarray, exe: np.ndarray) -> None:
        """Write raw register bits (uint64) in the threads of ``exe``."""
        if self.track:
            if name in self.inflight and (self.inflight[name][exe] > 0).any():
                self.fail(self.cur_ins, f"writes {name}, an accumulator of a wgmma not yet waited for", exe)
            g = self.gen_write.get(name)
            self.gen_write[name] = np.where(exe, self.step, -1 if g is None else g)
        if exe is self.ones:  # every thread writes: the bits themselves (registers are never changed in place)
            if bits.strides != (8,):
                bits = bits.copy()
            bits.flags.writeable = False
            self.regs[name] = bits
            self.defined[name] = self.ones
            self.full_def.add(name)
            return
        old = self.regs.get(name)
        if old is None:
            self.regs[name] = np.where(exe, bits, _U64(0))
            self.defined[name] = exe.copy()
        else:
            self.regs[name] = np.where(exe, bits, old)
            if name not in self.full_def:
                self.defined[name] = self.defined[name] | exe
                if np.count_nonzero(self.defined[name]) == self.n:
                    self.full_def.add(name)

    # -- shared memory -----------------------------------------------------------------------
    def _smem_index(self, ins, addrs: np.ndarray, width: int, threads: np.ndarray, rule="access-align") -> np.ndarray:
        a = addrs.astype(np.int64)
        bad = (a < SHARED_BASE) | (a + width > self.shared_end)
        if np.count_nonzero(bad):
            self.fail(
                ins,
                f"shared access of {width} bytes at {int(a[bad][0])} is outside the .shared arrays "
                f"[{SHARED_BASE}, {self.shared_end})",
                self._mask(threads[bad]),
            )
        mis = _misaligned(a, width)
        if np.count_nonzero(mis):
            self.fail(
                ins,
                R.message(rule, f"misaligned shared access of {width} bytes at {int(a[mis != 0][0])}"),
                self._mask(threads[mis != 0]),
            )
        return a[:, None] + _arange(width)

    def _warps_of(self, threads: np.ndarray, width: int) -> np.ndarray:
        """The warp of each byte (``width`` per thread) that ``threads`` access."""
        if threads is self.tids:  # every thread: cached
            wv = self._wv.get(width)
            if wv is None:
                wv = self._wv[width] = np.repeat(self.warp, width)
                wv.flags.writeable = False
            return wv
        return np.repeat(self.warp[threads], width)

    def in_flight(self) -> bool:
        """Are cp.async or bulk tensor copies in flight (else no shared byte is pending)?"""
        return bool(self.copies) or bool(self.tma)

    def _mask(self, tids: np.ndarray) -> np.ndarray:
        m = np.zeros(self.n, bool)
        m[tids] = True
        return m

    def smem_read(self, ins, addrs, width, threads, rule="access-align") -> np.ndarray:
        """Bytes (n, width) of shared memory; checks pending async copies and races (``rule``:
        the alignment rule the access follows)."""
        idx = self._smem_index(ins, addrs, width, threads, rule)
        flat, wv = idx.reshape(-1), self._warps_of(threads, width)
        if self.in_flight() and np.count_nonzero(self.pending[flat] > 0):
            self.fail(
                ins, "reads shared memory that a cp.async has not completed (missing wait_group?)", self._mask(threads)
            )
        race = (self.w_epoch[flat] == self.epoch) & (self.w_warp[flat] != wv)
        if np.count_nonzero(race):
            j = int(np.flatnonzero(race)[0])
            self.fail(
                ins,
                f"race: warp {wv[j]} reads shared byte {flat[j]} that warp {self.w_warp[flat[j]]} "
                "wrote with no bar.sync in between",
            )
        fresh = self.r_epoch[flat] != self.epoch
        self.r_warp[flat[fresh]] = wv[fresh]
        self.r_epoch[flat] = self.epoch
        multi = self.r_warp[flat] != wv
        self.r_warp[flat[multi]] = -2
        return self.smem[idx]

    def _check_write(self, ins, flat, wv, what="writes"):
        same = self.epoch
        raw_ = (self.w_epoch[flat] == same) & (self.w_warp[flat] != wv)
        war = (self.r_epoch[flat] == same) & (self.r_warp[flat] != wv)
        if np.count_nonzero(raw_ | war):
            j = int(np.flatnonzero(raw_ | war)[0])
            other = self.w_warp[flat[j]] if raw_[j] else self.r_warp[flat[j]]
            kind = "wrote" if raw_[j] else "read"
            other = "several warps" if other == -2 else f"warp {other}"
            self.fail(
                ins, f"race: warp {wv[j]} {what} shared byte {flat[j]} that {other} {kind} with no bar.sync in between"
            )

    def smem_write(self, ins, addrs, data: np.ndarray, threads) -> None:
        width = data.shape[1]
        idx = self._smem_index(ins, addrs, width, threads)
        flat, wv = idx.reshape(-1), self._warps_of(threads, width)
        if self.in_flight() and np.count_nonzero(self.pending[flat] > 0):
            self.fail(ins, "writes shared memory that a cp.async has not completed", self._mask(threads))
        self._check_write(ins, flat, wv)
        self.proxy_dirty[flat] = True
        self.w_warp[flat] = wv
        self.w_epoch[flat] = self.epoch
        if np.count_nonzero(self.w_warp[flat] != wv):
            self.fail(ins, "race: two warps write the same shared byte in one instruction")
        self.smem[idx] = data

    # -- run ---------------------------------------------------------------------------------
    def run(self) -> None:
        code = self.k.code
        ncode = len(code)
        n = self.n
        pc = np.zeros(n, np.int64)
        alive = np.ones(n, bool)
        waiting = np.zeros(n, bool)
        wait_id = np.full(n, -1, np.int64)
        wait_cnt = np.full(n, -1, np.int64)  # thread count of a named barrier, -1: the whole CTA
        steps = 0
        # The threads to run, `act`, are the runnable ones at the lowest pc `p`. They stay the same
        # while p < nxt (the lowest pc of the other runnable threads) and no thread exits, waits or
        # parks: then the loop only advances p, and their entries in `pc` are stale (p holds them).
        act = None
        p = nxt = nact = warps = 0
        while True:
            if act is None or p >= nxt:
                if act is not None:
                    pc[act] = p
                    act = None
                runnable = alive & ~waiting & (self.mb_wait < 0)
                if not runnable.any():
                    if self.tma:  # the copy engine delivers while every thread waits
                        _deliver_tma(self)
                        continue
                    if not alive.any():
                        if self.tma or any(self.wg_groups.values()) or any(self.wg_open.values()):
                            self.fail(code[-1], "the CTA exits with bulk copies or wgmma operations in flight")
                        return
                    ins = code[int(pc[alive][0])]
                    if (alive & (self.mb_wait >= 0)).any():
                        self.fail(ins, "deadlock: " + _mbar_report(self, alive))
                    ids = np.unique(wait_id[alive])
                    if ids.size != 1 or (wait_cnt[alive] != -1).any():
                        self.fail(ins, f"threads wait at different or incomplete barriers {ids.tolist()}: deadlock")
                    waiting[:] = False
                    pc[alive] += 1
                    self.epoch += 1
                    self.stats.barriers += 1
                    continue
                p = int(pc[runnable].min())
                if p >= ncode:
                    self.fail(code[-1], "ran past the end of the kernel without ret/exit", runnable & (pc == p))
                act = runnable & (pc == p)
                rest = runnable & ~act
                nxt = min(int(pc[rest].min()), ncode) if np.count_nonzero(rest) else ncode
                nact = np.count_nonzero(act)
                if nact == n:
                    act = self.ones
                warps = self.warps_in(act)
            ins = code[p]
            self.cur_ins = ins
            steps += 1
            self.step = steps
            self.stats.warp_instructions += warps
            if steps > self.max_steps:
                self.fail(ins, f"no end after {self.max_steps} instructions (an endless loop?)")
            exe, nexe = act, nact
            if ins.guard is not None:
                g = self.get(ins, ins.guard_op, "pred", act)
                exe = act & (~g if ins.negate else g)
                nexe = np.count_nonzero(exe)
                if nexe == nact:
                    exe = act  # the guard holds in every thread of act
            op = ins.op
            if nexe == 0:  # nothing executes: every thread of act steps on
                p += 1
                continue
            if op == "bra":
                if exe is act:
                    p = self.k.labels[ins.ops[0].name]
                else:
                    pc[exe] = self.k.labels[ins.ops[0].name]
                    pc[act & ~exe] = p + 1
                    act = None
                continue
            if op in ("ret", "exit", "bar") or (op == "mbarrier" and ins.mods[0] == "try_wait"):
                pc[act] = p  # these change which threads can run: the set is computed again
                act, cur = None, act
            else:
                handler = _HANDLERS.get(op)
                if handler is None:
                    self.fail(ins, f"instruction {op} is not supported by the simulator")
                upd = R.source_spaces(self, ins) if self.space or ins.names_space else None
                handler(self, ins, exe)
                if upd is not None:  # the state spaces of the addresses it wrote
                    R.set_spaces(self, *upd, exe)
                p += 1
                if op == "mbarrier":  # a completed phase releases parked threads
                    pc[act] = p
                    act = None
                continue
            if op in ("ret", "exit"):
                alive[exe] = False
                pc[cur & ~exe] += 1
                continue
            if op == "bar":
                pc[cur & ~exe] += 1
                bids = self.get(ins, ins.ops[0], "u32", exe)
                counts = self.get(ins, ins.ops[1], "u32", exe) if len(ins.ops) > 1 else np.full(n, n)
                for bid in np.unique(bids[exe]).tolist():
                    here = exe & (bids == bid)
                    cs = np.unique(counts[here])
                    if cs.size != 1 or cs[0] <= 0 or cs[0] % 32:
                        self.fail(ins, f"bar.sync {bid}: thread count {cs.tolist()} is not one positive multiple of 32")
                    count = -1 if int(cs[0]) == n else int(cs[0])
                    waiting[here] = True
                    wait_id[here] = bid
                    wait_cnt[here] = count
                    if count < 0:
                        continue  # the whole CTA: released when every live thread waits
                    # a named barrier of `count` threads: released once they have all arrived
                    arrived = waiting & (wait_id == bid)
                    if (wait_cnt[arrived] != count).any():
                        self.fail(ins, f"barrier {bid} is used with different thread counts", arrived)
                    k = int(arrived.sum())
                    if k > count:
                        self.fail(ins, f"{k} threads arrive at barrier {bid} of {count}", arrived)
                    if k == count:
                        if np.unique(self.warp[arrived]).size > 1:
                            self.fail(ins, "named barriers across several warps are not supported by the simulator")
                        waiting[arrived] = False
                        wait_cnt[arrived] = -1
                        pc[arrived] += 1
                        self.stats.barriers += 1
                continue
            # mbarrier.try_wait
            parked = _mbar_try_wait(self, ins, exe)
            pc[cur & ~parked] += 1  # parked threads run try_wait again when the phase completes

    def warps_in(self, threads: np.ndarray) -> int:
        """Number of warps with at least one thread in the boolean mask ``threads``."""
        if threads is self.ones:
            return self.nwarps
        if self._pad:
            threads = np.concatenate([threads, np.zeros(self._pad, bool)])
        return int(np.count_nonzero(threads.reshape(self.nwarps, 32).any(axis=1)))

    # -- warp-collective checks --------------------------------------------------------------
    def whole_warps(self, ins: Instr, exe: np.ndarray) -> np.ndarray:
        """Warp indices executing ``ins``; every thread of those warps must execute it."""
        if exe is self.ones:  # the whole CTA: every warp, none in part
            warps = np.arange(self.nwarps)
        else:
            warps = np.unique(self.warp[exe])
            part = np.isin(self.warp, warps) & ~exe
            if part.any():
                self.fail(ins, ".sync.aligned instruction executed by part of a warp", part)
        if self.n % 32:
            self.fail(ins, "warp-collective instruction in a CTA that is not a whole number of warps")
        return warps


# --------------------------------------------------------------------------- instruction handlers


def _type(ins: Instr) -> str:
    return ins.mods[-1]


def _mov(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, s = ins.ops
    w = T.bits(t)
    if d.kind == "vec":  # unpack
        raw = c.raw(ins, s, t, exe)
        pw = w // len(d.items)
        for i, r in enumerate(d.items):
            c.put(r.name, (raw >> _U64(i * pw)) & _U64(_MASK[pw]), f"b{pw}", exe)
        return
    if s.kind == "vec":  # pack
        pw = w // len(s.items)
        acc = np.zeros(c.n, _U64)
        for i, r in enumerate(s.items):
            acc |= (c.raw(ins, r, f"b{pw}", exe) & _U64(_MASK[pw])) << _U64(i * pw)
        c.put(d.name, acc, t, exe)
        return
    c.put_raw(d.name, c.raw(ins, s, t, exe) & _U64(_MASK[w] if t != "pred" else 1), exe)


def _space(ins: Instr) -> str:
    for m in ins.mods:
        s = m.split("::")[0]
        if s in ("param", "global", "shared", "local", "const"):
            return s
    return "generic"


def _vec_n(ins: Instr) -> int:
    for m in ins.mods:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


def _addr(c: _Cta, ins: Instr, o: Operand, exe) -> np.ndarray:
    base = o.items[0]
    if base.kind == "sym":
        if base.name in c.shared:
            return np.full(c.n, c.shared[base.name][0] + o.value, np.int64)
        c.fail(ins, f"unknown symbol {base.name}")
    t = "u64"
    raw = c.raw(ins, base, t, exe)
    return (raw + _U64(o.value & _MASK[64])).astype(np.int64)


#: the state spaces (sim_rules codes) an address operand of each instruction state space may hold;
#: an untracked integer is accepted where its value lies in the space's window
_TAKES = {"generic": (R.GENERIC,), "shared": (R.SHARED_CTA,), "global": (R.GLOBAL,)}


def _in_window(a: np.ndarray, base: int, size: int) -> np.ndarray:
    """Which (uint64) addresses lie in [base, base + size)."""
    return (a >= _U64(base)) & (a < _U64(base + size))


def _resolve(
    c: _Cta, ins: Instr, space: str, addrs: np.ndarray, exe, o: Operand | None = None
) -> tuple[str, np.ndarray]:
    """("shared" or "global", the executing threads' addresses) of an address in instruction
    state space ``space``; checks the state space of operand ``o`` (rule state-space) and that
    each address lies in the space's window (shared: a 32-bit shared-window address)."""
    if o is not None and space in _TAKES:
        R.check_space(c, ins, o, _TAKES[space], exe, "address")
    if space == "generic":
        a = _sel(c, addrs.view(_U64), exe)
        sh = np.count_nonzero(_in_window(a, GENERIC_SHARED, 1 << 32))
        if sh == a.size:
            return "shared", (a - _U64(GENERIC_SHARED)).astype(np.int64)
        if sh:
            c.fail(ins, "generic access mixes shared and global addresses in one instruction")
        if np.count_nonzero(_in_window(a, PARAM_BASE, 1 << 32)):
            c.fail(ins, "generic loads and stores of kernel parameters are not supported by the simulator")
        return "global", a.astype(np.int64)
    if space == "shared":
        a = _sel(c, addrs, exe)
        wide = (a.view(_U64) >> _U64(32)) != 0
        if np.count_nonzero(wide):
            bad = int(a[wide][0]) & _MASK[64]
            c.fail(
                ins,
                R.message(
                    "state-space",
                    f".shared address {bad:#x} is not a shared-window address (a generic address? cvta.to.shared "
                    "converts one)",
                ),
            )
        return "shared", a
    if space == "global":
        return "global", _sel(c, addrs, exe)
    c.fail(ins, f"state space .{space} is not supported by the simulator")
    raise AssertionError


def _elem_bytes(t: str) -> int:
    if t == "b128":
        raise SimError(".b128 is not supported by the simulator")
    return max(1, T.bits(t) // 8)


def _ld(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, a = ins.ops
    dsts = d.items if d.kind == "vec" else [d]
    space = _space(ins)
    es = _elem_bytes(t)
    if space == "param":
        name = a.items[0].name
        if name not in c.params:
            c.fail(ins, f"unknown parameter {name}")
        ptype, bits = c.params[name]
        c.put(d.name, np.full(c.n, bits, _U64), ptype if ptype != "pred" else "b32", exe)
        return
    width = es * len(dsts)
    kind, addrs = _resolve(c, ins, space, _addr(c, ins, a, exe), exe, a)
    tids = _tids(c, exe)
    if kind == "shared":
        data = c.smem_read(ins, addrs, width, tids)
    else:
        mis = _misaligned(addrs, width)
        if np.count_nonzero(mis):
            c.fail(
                ins,
                R.message("access-align", f"misaligned global load of {width} bytes at {int(addrs[mis != 0][0]):#x}"),
            )
        try:
            data = c.mem.gather(addrs, width, "global load")
        except SimError as e:
            c.fail(ins, str(e), exe)
    if T.kind(t) == "s" and es < 8:  # sign-extend loads of signed types
        vals = np.ascontiguousarray(data).view(f"<i{es}").astype(np.int64).view(_U64)
    else:
        vals = np.ascontiguousarray(data).view(f"<u{es}").astype(_U64)
    for i, r in enumerate(dsts):
        if exe is c.ones:
            full = np.ascontiguousarray(vals[:, i])
        else:
            full = np.zeros(c.n, _U64)
            full[exe] = vals[:, i]
        c.put(r.name, full, "b64", exe)  # zero/sign-extended already


def _st(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    a, s = ins.ops
    srcs = s.items if s.kind == "vec" else [s]
    es = _elem_bytes(t)
    width = es * len(srcs)
    kind, addrs = _resolve(c, ins, _space(ins), _addr(c, ins, a, exe), exe, a)
    cols = [_sel(c, c.raw(ins, r, t, exe), exe) & _U64(_MASK[8 * es] if es < 8 else _MASK[64]) for r in srcs]
    vals = cols[0][:, None] if len(cols) == 1 else np.stack(cols, axis=1)
    if es < 8:
        vals = vals.astype(f"<u{es}")
    data = np.ascontiguousarray(vals).view(np.uint8).reshape(len(addrs), width)
    tids = _tids(c, exe)
    if kind == "shared":
        c.smem_write(ins, addrs, data, tids)
        return
    mis = _misaligned(addrs, width)
    if np.count_nonzero(mis):
        c.fail(
            ins, R.message("access-align", f"misaligned global store of {width} bytes at {int(addrs[mis != 0][0]):#x}")
        )
    try:
        c.mem.scatter(addrs, data, "global store")
    except SimError as e:
        c.fail(ins, str(e), exe)


#: state spaces (sim_rules codes) whose addresses cvta.<space> converts to generic ones
_CVTA_FROM = {"shared": (R.SHARED_CTA, R.SHARED_CLUSTER), "param": (R.PARAM,), "global": (R.GLOBAL,)}


def _cvta(c: _Cta, ins: Instr, exe) -> None:
    """cvta.<space> (space -> generic) and cvta.to.<space> (generic -> space) for .shared,
    .param (kernel parameters: generic = PARAM_BASE + .param address) and .global (identity);
    the source must be an address of the space it converts from (rule state-space)."""
    d, s = ins.ops
    t = _type(ins)
    to = ins.mods[0] == "to"
    full = ins.mods[1 if to else 0]
    space = full.split("::")[0]
    if space not in _CVTA_FROM:
        c.fail(ins, f"cvta for .{space} is not supported by the simulator")
    if t != "u64":
        c.fail(ins, "cvta with 32-bit addresses is not supported by the simulator (.address_size 64)")
    R.check_space(c, ins, s, (R.GENERIC,) if to else _CVTA_FROM[space], exe, "source")
    v = c.raw(ins, s, t, exe)
    windows = {"shared": (GENERIC_SHARED, 1 << 32), "param": (PARAM_BASE, max(c.k.param_end, 1))}
    if to:
        a = _sel(c, v, exe)
        if space in windows:
            out = ~_in_window(a, *windows[space])
        else:  # global: anything outside the other windows
            out = _in_window(a, GENERIC_SHARED, 1 << 32) | _in_window(a, PARAM_BASE, 1 << 32)
        if np.count_nonzero(out):
            c.fail(
                ins,
                R.message(
                    "state-space",
                    f"generic address {int(a[out][0]):#x} does not fall within the address window of .{full}",
                ),
            )
    if space in windows:
        v = v - _U64(windows[space][0]) if to else v + _U64(windows[space][0])
    c.put(d.name, v, t, exe)


#: NaN results of f32 arithmetic and of narrowing cvt, as the hardware writes them (H100, CUDA 13:
#: add/mul/div.rn.f32 give 0x7fffffff, cvt.rn.f16.f32 and cvt.rn.bf16.f32 give 0x7fff), not
#: numpy's payload-preserving NaN. min/max, copies and sign operations keep their input bits.
#: cvt.rna.tf32.f32 keeps the sign and clears the payload (H200, CUDA 13: 0x7fc00123 ->
#: 0x7fc00000, 0xffc00000 -> 0xffc00000; NaNs with payload bits above bit 12 were not recorded).
CANONICAL_NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF, "bf16": 0x7FFF, "tf32": 0x7FC00000}
_NAN_F32 = np.uint32(CANONICAL_NAN["f32"]).view(np.float32)


def _narrow_bits(v: np.ndarray, t: str, n: int) -> np.ndarray:
    """Bits of f32 values ``v`` rounded to f16/bf16, NaN as the canonical NaN."""
    return np.where(np.isnan(np.broadcast_to(v, (n,))), _U64(CANONICAL_NAN[t]), _to_bits(v, t, n))


_WRAPPING = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "mad": np.multiply}


def _arith(c: _Cta, ins: Instr, exe) -> None:
    op, t = ins.op, _type(ins)
    mods = ins.mods
    d = ins.ops[0]
    if T.is_float(t):
        if any(m in ("rz", "rm", "rp") for m in mods):
            c.fail(ins, "float rounding other than .rn is not supported by the simulator")
        if t in ("f16x2", "bf16x2", "bf16"):
            c.fail(ins, f"{op}.{t} is not supported by the simulator")
        a, b = (c.get(ins, o, t, exe) for o in ins.ops[1:3])
        with np.errstate(all="ignore"):
            if op == "add":
                r = a + b
            elif op == "sub":
                r = a - b
            elif op == "mul":
                r = a * b
            elif op == "min":
                r = np.fmin(a, b)
            elif op == "max":
                r = np.fmax(a, b)
            elif op == "div":
                if "rn" not in mods:
                    c.fail(ins, "div.approx/div.full are not supported by the simulator (div.rn is)")
                r = a / b
            elif op in ("fma", "mad"):
                cc = c.get(ins, ins.ops[3], t, exe)
                r = (a.astype(np.float64) * b + cc).astype(a.dtype) if t != "f64" else a * b + cc
            else:
                c.fail(ins, f"{op}.{t} is not supported")
        if t == "f32" and op not in ("min", "max"):
            r = np.where(np.isnan(r), _NAN_F32, r)
        if "sat" in mods:
            r = np.where(np.isnan(r), 0, np.clip(r, 0, 1))
        c.put(d.name, r, t, exe)
        return
    mode = next((m for m in mods if m in ("lo", "hi", "wide")), None)
    if op in _WRAPPING and mode in (None, "lo") and T.kind(t) != "pred" and ("sat" not in mods or t != "s32"):
        # wrapping integer arithmetic on the raw bits: the low bits of a sum or product depend
        # only on the low bits of the operands, whatever their signedness
        r = _WRAPPING[op](c.raw(ins, ins.ops[1], t, exe), c.raw(ins, ins.ops[2], t, exe))
        if op == "mad":
            r = r + c.raw(ins, ins.ops[3], t, exe)
        c.put_raw(d.name, r & _U64(_MASK[T.bits(t)]), exe)
        return
    if mode == "wide":
        a, b = (c.get(ins, o, t, exe) for o in ins.ops[1:3])
        dt = ("s" if T.kind(t) == "s" else "u") + str(2 * T.bits(t))
        if T.kind(t) == "s":
            r = a.astype(np.int64) * b.astype(np.int64)
        else:
            r = a.astype(_U64) * b.astype(_U64)
        if op == "mad":
            cc = c.get(ins, ins.ops[3], dt, exe)
            r = r + cc
        c.put(d.name, r, dt, exe)
        return
    a, b = (c.get(ins, o, t, exe) for o in ins.ops[1:3])
    w = T.bits(t)
    with np.errstate(over="ignore"):
        if op == "add":
            r = a + b
        elif op == "sub":
            r = a - b
        elif op in ("mul", "mad"):
            if mode == "hi" and w == 64:  # the 128-bit product in Python integers
                r = np.array([(x * y) >> 64 for x, y in zip(a.tolist(), b.tolist(), strict=True)], dtype=a.dtype)
            elif mode == "hi":
                wide = np.int64 if T.kind(t) == "s" else _U64
                r = (a.astype(wide) * b.astype(wide)) >> wide(w)
            else:
                r = a * b
            if op == "mad":
                r = r + c.get(ins, ins.ops[3], t, exe)
        elif op == "min":
            r = np.minimum(a, b)
        elif op == "max":
            r = np.maximum(a, b)
        elif op == "div":  # truncating; the result of a division by zero is unspecified: reported
            if (b[exe] == 0).any():
                c.fail(ins, "integer division by zero", exe & (b == 0))
            q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
            r = np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)
        else:
            c.fail(ins, f"{op}.{t} is not supported")
    if "sat" in mods and t == "s32":
        r = np.clip(r, -(2**31), 2**31 - 1)
    c.put(d.name, r, t, exe)


def _logic(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d = ins.ops[0]
    if t == "pred":
        vals = [c.get(ins, o, "pred", exe) for o in ins.ops[1:]]
        r = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(ins.op)
        c.put(d.name, np.logical_not(vals[0]) if ins.op == "not" else r(*vals), "pred", exe)
        return
    vals = [c.raw(ins, o, t, exe) for o in ins.ops[1:]]
    if ins.op == "not":
        r = ~vals[0]
    else:
        r = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[ins.op](*vals)
    c.put(d.name, r, t, exe)


def _shift(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, a, b = ins.ops
    w = T.bits(t)
    if b.kind == "imm":  # a constant shift: Python ints
        k = min(b.value & _MASK[32], w)
        if ins.op == "shl":
            v = c.raw(ins, a, t, exe)
            c.put(d.name, np.zeros(c.n, _U64) if k >= w else v << _U64(k), t, exe)
            return
        if T.kind(t) != "s":  # logical shift of the raw bits: the low w bits, shifted
            v = c.raw(ins, a, t, exe)
            c.put_raw(d.name, np.zeros(c.n, _U64) if k >= w else (v & _U64(_MASK[w])) >> _U64(k), exe)
            return
        v = c.get(ins, a, t, exe)
        c.put(d.name, v >> v.dtype.type(min(k, w - 1)), t, exe)
        return
    n = np.minimum(c.get(ins, b, "u32", exe), w).astype(np.int64)
    if ins.op == "shl":
        v = c.raw(ins, a, t, exe)
        r = np.where(n >= w, _U64(0), v << np.minimum(n, w - 1).astype(_U64))
        c.put(d.name, r, t, exe)
        return
    v = c.get(ins, a, t, exe)
    if T.kind(t) == "s":
        r = v >> np.minimum(n, w - 1).astype(v.dtype)
    else:
        r = np.where(n >= w, 0, v >> np.minimum(n, w - 1).astype(v.dtype)).astype(v.dtype)
    c.put(d.name, r, t, exe)


_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lo": np.less,
    "ls": np.less_equal,
    "hi": np.greater,
    "hs": np.greater_equal,
}


def _setp(c: _Cta, ins: Instr, exe) -> None:
    cmp, t = ins.mods[0], _type(ins)
    p, a, b = ins.ops
    x, y = c.get(ins, a, t, exe), c.get(ins, b, t, exe)
    if T.kind(t) == "b":
        x, y = c.raw(ins, a, t, exe), c.raw(ins, b, t, exe)
    with np.errstate(invalid="ignore"):
        if cmp in _CMP:
            r = _CMP[cmp](x, y)
            if cmp == "ne" and T.is_float(t):
                r = r & ~(np.isnan(x) | np.isnan(y))
        elif cmp == "num":
            r = ~(np.isnan(x) | np.isnan(y))
        elif cmp == "nan":
            r = np.isnan(x) | np.isnan(y)
        elif cmp.endswith("u") and cmp[:-1] in _CMP:
            r = _CMP[cmp[:-1]](x, y) | np.isnan(x) | np.isnan(y)
        else:
            c.fail(ins, f"comparison {cmp} is not supported")
    c.put(p.name, r, "pred", exe)


def _selp(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, a, b, p = ins.ops
    sel = c.get(ins, p, "pred", exe)
    c.put_raw(d.name, np.where(sel, c.raw(ins, a, t, exe), c.raw(ins, b, t, exe)), exe)


def _cvt(c: _Cta, ins: Instr, exe) -> None:
    mods = ins.mods
    dt, at = mods[-2], mods[-1]
    rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi")), None)
    d = ins.ops[0]
    srcs = ins.ops[1:]
    if dt in ("f16x2", "bf16x2"):
        if rnd != "rn":
            c.fail(ins, "packing cvt with rounding other than .rn is not supported by the simulator")
        hi, lo = (c.get(ins, o, "f32", exe) for o in srcs)
        if "relu" in mods:
            hi, lo = (np.where(np.isnan(v), v, np.maximum(v, 0)) for v in (hi, lo))
        one = "f16" if dt == "f16x2" else "bf16"
        bh, bl = _narrow_bits(hi, one, c.n), _narrow_bits(lo, one, c.n)
        c.put(d.name, (bh << _U64(16)) | bl, "b32", exe)
        return
    v = c.get(ins, srcs[0], at, exe)
    if dt == "tf32":
        u = np.asarray(v, np.float32).view(np.uint32)
        special = (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
        nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        canon = (u & np.uint32(0x80000000)) | np.uint32(CANONICAL_NAN["tf32"])
        r = np.where(nan, canon, np.where(special, u, _mma.round_tf32(v).view(np.uint32)))
        c.put(d.name, r.astype(_U64), "b32", exe)
        return
    if T.is_float(dt) and T.is_float(at):
        if T.bits(dt) < T.bits(at) and rnd != "rn":
            c.fail(ins, "narrowing float cvt with rounding other than .rn is not supported")
        r = np.asarray(v, np.float32 if at != "f64" else np.float64)
        if "sat" in mods:
            r = np.where(np.isnan(r), 0, np.clip(r, 0, 1))
        if dt in ("f16", "bf16") and at == "f32":
            c.put_raw(d.name, _narrow_bits(r, dt, c.n), exe)
            return
        c.put(d.name, r, dt, exe)
        return
    if T.is_float(at):  # float -> int: round, saturate, NaN -> 0
        fn = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}.get(rnd)
        if fn is None:
            c.fail(ins, f"float -> int cvt needs rni/rzi/rmi/rpi, got {rnd}")
        lo, hi = T.int_range(dt)
        f = np.nan_to_num(fn(np.asarray(v, np.float64)), nan=0.0)
        r = np.clip(f, lo, hi)
        r = r.astype(np.int64) if T.kind(dt) == "s" or T.bits(dt) < 64 else r.astype(_U64)
        c.put(d.name, r, dt, exe)
        return
    if T.is_float(dt):  # int -> float
        if rnd != "rn":
            c.fail(ins, "int -> float cvt with rounding other than .rn is not supported")
        c.put(d.name, np.asarray(v, np.float64), dt, exe)
        return
    # int -> int: sign/zero extension comes from the source type, truncation from _to_bits
    if "sat" in mods:
        lo, hi = T.int_range(dt)
        v = np.clip(v, lo, hi)
    c.put(d.name, v, dt, exe)


def _shfl(c: _Cta, ins: Instr, exe) -> None:
    d, a, b, cc, mm = ins.ops
    key = ("shfl", c.n)
    if exe is c.ones and key in ins.cache:  # constant operands, every thread: lanes checked before
        src_c, pval = ins.cache[key]
    else:
        src_c, pval = _shfl_lanes(c, ins, exe)
        if exe is c.ones and b.kind == cc.kind == mm.kind == "imm":
            ins.cache[key] = (src_c, pval)
    val = c.raw(ins, a, "b32", exe)
    c.put(d.name, val[src_c], "b32", exe)
    if d.pred:
        c.put(d.pred, pval, "pred", exe)


def _shfl_lanes(c: _Cta, ins: Instr, exe) -> tuple[np.ndarray, np.ndarray]:
    """shfl.sync's source thread and in-range predicate per thread, after its membership checks."""
    mode = ins.mods[1]
    d, a, b, cc, mm = ins.ops
    mask = c.get(ins, mm, "b32", exe)
    lane = c.lane
    members = ((mask >> lane) & 1).astype(bool)
    if (exe & ~members).any():
        c.fail(ins, "a thread outside membermask executes shfl.sync", exe & ~members)
    if exe is not c.ones:  # (with every thread executing, no member can be missing)
        warps = np.unique(c.warp[exe])
        inwarp = np.isin(c.warp, warps)
        if (inwarp & members & ~exe).any():
            c.fail(ins, "threads named in membermask do not execute this shfl.sync", inwarp & members & ~exe)
    bval = c.get(ins, b, "u32", exe) & 31
    cv = c.get(ins, cc, "u32", exe)
    cval, seg = cv & 31, (cv >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg & 31)
    min_lane = lane & seg
    if mode == "up":
        j = lane - bval
        pval = j >= max_lane
    elif mode == "down":
        j = lane + bval
        pval = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        pval = j <= max_lane
    else:
        j = min_lane | (bval & ~seg & 31)
        pval = j <= max_lane
    j = np.where(pval, j, lane)
    src = c.warp * 32 + j
    src_c = np.clip(src, 0, c.n - 1)
    if (exe & ((src >= c.n) | ~exe[src_c])).any():
        c.fail(ins, "shfl.sync reads a lane that does not execute it", exe & ~exe[src_c])
    src_c.flags.writeable = False
    pval.flags.writeable = False
    return src_c, pval


def _cp_async(c: _Cta, ins: Instr, exe) -> None:
    if ins.mods[:3] == ("async", "bulk", "tensor"):
        _tma_issue(c, ins, exe)
        return
    op = ins.mods[1]  # cp.async.<op>
    if op == "commit_group":
        c.committed[exe] += 1
        return
    if op in ("wait_group", "wait_all"):
        if op == "wait_all":
            c.committed[exe] += 1
        n = 0 if op == "wait_all" else ins.ops[0].value
        _complete(c, ins, exe, n)
        return
    dst, src, size = ins.ops[0], ins.ops[1], ins.ops[2].value
    tids = np.flatnonzero(exe)
    R.check_space(c, ins, dst, (R.SHARED_CTA,), exe, "dst", "cp-async-size")
    R.check_space(c, ins, src, (R.GLOBAL,), exe, "src", "cp-async-size")
    _, sh = _resolve(c, ins, "shared", _addr(c, ins, dst, exe), exe)
    gl = _addr(c, ins, src, exe)[exe]
    ssz = c.get(ins, ins.ops[3], "u32", exe)[exe] if len(ins.ops) > 3 else np.full(tids.size, size, np.int64)
    if (ssz > size).any():
        c.fail(ins, f"src-size larger than cp-size {size}")
    if (gl % size).any():
        c.fail(ins, R.message("cp-async-size", f"cp.async global source misaligned for {size} bytes"), exe)
    idx = c._smem_index(ins, sh, size, tids, "cp-async-size")
    flat, wv = idx.reshape(-1), np.repeat(c.warp[tids], size)
    c._check_write(ins, flat, wv, what="starts an async copy into")
    np.add.at(c.pending, flat, 1)
    c.copies.append(
        {
            "ins": ins,
            "tid": tids,
            "group": c.committed[tids].copy(),
            "dst": sh,
            "src": gl,
            "size": size,
            "ssz": ssz,
            "done": np.zeros(tids.size, bool),
        }
    )


def _complete(c: _Cta, ins: Instr, exe, n: int) -> None:
    for rec in c.copies:
        sel = ~rec["done"] & exe[rec["tid"]] & (rec["group"] < c.committed[rec["tid"]] - n)
        if not sel.any():
            continue
        size = rec["size"]
        tids, dst, src, ssz = rec["tid"][sel], rec["dst"][sel], rec["src"][sel], rec["ssz"][sel]
        data = np.zeros((tids.size, size), np.uint8)
        for k in np.unique(ssz):
            if k == 0:
                continue
            m = ssz == k
            try:
                data[m, :k] = c.mem.gather(src[m], int(k), "cp.async source")
            except SimError as e:
                c.fail(rec["ins"], str(e))
        idx = dst[:, None] + np.arange(size)
        flat = idx.reshape(-1)
        np.add.at(c.pending, flat, -1)
        wv = np.repeat(c.warp[tids], size)
        c._check_write(rec["ins"], flat, wv, what="completes an async copy into")
        c.w_warp[flat] = wv
        c.w_epoch[flat] = c.epoch
        c.smem[idx] = data
        rec["done"][sel] = True
        c.stats.async_copies += int(sel.sum())
    c.copies = [r for r in c.copies if not r["done"].all()]


def _ldmatrix(c: _Cta, ins: Instr, exe) -> None:
    warps = c.whole_warps(ins, exe)
    nmat = int(next(m for m in ins.mods if m.startswith("x"))[1:])
    trans = "trans" in ins.mods
    d, a = ins.ops
    # lanes 8j..8j+7 of each warp give the 16-byte rows of matrix j
    giver = np.concatenate([w * 32 + np.arange(8 * nmat) for w in warps])
    R.check_space(c, ins, a, (R.SHARED_CTA,), c._mask(giver), "row address", "ldmatrix-row")
    _, addrs = _resolve(c, ins, "shared", _addr(c, ins, a, exe)[giver], c.ones)  # (c.ones: take them all)
    rows = c.smem_read(ins, addrs, 16, giver, "ldmatrix-row").view("<u2").reshape(len(warps), nmat, 8, 8)
    if trans:
        rows = rows.transpose(0, 1, 3, 2)
    lane = np.arange(32)
    r, col = lane // 4, 2 * (lane % 4)
    lo = rows[:, :, r, col].astype(_U64)  # (warps, nmat, 32)
    hi = rows[:, :, r, col + 1].astype(_U64)
    regs = lo | (hi << _U64(16))
    for j, reg in enumerate(d.items):
        if exe is c.ones:  # every warp: the new values are the whole register
            full = regs[:, j].reshape(-1)
        else:
            full = c.regs.get(reg.name, np.zeros(c.n, _U64)).copy()
            for wi, w in enumerate(warps):
                full[w * 32 : w * 32 + 32] = regs[wi, j]
        c.put(reg.name, full, "b32", exe)


@cache
def _layout(shape: str, dtype: str, operand: str) -> tuple[np.ndarray, np.ndarray]:
    lay = _mma.layout(shape, dtype, operand)
    return lay[..., 0], lay[..., 1]


def _mma_sync(c: _Cta, ins: Instr, exe) -> None:
    warps = c.whole_warps(ins, exe)
    shape, dtype = ins.mods[2], ins.mods[6]
    if ins.mods[3:5] != ("row", "col") or ins.mods[5] != "f32" or ins.mods[8] != "f32":
        c.fail(ins, "only .row.col mma with f32 accumulators is supported by the simulator")
    inf = _mma.info(shape, dtype)
    dd, aa, bb, cc = ins.ops
    every = exe is c.ones  # every warp: sel is every thread
    sel = c.tids if every else np.concatenate([w * 32 + np.arange(32) for w in warps])
    nw = len(warps)

    def frags(o: Operand, t: str, operand: str) -> np.ndarray:
        regs = np.stack([c.raw(ins, r, t, exe) if every else c.raw(ins, r, t, exe)[sel] for r in o.items], axis=1)
        if operand == "c":
            return (regs & _U64(_MASK[32])).astype(np.uint32).view(np.float32).reshape(nw, 32, -1)
        u = (regs & _U64(_MASK[32])).astype(np.uint32)
        return _mma.unpack_regs(dtype, u).reshape(nw, 32, -1)

    def tile(fr: np.ndarray, operand: str) -> np.ndarray:
        rows, cols = _layout(shape, dtype, operand)
        out = np.zeros((nw, *inf.dims(operand)), np.float64)
        out[:, rows, cols] = fr
        return out

    qa = _mma.quantize(dtype, tile(frags(aa, "b32", "a"), "a").astype(np.float32)).astype(np.float64)
    qb = _mma.quantize(dtype, tile(frags(bb, "b32", "b"), "b").astype(np.float32)).astype(np.float64)
    acc = tile(frags(cc, "f32", "c"), "c") + qa @ qb
    rows, cols = _layout(shape, dtype, "c")
    dfr = acc[:, rows, cols].astype(np.float32).reshape(nw * 32, -1)  # (nw*32, 4)
    for i, r in enumerate(dd.items):
        if every:
            full = dfr[:, i].view(np.uint32).astype(_U64)
        else:
            full = c.regs.get(r.name, np.zeros(c.n, _U64)).copy()
            full[sel] = dfr[:, i].view(np.uint32).astype(_U64)
        c.put_raw(r.name, full, exe)


# --------------------------------------------------------------------------- Hopper: mbarrier, TMA, wgmma
#
# mbarrier objects live in a side table keyed by their shared address (init checks the 8 bytes
# are inside the shared arrays and 8-aligned). A phase completes when its pending arrivals and
# its transaction count are both zero; then the phase bit flips and the arrivals reset.
# try_wait that finds its phase incomplete parks the thread until that barrier completes a phase
# (then it runs try_wait again); when no thread can run, bulk copies in flight are delivered (the
# copy engine runs while everyone waits), and if threads are still parked, that is a deadlock.
# A completed phase starts a new race-check epoch, like bar.sync: ordering through mbarriers is
# trusted for ordinary shared accesses (coarser than the ISA's per-barrier acquire/release).
# Async-proxy accesses are checked separately: a tensor copy's bytes stay "pending" until it is
# delivered (reads fail before that), wgmma operand bytes stay "read" until wgmma.wait_group
# retires their group (a tensor copy landing on them fails), and wgmma may not read bytes that
# generic stores wrote unless fence.proxy.async ran in between.


def _mbar_at(c: _Cta, ins: Instr, exe, o: Operand) -> np.ndarray:
    """Shared addresses of the executing threads' mbarrier objects (operand ``o``), checked
    against rule mbarrier-object: in shared::cta, 8-byte aligned, inside the shared arrays."""
    space = "shared" if any(m.startswith("shared") for m in ins.mods) else "generic"
    R.check_space(c, ins, o, _TAKES[space], exe, "mbarrier operand", "mbarrier-object")
    kind, addrs = _resolve(c, ins, space, _addr(c, ins, o, exe), exe)
    if kind != "shared":
        c.fail(ins, R.message("mbarrier-object", "mbarrier address is not in shared memory"), exe)
    mis = addrs % 8 != 0
    if mis.any():
        c.fail(
            ins,
            R.message(
                "mbarrier-object", f"mbarrier object at shared address {int(addrs[mis][0])} is not 8-byte aligned"
            ),
            exe,
        )
    if ((addrs < SHARED_BASE) | (addrs + 8 > c.shared_end)).any():
        c.fail(ins, R.message("mbarrier-object", "mbarrier object outside the shared arrays"), exe)
    return addrs


def _mbar(c: _Cta, ins: Instr, a: int) -> dict:
    b = c.mbar.get(int(a))
    if b is None:
        c.fail(ins, f"mbarrier at shared address {int(a)} is used before mbarrier.init")
    return b


def _mbar_settle(c: _Cta, ins: Instr, a: int) -> None:
    """Complete the current phase of barrier ``a`` when arrivals and transactions are done."""
    b = c.mbar[a]
    if b["pending"] == 0 and b["tx"] == 0:
        b["phase"] += 1
        b["pending"] = b["count"]
        c.mb_wait[c.mb_wait == a] = -1  # parked waiters retry
        c.epoch += 1  # a completed phase orders shared accesses like bar.sync (race checks are per epoch)
    elif b["pending"] < 0:
        c.fail(ins, f"mbarrier at {a}: more arrivals than its count {b['count']} in one phase")


def _mbarrier(c: _Cta, ins: Instr, exe) -> None:
    op = ins.mods[0]
    tids = np.flatnonzero(exe)
    if op == "init":
        addrs = _mbar_at(c, ins, exe, ins.ops[0])
        cnt = c.get(ins, ins.ops[1], "u32", exe)[exe]
        for a, n in zip(addrs.tolist(), cnt.tolist(), strict=True):
            if not 0 < n < 1 << 20:
                c.fail(ins, f"mbarrier.init count {n} not in 1..2^20-1")
            c.mbar[a] = {"count": n, "pending": n, "tx": 0, "phase": 0}
        return
    if op == "inval":
        for a in _mbar_at(c, ins, exe, ins.ops[0]).tolist():
            c.mbar.pop(a, None)
        return
    if op == "expect_tx":
        addrs = _mbar_at(c, ins, exe, ins.ops[0])
        tx = c.get(ins, ins.ops[1], "u32", exe)[exe]
        for a, t in zip(addrs.tolist(), tx.tolist(), strict=True):
            _mbar(c, ins, a)["tx"] += t
        return
    if op == "arrive":
        d, bar = ins.ops[0], ins.ops[1]
        addrs = _mbar_at(c, ins, exe, bar)
        expect = "expect_tx" in ins.mods
        extra = ins.ops[2] if len(ins.ops) > 2 else None
        vals = c.get(ins, extra, "u32", exe)[exe] if extra is not None else np.ones(tids.size, np.int64)
        states = np.zeros(c.n, _U64)
        for j, a in enumerate(addrs.tolist()):
            b = _mbar(c, ins, a)
            states[tids[j]] = b["phase"]
            if expect:
                b["tx"] += int(vals[j])
                b["pending"] -= 1
            else:
                b["pending"] -= int(vals[j])
            _mbar_settle(c, ins, a)
        if d.kind != "sink":
            c.put(d.name, states, "b64", exe)
        return
    if op == "test_wait":  # non-blocking: the current answer
        done = _mbar_done(c, ins, exe)
        c.put(ins.ops[0].name, done, "pred", exe)
        return
    c.fail(ins, f"mbarrier.{op} is not supported by the simulator")


def _mbar_done(c: _Cta, ins: Instr, exe) -> np.ndarray:
    """Per thread: has the awaited phase (parity operand, or the phase of a state) completed?"""
    addrs = _mbar_at(c, ins, exe, ins.ops[1])
    done = np.zeros(c.n, bool)
    if "parity" in ins.mods:
        want = c.get(ins, ins.ops[2], "u32", exe)[exe] & 1
    else:
        want = c.raw(ins, ins.ops[2], "b64", exe)[exe].astype(np.int64)
    for j, (t, a) in enumerate(zip(np.flatnonzero(exe).tolist(), addrs.tolist(), strict=True)):
        ph = _mbar(c, ins, a)["phase"]
        done[t] = (ph & 1) != want[j] if "parity" in ins.mods else ph != want[j]
    return done


def _mbar_try_wait(c: _Cta, ins: Instr, exe) -> np.ndarray:
    """try_wait: threads whose phase completed get true; the others park (returned mask)."""
    done = _mbar_done(c, ins, exe)
    c.put(ins.ops[0].name, done, "pred", exe & done)
    park = exe & ~done
    if park.any():
        c.mb_wait[park] = _mbar_at(c, ins, exe, ins.ops[1])[~done[exe]]
    return park


def _mbar_report(c: _Cta, alive) -> str:
    parts = []
    for a in np.unique(c.mb_wait[alive & (c.mb_wait >= 0)]).tolist():
        b = c.mbar[a]
        who = np.flatnonzero(alive & (c.mb_wait == a))[:4].tolist()
        parts.append(
            f"threads {who} wait on the mbarrier at {a} whose phase {b['phase']} never completes "
            f"(pending arrivals {b['pending']} of {b['count']}, transaction count {b['tx']} bytes)"
        )
    others = alive & (c.mb_wait < 0)
    if others.any():
        parts.append(f"threads {np.flatnonzero(others)[:4].tolist()} wait at bar.sync")
    return "; ".join(parts)


def _tma_issue(c: _Cta, ins: Instr, exe) -> None:
    from .tensormap import SWIZZLES, TensorMapError, TensorMapTiled

    if "tile" not in ins.mods and "im2col" in ins.mods:
        c.fail(ins, "im2col tensor copies are not supported by the simulator")
    if "global" not in ins.mods or "shared::cluster" not in ins.mods:
        c.fail(ins, "only global -> shared::cluster tensor loads are supported by the simulator")
    if "mbarrier::complete_tx::bytes" not in ins.mods:
        c.fail(ins, "tensor load without mbarrier::complete_tx::bytes")
    if any(m.startswith("multicast") for m in ins.mods):
        c.fail(ins, "multicast (clusters) is not supported by the simulator")
    dst_o, src_o, bar_o = ins.ops[:3]
    tids = np.flatnonzero(exe)
    R.check_space(c, ins, src_o.items[0], (R.GENERIC,), exe, "tensorMap operand", "tensormap-generic")
    R.check_space(c, ins, dst_o, (R.SHARED_CTA, R.SHARED_CLUSTER), exe, "dstMem", "tma-dst-align")
    _, dst = _resolve(c, ins, "shared", _addr(c, ins, dst_o, exe), exe)
    bars = _mbar_at(c, ins, exe, bar_o)
    tm_addr = c.raw(ins, src_o.items[0], "u64", exe)[exe]
    coords = np.stack([c.get(ins, o, "s32", exe)[exe] for o in src_o.items[1].items], axis=1)
    for j, t in enumerate(tids.tolist()):
        a = int(tm_addr[j])
        entry = c.pspace.get(a)
        if entry is None:
            if PARAM_BASE <= a < PARAM_BASE + c.k.param_end:
                what = "points into the kernel parameters, not at a tensor-map parameter"
            elif a >= GLOBAL_BASE and a < PARAM_BASE:
                c.fail(ins, "tensor maps in global memory are not supported by the simulator (pass one as a parameter)")
            else:
                what = "is not a generic address (a .param-space address from mov? cvta.param converts it)"
            c.fail(ins, R.message("tensormap-generic", f"tensorMap operand {a:#x} {what}"), c._mask(np.array([t])))
        if a % R.RULES["tensormap-generic"].align_bytes:
            c.fail(ins, R.message("tensormap-generic", f"tensorMap operand {a:#x} is not 64-byte aligned"))
        try:
            tm = TensorMapTiled.unpack(entry[1])
        except TensorMapError as e:
            c.fail(ins, f"parameter {entry[0]}: {e}")
        if coords.shape[1] != tm.rank:
            c.fail(ins, f"{coords.shape[1]} coordinates for a rank-{tm.rank} tensor map")
        if any(e != 1 for e in tm.element_strides):
            c.fail(ins, "element strides other than 1 are not supported by the simulator")
        span = SWIZZLES[tm.swizzle]
        row = tm.box_dim[0] * tm.esize
        if span and row != span:
            c.fail(ins, f"a {span}-byte swizzle with {row}-byte box rows is not supported by the simulator")
        d = int(dst[j])
        if d % R.RULES["tma-dst-align"].align_bytes:
            c.fail(ins, R.message("tma-dst-align", f"shared destination {d} is not 128-byte aligned"))
        if span and d % (8 * span):
            c.fail(
                ins,
                R.message(
                    "tma-dst-swizzle", f"shared destination {d} is not {8 * span}-byte aligned (swizzle {span} B)"
                ),
            )
        _mbar(c, ins, int(bars[j]))
        nbytes = tm.box_bytes
        idx = np.arange(d, d + nbytes)
        c._smem_index(ins, np.array([d]), 1, np.array([t]))  # start inside shared memory
        if d + nbytes > c.shared_end:
            c.fail(ins, f"box of {nbytes} bytes at {d} runs past the shared arrays")
        from .tensormap import swizzle as _swz

        phys = _swz(idx, span)
        np.add.at(c.pending, phys, 1)
        c.tma.append({"ins": ins, "tm": tm, "coords": coords[j].tolist(), "phys": phys, "bar": int(bars[j])})


def _deliver_tma(c: _Cta) -> None:
    """Complete every bulk tensor copy in flight: write the boxes, then complete_tx their bytes."""
    recs, c.tma = c.tma, []
    for rec in recs:
        tm, ins = rec["tm"], rec["ins"]
        es = tm.esize
        grids = np.meshgrid(*[np.arange(b) for b in reversed(tm.box_dim)], indexing="ij")
        pos = [g.reshape(-1) for g in reversed(grids)]  # dim 0 fastest
        offs = np.zeros(pos[0].size, np.int64)
        ok = np.ones(pos[0].size, bool)
        strides = (es, *tm.global_strides)
        for i in range(tm.rank):
            gi = pos[i] + rec["coords"][i]
            ok &= (gi >= 0) & (gi < tm.global_dim[i])
            offs += np.where(ok, gi, 0) * strides[i]
        data = np.zeros((offs.size, es), np.uint8)
        if ok.any():
            try:
                data[ok] = c.mem.gather(tm.global_address + offs[ok], es, "tensor copy source")
            except SimError as e:
                c.fail(ins, str(e))
        phys = rec["phys"]
        if (c.async_reads[phys] > 0).any():
            c.fail(
                ins,
                "a tensor copy overwrites shared memory that a wgmma still reads (release the stage "
                "only after wgmma.wait_group)",
            )
        np.add.at(c.pending, phys, -1)
        c.smem[phys] = data.reshape(-1)
        c.w_warp[phys] = -1
        c.w_epoch[phys] = -1
        c.proxy_dirty[phys] = False
        c.stats.async_copies += 1
        b = c.mbar.get(rec["bar"])
        if b is None:
            c.fail(ins, f"the mbarrier at {rec['bar']} was invalidated while a copy was in flight")
        b["tx"] -= tm.box_bytes
        _mbar_settle(c, ins, rec["bar"])


def _fence(c: _Cta, ins: Instr, exe) -> None:
    if ins.mods and ins.mods[0] == "proxy" and "async" in ins.mods[1:2] + ins.mods[1:]:
        warps = np.unique(c.warp[exe])
        c.proxy_dirty[np.isin(c.w_warp, warps)] = False
    # other fences (mbarrier_init, acq_rel, sc) order memory; the simulator is sequential


def _warpgroups(c: _Cta, ins: Instr, exe) -> np.ndarray:
    """Warpgroups (4 consecutive warps from a multiple of 4) executing ``ins``; all their threads must."""
    c.whole_warps(ins, exe)
    groups = np.unique(c.warp[exe] // 4)
    part = np.isin(c.warp // 4, groups) & ~exe
    if part.any() or c.n % 128:
        c.fail(ins, ".sync.aligned warpgroup instruction executed by part of a warpgroup", part)
    return groups


def _setmaxnreg(c: _Cta, ins: Instr, exe) -> None:
    _warpgroups(c, ins, exe)
    n = ins.ops[0].value
    if ins.ops[0].kind != "imm" or not 24 <= n <= 256 or n % 8 or ins.mods[0] not in ("inc", "dec"):
        c.fail(ins, "setmaxnreg needs .inc/.dec and an immediate multiple of 8 in 24..256")


def _wgmma(c: _Cta, ins: Instr, exe) -> None:
    from . import wgmma as W

    groups = _warpgroups(c, ins, exe)
    op = ins.mods[0]
    if op == "fence":
        c.fence_step[exe] = c.step
        return
    if op == "commit_group":
        for g in groups.tolist():
            c.wg_groups.setdefault(g, []).append(c.wg_open.pop(g, []))
        return
    if op == "wait_group":
        n = ins.ops[0].value
        for g in groups.tolist():
            pend = c.wg_groups.get(g, [])
            while len(pend) > n:
                for rec in pend.pop(0):
                    for name in rec["regs"]:
                        c.inflight[name] -= rec["threads"]
                    np.add.at(c.async_reads, rec["bytes"], -1)
            c.inflight = {k: v for k, v in c.inflight.items() if v.any()}
        return
    if op != "mma_async":
        c.fail(ins, f"wgmma.{op} is not supported by the simulator")
    shape, dt, at, bt = ins.mods[3], ins.mods[4], ins.mods[5], ins.mods[6]
    if dt != "f32" or at != bt or at not in ("f16", "bf16", "tf32"):
        c.fail(ins, "only f32 accumulation of f16/bf16/tf32 is supported by the simulator")
    try:
        _, nn, kk = W.check_shape(shape, at)
    except ValueError as e:
        c.fail(ins, str(e))
    d, ad, bd, sd = ins.ops[:4]
    imms = [o.value for o in ins.ops[4:]]
    if ad.kind != "reg":
        c.fail(ins, "A from registers is not supported by the simulator (use a descriptor)")
    if at == "tf32" and len(imms) != 2:  # the ISA's tf32 form has no imm-trans: K-major operands only
        c.fail(ins, "wgmma tf32 takes imm-scale-a/b only (no imm-trans: both operands K-major)")
    if at != "tf32" and len(imms) != 4:
        c.fail(ins, f"wgmma .{at} with descriptors needs imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b")
    if at != "tf32" and not {imms[2], imms[3]} <= {0, 1}:
        c.fail(ins, f"imm-trans-a/b must be 0 or 1, got {imms[2]}, {imms[3]}")
    trans_a, trans_b = (imms[2], imms[3]) if at != "tf32" else (0, 0)  # 1: MN-major (transposed)
    sa, sb = (-1 if imms[0] in (-1, 0xFFFFFFFFFFFFFFFF) else 1), (-1 if imms[1] in (-1, 0xFFFFFFFFFFFFFFFF) else 1)
    if len(d.items) != nn // 2:
        c.fail(ins, f"{shape} needs {nn // 2} accumulator registers, got {len(d.items)}")
    es = W.WGMMA_TYPES[at]
    rows, cols = W.acc_coords(nn)
    names = [r.name for r in d.items]
    for g in groups.tolist():
        sel = np.arange(128 * g, 128 * g + 128)
        mask = np.zeros(c.n, bool)
        mask[sel] = True
        if (c.fence_step[sel] < 0).any():
            c.fail(ins, "wgmma.mma_async before any wgmma.fence in its warpgroup (missing wgmma.fence)", mask)
        for nm in names:
            gw = c.gen_write.get(nm)
            if gw is not None and (gw[sel] > c.fence_step[sel]).any():
                c.fail(ins, f"accumulator {nm} was written after the last wgmma.fence (missing wgmma.fence)", mask)
        descs = []
        for o, mn_major in ((ad, trans_a), (bd, trans_b)):
            v = c.raw(ins, o, "b64", mask)[sel]
            if (v != v[0]).any():
                c.fail(ins, f"descriptor {o.name} differs between the threads of warpgroup {g}")
            descs.append(int(v[0]))
            start, _, _, span, _ = W.decode_descriptor(descs[-1])
            # rule wgmma-desc-row: one row of the canonical layout stays in one row of the swizzle atom
            if span and (start % span if mn_major else start % span + 32 > span):
                c.fail(
                    ins,
                    R.message(
                        "wgmma-desc-row",
                        f"descriptor {o.name} ({'MN' if mn_major else 'K'}-major, {span}-byte swizzle) starts at "
                        f"shared address {start}, {start % span} bytes into a swizzle row",
                    ),
                    mask,
                )
        try:
            a_addr = W.operand_addresses(descs[0], 64, kk, es, bool(trans_a))
            b_addr = W.operand_addresses(descs[1], nn, kk, es, bool(trans_b))
        except ValueError as e:
            c.fail(ins, str(e))

        def fetch(addrs, what):
            flat = (addrs[..., None] + np.arange(es)).reshape(-1)
            if ((flat < SHARED_BASE) | (flat >= c.shared_end)).any():
                c.fail(
                    ins,
                    R.message(
                        "wgmma-desc-start",
                        f"{what} descriptor reaches outside the shared arrays [{SHARED_BASE}, {c.shared_end})",
                    ),
                )
            if (c.pending[flat] > 0).any():
                c.fail(ins, f"{what} reads shared memory a copy has not completed (missing mbarrier wait?)")
            if c.proxy_dirty[flat].any():
                c.fail(ins, f"{what} reads shared memory written by generic stores without fence.proxy.async")
            raw = c.smem[flat].reshape(*addrs.shape, es)
            u = np.ascontiguousarray(raw).view(f"<u{es}")[..., 0]
            if at == "f16":
                v = u.view(np.float16).astype(np.float64)
            elif at == "bf16":
                v = _mma.bf16_bits_to_f32(u).astype(np.float64)
            else:  # raw fp32 in shared memory: the tensor core reads the upper 19 bits (truncates)
                v = _mma.quantize("tf32", u.view(np.float32)).astype(np.float64)
            return v, flat

        A, fa = fetch(a_addr, "A")
        B, fb = fetch(b_addr, "B")
        prod = (sa * A) @ (sb * B).T  # (64, N), exact products, float64 sums
        scale = c.get(ins, sd, "pred", mask)[sel] if sd.kind == "reg" else np.full(128, bool(sd.value))
        if (scale != scale[0]).any():
            c.fail(ins, f"scale-d differs between the threads of warpgroup {g}")
        acc = prod[rows, cols]  # (128, N/2)
        if scale[0]:
            for nm in names:
                if nm not in c.regs or not c.defined[nm][sel].all():
                    c.fail(ins, f"accumulator {nm} is read (scale-d true) before it is written", mask)
            old = np.stack([(c.regs[nm][sel] & _U64(_MASK[32])).astype(np.uint32).view(np.float32) for nm in names], 1)
            acc = acc + old
        acc32 = acc.astype(np.float32)
        for i, nm in enumerate(names):
            full = c.regs.get(nm, np.zeros(c.n, _U64)).copy()
            full[sel] = acc32[:, i].view(np.uint32).astype(_U64)
            old_def = c.defined.get(nm, np.zeros(c.n, bool))
            c.regs[nm] = full
            c.defined[nm] = old_def | mask
            c.inflight[nm] = c.inflight.get(nm, np.zeros(c.n, np.int32)) + mask
        flat = np.concatenate([fa, fb])
        np.add.at(c.async_reads, flat, 1)
        c.wg_open.setdefault(g, []).append({"regs": names, "threads": mask, "bytes": flat})


_HANDLERS = {
    "mov": _mov,
    "ld": _ld,
    "st": _st,
    "cvta": _cvta,
    "add": _arith,
    "sub": _arith,
    "mul": _arith,
    "mad": _arith,
    "fma": _arith,
    "div": _arith,
    "min": _arith,
    "max": _arith,
    "and": _logic,
    "or": _logic,
    "xor": _logic,
    "not": _logic,
    "shl": _shift,
    "shr": _shift,
    "setp": _setp,
    "selp": _selp,
    "cvt": _cvt,
    "shfl": _shfl,
    "cp": _cp_async,
    "ldmatrix": _ldmatrix,
    "mma": _mma_sync,
    "mbarrier": lambda c, ins, exe: _mbarrier(c, ins, exe),
    "fence": lambda c, ins, exe: _fence(c, ins, exe),
    "wgmma": lambda c, ins, exe: _wgmma(c, ins, exe),
    "setmaxnreg": lambda c, ins, exe: _setmaxnreg(c, ins, exe),
}


# --------------------------------------------------------------------------- launch


def _dim3(x, what: str) -> tuple[int, int, int]:
    t = tuple(x) if isinstance(x, tuple | list) else (x,)
    if not 1 <= len(t) <= 3 or not all(isinstance(v, int | np.integer) and v >= 1 for v in t):
        raise ValueError(f"{what} must be 1-3 positive ints, got {x!r}")
    return tuple(int(v) for v in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


def launch(
    ptx_text: str | Program,
    kernel: str,
    grid,
    block,
    args,
    memory: Memory,
    *,
    max_steps: int = 2_000_000,
    ctas=None,
    shared_bytes: int = 0,
) -> LaunchStats:
    """Run ``kernel`` of the module over ``grid`` x ``block`` threads on ``memory``.

    ``args`` are the kernel parameters in order: ints (device addresses or integers, stored
    with the parameter's width) or floats for .f32/.f64 parameters; array parameters (tensor maps,
    ``.param .align 64 .b8 t[128]``) take ``bytes`` of their size. ``shared_bytes``: dynamic shared
    memory (the ``.extern .shared`` array). ``ctas`` optionally limits
    the run to some CTA indices (tuples), e.g. the corners of a large grid. CTAs run one after
    another, in grid order.
    """
    prog = ptx_text if isinstance(ptx_text, Program) else _program(ptx_text)
    if kernel not in prog.kernels:
        raise SimError(f"kernel {kernel!r} not in module (has {', '.join(prog.kernels)})")
    k = prog.kernels[kernel]
    g, b = _dim3(grid, "grid"), _dim3(block, "block")
    if k.reqntid is not None and np.prod(k.reqntid) != np.prod(b):
        raise SimError(f"{kernel}: block {b} does not match .reqntid {k.reqntid}")
    if len(args) != len(k.params):
        raise SimError(
            f"{kernel} takes {len(k.params)} parameters ({', '.join(n for _, n in k.params)}), got {len(args)}"
        )
    params = {}
    pspace = {}
    if not isinstance(shared_bytes, int) or shared_bytes < 0:
        raise SimError(f"shared_bytes must be an int >= 0, got {shared_bytes!r}")
    for (t, name), v in zip(k.params, args, strict=True):
        if name in k.param_bytes:
            nb = k.param_bytes[name]
            if not isinstance(v, bytes | bytearray) or len(v) != nb:
                raise SimError(
                    f"parameter {name} is {nb} bytes (a tensor map): pass bytes of that length, got {v!r:.60}"
                )
            a = PARAM_BASE + k.param_offset[name]  # its generic address (cvta.param)
            pspace[a] = (name, bytes(v))
            params[name] = ("u64", a)
            continue
        if T.is_float(t):
            bits = int(_to_bits(np.asarray([float(v)]), t, 1)[0])
        else:
            if not isinstance(v, int | np.integer) or isinstance(v, bool):
                raise SimError(f"parameter {name} (.{t}) needs an int, got {v!r}")
            w = T.bits(t)
            if not -(2 ** (w - 1)) <= int(v) < 2**w:
                raise SimError(f"parameter {name} (.{t}): {v} does not fit in {w} bits")
            bits = int(v) & _MASK[T.bits(t)]
        params[name] = (t, bits)
    stats = LaunchStats()
    order = ctas if ctas is not None else [(x, y, z) for z in range(g[2]) for y in range(g[1]) for x in range(g[0])]
    for cta in order:
        _Cta(k, memory, params, tuple(cta), g, b, stats, max_steps, shared_bytes, pspace).run()
        stats.ctas += 1
    return stats
