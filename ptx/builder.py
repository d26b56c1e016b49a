"""PTX module builder: kernels, typed virtual registers, validated instructions.

Every instruction method checks its operands (register kinds, types, counts,
immediate ranges, modifiers) and raises :class:`ptx.PtxTypeError` naming the
instruction and the operand *before* anything is appended to the kernel body.
Each instruction also records the PTX ISA version and sm target it needs;
:meth:`Module.text` emits the lowest ``.version``/``.target`` that covers them
unless the caller fixed them (then a feature that needs more raises
:class:`ptx.PtxVersionError` at the point where it is used).

Example::

    m = Module()
    k = m.kernel("scale")
    p_x, p_n = k.param("u64", "x"), k.param("u32", "n")
    x, i, n = k.reg("u64"), k.reg("u32"), k.reg("u32")
    k.ld_param(x, p_x)
    ...
    print(m.text())
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import types as T
from .errors import PtxTypeError, PtxVersionError
from .types import Req

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
#: cvta with the .param state space (the generic address of a kernel parameter): PTX ISA 7.7, sm_70
CVTA_PARAM = Req((7, 7), 70, "cvta.param")

_PREFIX = {
    "pred": "p",
    "b16": "hb",
    "b32": "b",
    "b64": "bd",
    "b128": "bq",
    "u16": "hu",
    "u32": "r",
    "u64": "rd",
    "s16": "hs",
    "s32": "ri",
    "s64": "rl",
    "f16": "h",
    "f16x2": "hh",
    "bf16": "bh",
    "bf16x2": "bhh",
    "f32": "f",
    "f64": "fd",
}
_AUTO_NAME = re.compile(r"^({})\d+$".format("|".join(sorted(_PREFIX.values(), key=len, reverse=True))))


# --------------------------------------------------------------------------- operands


class Reg:
    """A typed virtual register of one kernel. ``~p`` negates a predicate."""

    __slots__ = ("name", "type", "kernel")

    def __init__(self, name: str, type: str, kernel: Kernel):
        self.name = name
        self.type = type
        self.kernel = kernel

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Reg({self.name} .{self.type})"

    def __invert__(self) -> NotPred:
        if self.type != "pred":
            raise PtxTypeError(f"~{self.name}: only .pred registers can be negated, this one is .{self.type}")
        return NotPred(self)


class NotPred:
    """A negated predicate, as in ``@!p bra L;``."""

    __slots__ = ("reg",)

    def __init__(self, reg: Reg):
        self.reg = reg

    def __str__(self) -> str:
        return "!" + self.reg.name

    def __invert__(self) -> Reg:
        return self.reg


class Special:
    """A read-only special register such as ``%tid.x``."""

    __slots__ = ("name", "type", "req")

    def __init__(self, name: str, type: str = "u32", req: Req = T.BASE):
        self.name = name
        self.type = type
        self.req = req

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Special({self.name} .{self.type})"


class _Vec3:
    def __init__(self, base: str):
        self.x = Special(f"%{base}.x")
        self.y = Special(f"%{base}.y")
        self.z = Special(f"%{base}.z")


class sreg:
    """Special registers: ``sreg.tid.x``, ``sreg.ctaid.y``, ``sreg.laneid`` ..."""

    tid = _Vec3("tid")
    ntid = _Vec3("ntid")
    ctaid = _Vec3("ctaid")
    nctaid = _Vec3("nctaid")
    laneid = Special("%laneid")
    warpid = Special("%warpid")
    nwarpid = Special("%nwarpid")
    smid = Special("%smid")
    nsmid = Special("%nsmid")
    gridid = Special("%gridid", "u64")
    lanemask_eq = Special("%lanemask_eq")
    lanemask_lt = Special("%lanemask_lt")
    lanemask_le = Special("%lanemask_le")
    lanemask_gt = Special("%lanemask_gt")
    lanemask_ge = Special("%lanemask_ge")
    clock = Special("%clock")
    clock64 = Special("%clock64", "u64")
    globaltimer = Special("%globaltimer", "u64")


class Param:
    """A kernel parameter (``.param .u64 name``; type "tensormap": ``.param .align 64 .b8 name[128]``)."""

    __slots__ = ("name", "type", "kernel")

    def __init__(self, name: str, type: str, kernel: Kernel):
        self.name, self.type, self.kernel = name, type, kernel

    def decl(self) -> str:
        if self.type == "tensormap":
            return f".param .align 64 .b8 {self.name}[128]"
        return f".param .{self.type} {self.name}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Param({self.name} .{self.type})"


class Shared:
    """A ``.shared`` array of a kernel; ``nbytes`` is its size."""

    __slots__ = ("name", "type", "count", "align", "kernel")

    def __init__(self, name: str, type: str, count: int, align: int, kernel: Kernel):
        self.name, self.type, self.count, self.align, self.kernel = name, type, count, align, kernel

    @property
    def nbytes(self) -> int:
        return self.count * T.bits(self.type) // 8

    def __add__(self, offset: int) -> Addr:
        return Addr(self, offset)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Shared({self.name} .{self.type}[{self.count}] align {self.align})"


class Addr:
    """A memory operand ``[base+offset]``; base is a register, a Param or a Shared array."""

    __slots__ = ("base", "offset")

    def __init__(self, base, offset: int = 0):
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise PtxTypeError(f"address offset must be an int, got {offset!r}")
        if not isinstance(base, Reg | Param | Shared):
            raise PtxTypeError(f"address base must be a register, a Param or a Shared array, got {base!r}")
        self.base = base
        self.offset = offset

    def __str__(self) -> str:
        if self.offset > 0:
            return f"[{self.base}+{self.offset}]"
        if self.offset < 0:
            return f"[{self.base}{self.offset}]"
        return f"[{self.base}]"


def addr(base, offset: int = 0) -> Addr:
    """``[base+offset]``."""
    return Addr(base, offset)


class Label:
    __slots__ = ("name", "placed")

    def __init__(self, name: str):
        self.name = name
        self.placed = False

    def __str__(self) -> str:
        return self.name


# --------------------------------------------------------------------------- helpers

_CMP_INT = ("eq", "ne", "lt", "le", "gt", "ge")
_CMP_UNSIGNED = _CMP_INT + ("lo", "ls", "hi", "hs")
_CMP_FLOAT = _CMP_INT + ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
_FRND = ("rn", "rz", "rm", "rp")
_IRND = ("rni", "rzi", "rmi", "rpi")
_SPACES = ("global", "shared", "param", "local", "const", None)


def _mem_type(t: str) -> str:
    """ld/st/mov have no .f16/.bf16 forms: use the bit type of the same size."""
    if t in ("f16", "bf16"):
        return "b16"
    if t in ("f16x2", "bf16x2"):
        return "b32"
    return t


def _fail(ins: str, msg: str):
    raise PtxTypeError(f"{ins}: {msg}")


def _as_list(x) -> list:
    return list(x) if isinstance(x, list | tuple) else [x]


# --------------------------------------------------------------------------- kernel


class Kernel:
    """One ``.entry`` function. Create with :meth:`Module.kernel`."""

    def __init__(self, module: Module, name: str, maxntid=None, reqntid=None, minnctapersm=None):
        self.module = module
        self.name = name
        self.params: list[Param] = []
        self.shared_arrays: list[Shared] = []
        self._counts: dict[str, int] = {}
        self._named: list[Reg] = []
        self._names: set[str] = set()
        self._labels: dict[str, Label] = {}
        self._label_count = 0
        self.body: list[str] = []
        self.reqs: set[Req] = set()
        self.directives: list[str] = []
        for key, val in (("maxntid", maxntid), ("reqntid", reqntid)):
            if val is not None:
                dims = _as_list(val)
                if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d > 0 for d in dims):
                    _fail(f".{key}", f"needs 1-3 positive ints, got {val!r}")
                self.directives.append(f".{key} {', '.join(map(str, dims))}")
        if minnctapersm is not None:
            self.directives.append(f".minnctapersm {int(minnctapersm)}")
        self._require(T.BASE)

    # ------------------------------------------------------------------ declarations

    @property
    def signature(self) -> tuple[str, ...]:
        """Parameter types in order, e.g. ``("u64", "u64", "u32")`` (for the driver)."""
        return tuple(p.type for p in self.params)

    def _check_name(self, what: str, name: str) -> None:
        if not _IDENT.match(name):
            _fail(what, f"name {name!r} is not a PTX identifier")
        if name in self._names:
            _fail(what, f"name {name!r} is already used in kernel {self.name!r}")
        self._names.add(name)

    def param(self, type: str, name: str) -> Param:
        """Add a kernel parameter (``.u64`` for pointers)."""
        if type not in T.TYPES or type in ("pred", "tf32", "b128", "f16x2", "bf16x2", "bf16"):
            _fail(".param", f"type {type!r} is not a parameter type")
        self._check_name(".param", name)
        p = Param(name, type, self)
        self.params.append(p)
        if type == "f16":
            self._require(T.F16)
        return p

    def reg(self, type: str, name: str | None = None) -> Reg:
        """Allocate one virtual register of ``type`` (see ``types.REG_TYPES``)."""
        if type not in T.REG_TYPES:
            _fail(".reg", f"type {type!r} is not a register type; use one of {', '.join(T.REG_TYPES)}")
        if type in ("f16", "f16x2"):
            self._require(T.F16)
        elif type == "b128":
            self._require(T.B128)
        if name is None:
            n = self._counts.get(type, 0)
            self._counts[type] = n + 1
            return Reg(f"%{_PREFIX[type]}{n}", type, self)
        if _AUTO_NAME.match(name):
            _fail(".reg", f"name {name!r} collides with automatic register names")
        self._check_name(".reg", name)
        r = Reg(f"%{name}", type, self)
        self._named.append(r)
        return r

    def regs(self, type: str, n: int) -> list[Reg]:
        """Allocate ``n`` registers of ``type``."""
        return [self.reg(type) for _ in range(n)]

    def shared(self, name: str, type: str, count: int, align: int | None = None) -> Shared:
        """Declare ``.shared .align A .type name[count]`` in this kernel."""
        if type not in T.TYPES or type in ("pred", "tf32"):
            _fail(".shared", f"type {type!r} is not a memory type")
        if not isinstance(count, int) or count <= 0:
            _fail(".shared", f"count must be a positive int, got {count!r}")
        size = max(1, T.bits(type) // 8)
        align = size if align is None else align
        if not isinstance(align, int) or align < size or align & (align - 1):
            _fail(".shared", f"align must be a power of two >= {size}, got {align!r}")
        self._check_name(".shared", name)
        s = Shared(name, type, count, align, self)
        self.shared_arrays.append(s)
        if type in ("f16", "f16x2", "bf16", "bf16x2"):
            self._require(T.F16)
        return s

    @property
    def shared_bytes(self) -> int:
        return sum(s.nbytes for s in self.shared_arrays)

    def label(self, name: str = "L") -> Label:
        """A new unique label (place it with :meth:`place`)."""
        if not _IDENT.match(name):
            _fail("label", f"name {name!r} is not a PTX identifier")
        self._label_count += 1
        lab = Label(f"${name}_{self._label_count}")
        self._labels[lab.name] = lab
        return lab

    def place(self, label: Label) -> None:
        if not isinstance(label, Label) or self._labels.get(label.name) is not label:
            _fail("label", f"{label!r} is not a label of kernel {self.name!r}")
        if label.placed:
            _fail("label", f"{label.name} is already placed")
        label.placed = True
        self.body.append(f"{label.name}:")

    # ------------------------------------------------------------------ plumbing

    def _require(self, req: Req) -> None:
        self.module._check_req(req)
        self.reqs.add(req)

    def _emit(self, text: str, pred=None, reqs: Sequence[Req] = ()) -> None:
        guard = ""
        if pred is not None:
            guard = "@" + self._pred_text("guard", pred) + " "
        for r in reqs:
            self._require(r)
        self.body.append(guard + text + ";")

    def _pred_text(self, ins: str, p) -> str:
        if isinstance(p, NotPred):
            p = p.reg
            neg = "!"
        else:
            neg = ""
        if not isinstance(p, Reg) or p.type != "pred":
            _fail(ins, f"predicate must be a .pred register (or ~p), got {p!r}")
        self._own(ins, "predicate", p)
        return neg + p.name

    def _own(self, ins: str, what: str, r) -> None:
        if getattr(r, "kernel", self) is not self:
            _fail(ins, f"operand {what} {r!r} belongs to kernel {r.kernel.name!r}, not {self.name!r}")

    def _reg(self, ins: str, what: str, x, t: str) -> str:
        """A register operand compatible with instruction type ``t``."""
        if not isinstance(x, Reg):
            _fail(ins, f"operand {what} must be a register compatible with .{t}, got {x!r}")
        self._own(ins, what, x)
        if not T.compatible(t, x.type):
            _fail(ins, f"operand {what} is {x.name} of type .{x.type}, not compatible with .{t}")
        return x.name

    def _src(self, ins: str, what: str, x, t: str, imm: bool = True, special: bool = False) -> str:
        """A source: register, immediate (int for integer/bit types, float for .f32/.f64) or special."""
        if isinstance(x, Reg):
            return self._reg(ins, what, x, t)
        if isinstance(x, Special):
            if not special:
                _fail(ins, f"operand {what}: special register {x.name} can only be read with mov")
            if not T.compatible(t, x.type):
                _fail(ins, f"operand {what} is {x.name} of type .{x.type}, not compatible with .{t}")
            self._require(x.req)
            return x.name
        if isinstance(x, bool) or not isinstance(x, int | float):
            _fail(ins, f"operand {what} must be a register or an immediate, got {x!r}")
        if not imm:
            _fail(ins, f"operand {what} must be a register, got immediate {x!r}")
        k = T.kind(t)
        if t in ("f32", "f64"):
            return T.float_literal(float(x), t)
        if k in ("u", "s", "b") and isinstance(x, int):
            lo, hi = T.int_range(t)
            if not lo <= x <= hi:
                _fail(ins, f"operand {what}: immediate {x} is out of range [{lo}, {hi}] for .{t}")
            return f"0x{x:X}" if k == "b" and x > 0xFFFF else str(x)
        _fail(ins, f"operand {what}: immediate {x!r} is not allowed for .{t}")

    def _dst(self, ins: str, x, t: str) -> str:
        return self._reg(ins, "d (destination)", x, t)

    def _address(self, ins: str, a, space) -> str:
        if isinstance(a, Reg | Param | Shared):
            a = Addr(a)
        if not isinstance(a, Addr):
            _fail(ins, f"address operand must be Addr/register/Param/Shared, got {a!r}")
        base = a.base
        self._own(ins, "address", base)
        if isinstance(base, Param):
            if space != "param":
                _fail(ins, f"address {base.name} is a kernel parameter; use the .param state space")
        elif isinstance(base, Shared):
            if space not in ("shared", None):
                _fail(ins, f"address {base.name} is a .shared array; use the .shared state space")
        else:
            ok = ("u64", "s64", "b64") + (("u32", "s32", "b32") if space == "shared" else ())
            if base.type not in ok:
                _fail(ins, f"address register {base.name} is .{base.type}; needs one of {', '.join(ok)}")
            if space == "param":
                _fail(ins, "ld.param/st.param take a Param operand, not a register address")
        return str(a)

    # ------------------------------------------------------------------ data movement

    def mov(self, dst, src, pred=None) -> None:
        """mov: register/immediate/special register/array address; lists pack or unpack."""
        ins = "mov"
        if isinstance(dst, list | tuple):  # unpack: mov.b32 {a, b}, d
            if not isinstance(src, Reg):
                _fail(ins, f"unpacking needs a register source, got {src!r}")
            parts = list(dst)
            if len(parts) not in (2, 4):
                _fail(ins, f"unpacking into {len(parts)} registers; needs 2 or 4")
            t = f"b{T.bits(src.type)}"
            pt = f"b{T.bits(src.type) // len(parts)}"
            if pt not in T.TYPES or pt == "b8":
                _fail(ins, f"cannot unpack .{src.type} into {len(parts)} parts")
            names = [self._reg(ins, f"d[{i}]", r, pt) for i, r in enumerate(parts)]
            s = self._reg(ins, "a", src, t)
            self._emit(f"mov.{t} {{{', '.join(names)}}}, {s}", pred)
            return
        if not isinstance(dst, Reg):
            _fail(ins, f"destination must be a register, got {dst!r}")
        if isinstance(src, list | tuple):  # pack: mov.b32 d, {a, b}
            parts = list(src)
            t = f"b{T.bits(dst.type)}"
            if len(parts) not in (2, 4) or T.bits(dst.type) // len(parts) < 16:
                _fail(ins, f"cannot pack {len(parts)} registers into .{dst.type}")
            pt = f"b{T.bits(dst.type) // len(parts)}"
            d = self._dst(ins, dst, t)
            names = [self._reg(ins, f"a[{i}]", r, pt) for i, r in enumerate(parts)]
            self._emit(f"mov.{t} {d}, {{{', '.join(names)}}}", pred)
            return
        if isinstance(src, Shared | Param):  # address of a variable
            self._own(ins, "a", src)
            if dst.type not in ("u64", "b64", "s64", "u32", "b32", "s32"):
                _fail(ins, f"address of {src.name} needs a 32/64-bit integer destination, got .{dst.type}")
            t = f"u{T.bits(dst.type)}"
            self._emit(f"mov.{t} {dst.name}, {src.name}", pred)
            return
        t = _mem_type(dst.type)
        d = self._dst(ins, dst, t)
        if isinstance(src, int | float) and not isinstance(src, bool) and dst.type in T.PACKED + ("f16", "bf16"):
            _fail(ins, f"operand a: no immediates for .{dst.type}; move the bit pattern into a .b register")
        s = self._src(ins, "a", src, t, special=True)
        self._emit(f"mov.{t} {d}, {s}", pred)

    def _ldst_type(self, ins: str, regs: list, type: str | None) -> str:
        if not regs:
            _fail(ins, "needs at least one register")
        for i, r in enumerate(regs):
            if not isinstance(r, Reg):
                _fail(ins, f"operand {i} must be a register, got {r!r}")
            if r.type == "pred":
                _fail(ins, f"operand {r.name} is a predicate; predicates cannot be loaded or stored")
        t0 = regs[0].type
        if any(r.type != t0 for r in regs):
            _fail(ins, "vector operands must all have the same type: " + ", ".join(f".{r.type}" for r in regs))
        if type is None:
            return _mem_type(t0)
        if type not in T.TYPES or type in ("pred", "tf32"):
            _fail(ins, f"type {type!r} is not a memory type")
        t = _mem_type(type)
        for i, r in enumerate(regs):
            if T.bits(t) == 8:
                if T.kind(r.type) not in ("u", "s", "b") or T.bits(r.type) > 32:
                    _fail(ins, f"operand {i}: .{t} needs a 16/32-bit integer register, got {r.name} .{r.type}")
            else:
                self._reg(ins, f"{i} ({r.name})", r, t)
        return t

    def _vec(self, ins: str, n: int, t: str) -> str:
        if n == 1:
            return ""
        if n not in (2, 4):
            _fail(ins, f"vector length {n}; needs 1, 2 or 4 registers")
        if t == "b128" or n * T.bits(t) > 128:
            _fail(ins, f".v{n}.{t} exceeds 128 bits")
        return f".v{n}"

    def ld(self, space, dst, address, type: str | None = None, cache: str | None = None, nc: bool = False, pred=None):
        """``ld{.space}{.nc}{.cop}{.v2|.v4}.type d, [a]``; ``dst`` a register or a list of 2/4."""
        ins = f"ld.{space}" if space else "ld"
        if space not in _SPACES:
            _fail(ins, f"state space {space!r}; use one of {_SPACES}")
        regs = _as_list(dst)
        t = self._ldst_type(ins, regs, type)
        vec = self._vec(ins, len(regs), t)
        a = self._address(ins, address, space)
        pbase = address.base if isinstance(address, Addr) else address
        if isinstance(pbase, Param) and T.bits(t) != T.bits(pbase.type):
            _fail(ins, f"parameter {pbase.name} is .{pbase.type}, load type .{t} does not match")
        mods = ""
        if nc:
            if space != "global":
                _fail(ins, ".nc needs the .global state space")
            mods += ".nc"
        if cache is not None:
            if cache not in ("ca", "cg", "cs", "lu", "cv"):
                _fail(ins, f"cache operator {cache!r}; use ca, cg, cs, lu or cv")
            mods += "." + cache
        d = regs[0].name if len(regs) == 1 else "{" + ", ".join(r.name for r in regs) + "}"
        sp = f".{space}" if space else ""
        self._emit(f"ld{sp}{mods}{vec}.{t} {d}, {a}", pred, [T.B128] if t == "b128" else [])

    def ld_param(self, dst, param: Param, pred=None) -> None:
        """``ld.param.type d, [param]``."""
        if not isinstance(param, Param):
            _fail("ld.param", f"operand a must be a Param, got {param!r}")
        self.ld("param", dst, param, type=param.type, pred=pred)

    def st(self, space, address, src, type: str | None = None, cache: str | None = None, pred=None) -> None:
        """``st{.space}{.cop}{.v2|.v4}.type [a], b``; ``src`` a register or a list of 2/4."""
        ins = f"st.{space}" if space else "st"
        if space not in _SPACES or space in ("const", "param"):
            _fail(ins, f"state space {space!r} cannot be stored to here")
        regs = _as_list(src)
        t = self._ldst_type(ins, regs, type)
        vec = self._vec(ins, len(regs), t)
        a = self._address(ins, address, space)
        mods = ""
        if cache is not None:
            if cache not in ("wb", "cg", "cs", "wt"):
                _fail(ins, f"cache operator {cache!r}; use wb, cg, cs or wt")
            mods = "." + cache
        s = regs[0].name if len(regs) == 1 else "{" + ", ".join(r.name for r in regs) + "}"
        sp = f".{space}" if space else ""
        self._emit(f"st{sp}{mods}{vec}.{t} {a}, {s}", pred, [T.B128] if t == "b128" else [])

    def cvta(self, dst, src, space: str = "global", to: bool = True, pred=None) -> None:
        """``cvta.to.space.u64 d, a`` (generic -> space) or ``cvta.space.u64 d, a`` (space ->
        generic; ``a`` a register or a .shared variable or kernel parameter). ``.param`` needs
        PTX 7.7 and sm_70 (a 64-bit destination: kernel parameters have generic addresses only)."""
        ins = "cvta"
        if space not in ("global", "shared", "local", "const", "param"):
            _fail(ins, f"state space {space!r}")
        if not isinstance(dst, Reg):
            _fail(ins, f"destination must be a register, got {dst!r}")
        t = "u64" if T.bits(dst.type) == 64 else "u32"
        if space == "param" and t != "u64":
            _fail(ins, f"cvta .param needs a 64-bit destination, got {dst.name} of type .{dst.type}")
        d = self._dst(ins, dst, t)
        if isinstance(src, Shared | Param):
            if to:
                _fail(ins, "cvta.to takes a register holding an address, not a variable")
            self._own(ins, "a", src)
            if (space == "param") != isinstance(src, Param):
                _fail(ins, f"variable {src.name} is not in the .{space} state space")
            s = src.name
        else:
            s = self._src(ins, "a", src, t, imm=False)
        self._emit(f"cvta{'.to' if to else ''}.{space}.{t} {d}, {s}", pred, [CVTA_PARAM] if space == "param" else [])

    # ------------------------------------------------------------------ arithmetic

    def _arith_type(self, ins: str, dst, type: str | None, a=None) -> str:
        if type is not None:
            if type not in T.TYPES:
                _fail(ins, f"unknown type {type!r}")
            return type
        if not isinstance(dst, Reg):
            _fail(ins, f"destination must be a register, got {dst!r}")
        return dst.type

    def _arith_reqs(self, ins: str, t: str) -> list[Req]:
        if t in ("f16", "f16x2"):
            return [T.F16]
        if t in ("bf16", "bf16x2"):
            if ins.startswith("fma"):
                return [Req((7, 0), 80, "fma .bf16")]
            return [T.BF16_ARITH]
        return []

    def _addsub(self, op: str, dst, a, b, type, rnd, sat, ftz, pred) -> None:
        t = self._arith_type(op, dst, type)
        if T.kind(t) not in ("u", "s", "f") or t in ("tf32", "u8", "s8"):
            _fail(op, f"type .{t} is not an arithmetic type (a .b register needs type=)")
        mods = ""
        if rnd is not None:
            if not T.is_float(t) or rnd not in _FRND:
                _fail(op, f"rounding .{rnd} needs a float type and one of {_FRND}")
            mods += "." + rnd
        if ftz:
            if t not in ("f32", "f16", "f16x2"):
                _fail(op, ".ftz needs .f32/.f16")
            mods += ".ftz"
        if sat:
            if t not in ("s32", "f32", "f16", "f16x2"):
                _fail(op, ".sat needs .s32 or a float type")
            mods += ".sat"
        d = self._dst(op, dst, t)
        sa = self._src(op, "a", a, t)
        sb = self._src(op, "b", b, t)
        self._emit(f"{op}{mods}.{t} {d}, {sa}, {sb}", pred, self._arith_reqs(op, t))

    def add(self, dst, a, b, type=None, rnd=None, sat=False, ftz=False, pred=None) -> None:
        self._addsub("add", dst, a, b, type, rnd, sat, ftz, pred)

    def sub(self, dst, a, b, type=None, rnd=None, sat=False, ftz=False, pred=None) -> None:
        self._addsub("sub", dst, a, b, type, rnd, sat, ftz, pred)

    def _int_mode(self, ins: str, dst, a, type, mode) -> tuple[str, str]:
        """(source type, destination type) of mul/mad .lo/.hi/.wide."""
        if mode not in ("lo", "hi", "wide"):
            _fail(ins, f"integer {ins} needs mode 'lo', 'hi' or 'wide', got {mode!r}")
        if mode != "wide":
            t = self._arith_type(ins, dst, type)
            return t, t
        if type is None:
            if not isinstance(a, Reg):
                _fail(ins, "mul/mad.wide with an immediate first operand needs type=")
            type = a.type
        if type not in ("u16", "u32", "s16", "s32"):
            _fail(ins, f".wide needs a 16/32-bit integer source type, got .{type}")
        return type, f"{type[0]}{2 * T.bits(type)}"

    def mul(self, dst, a, b, type=None, mode=None, rnd=None, ftz=False, sat=False, pred=None) -> None:
        """``mul.lo/.hi/.wide`` for integers (mode required), ``mul{.rnd}`` for floats."""
        ins = "mul"
        t0 = type if type is not None else (a.type if mode == "wide" and isinstance(a, Reg) else None)
        t0 = t0 if t0 is not None else self._arith_type(ins, dst, None)
        if t0 not in T.TYPES:
            _fail(ins, f"unknown type {t0!r}")
        if T.is_int(t0):
            if rnd is not None or ftz or sat:
                _fail(ins, "rounding/.ftz/.sat are float modifiers")
            ts, td = self._int_mode(ins, dst, a, type, mode)
            d = self._dst(ins, dst, td)
            sa, sb = self._src(ins, "a", a, ts), self._src(ins, "b", b, ts)
            self._emit(f"mul.{mode}.{ts} {d}, {sa}, {sb}", pred)
            return
        if mode is not None:
            _fail(ins, f"mode .{mode} is for integer types, this is .{t0}")
        if not T.is_float(t0) or t0 == "tf32":
            _fail(ins, f"type .{t0} is not an arithmetic type (a .b register needs type=)")
        mods = ""
        if rnd is not None:
            if rnd not in _FRND:
                _fail(ins, f"rounding {rnd!r}; one of {_FRND}")
            mods += "." + rnd
        mods += ".ftz" if ftz else ""
        mods += ".sat" if sat else ""
        d = self._dst(ins, dst, t0)
        sa, sb = self._src(ins, "a", a, t0), self._src(ins, "b", b, t0)
        self._emit(f"mul{mods}.{t0} {d}, {sa}, {sb}", pred, self._arith_reqs(ins, t0))

    def mad(self, dst, a, b, c, type=None, mode=None, rnd="rn", pred=None) -> None:
        """``mad.lo/.hi/.wide`` for integers; ``mad.rn`` for floats (rounding required)."""
        ins = "mad"
        t0 = type if type is not None else (a.type if mode == "wide" and isinstance(a, Reg) else None)
        t0 = t0 if t0 is not None else self._arith_type(ins, dst, None)
        if t0 not in T.TYPES:
            _fail(ins, f"unknown type {t0!r}")
        if T.is_int(t0):
            ts, td = self._int_mode(ins, dst, a, type, mode)
            d = self._dst(ins, dst, td)
            sa, sb = self._src(ins, "a", a, ts), self._src(ins, "b", b, ts)
            sc = self._src(ins, "c", c, td)
            self._emit(f"mad.{mode}.{ts} {d}, {sa}, {sb}, {sc}", pred)
            return
        if t0 not in ("f32", "f64"):
            _fail(ins, f"type .{t0}: mad takes integer, .f32 or .f64 (use fma for f16)")
        if rnd not in _FRND:
            _fail(ins, f"float mad needs a rounding mode from {_FRND}")
        d = self._dst(ins, dst, t0)
        sa, sb, sc = (self._src(ins, n, x, t0) for n, x in (("a", a), ("b", b), ("c", c)))
        self._emit(f"mad.{rnd}.{t0} {d}, {sa}, {sb}, {sc}", pred)

    def fma(self, dst, a, b, c, type=None, rnd="rn", ftz=False, sat=False, pred=None) -> None:
        """``fma.rn.type d, a, b, c`` (.f32/.f64/.f16/.f16x2/.bf16/.bf16x2)."""
        ins = "fma"
        t = self._arith_type(ins, dst, type)
        if t not in ("f32", "f64", "f16", "f16x2", "bf16", "bf16x2"):
            _fail(ins, f"type .{t} is not a float type")
        if rnd not in _FRND or (t not in ("f32", "f64") and rnd != "rn"):
            _fail(ins, f"rounding {rnd!r} not allowed for fma.{t}")
        mods = f".{rnd}" + (".ftz" if ftz else "") + (".sat" if sat else "")
        d = self._dst(ins, dst, t)
        sa, sb, sc = (self._src(ins, n, x, t) for n, x in (("a", a), ("b", b), ("c", c)))
        self._emit(f"fma{mods}.{t} {d}, {sa}, {sb}, {sc}", pred, self._arith_reqs(ins, t))

    def div(self, dst, a, b, type=None, rnd="rn", ftz=False, pred=None) -> None:
        """``div{.rnd}.f32/.f64 d, a, b`` (IEEE; ``rnd`` rn/rz/rm/rp, or "approx"/"full" for .f32);
        ``div.{s,u}{16,32,64}`` for integers (truncating; pass ``rnd=None``)."""
        ins = "div"
        t = self._arith_type(ins, dst, type)
        if T.is_int(t):
            if rnd is not None or ftz:
                _fail(ins, f"integer division .{t} takes no rounding or .ftz")
            mods = ""
        elif t in ("f32", "f64"):
            ok = _FRND + (("approx", "full") if t == "f32" else ())
            if rnd not in ok:
                _fail(ins, f"div.{t} needs rounding from {ok}, got {rnd!r}")
            if ftz and t != "f32":
                _fail(ins, ".ftz needs .f32")
            mods = f".{rnd}" + (".ftz" if ftz else "")
        else:
            _fail(ins, f"type .{t} is not an integer, .f32 or .f64 type")
        d = self._dst(ins, dst, t)
        sa, sb = self._src(ins, "a", a, t), self._src(ins, "b", b, t)
        self._emit(f"div{mods}.{t} {d}, {sa}, {sb}", pred)

    def _minmax(self, op: str, dst, a, b, type, pred) -> None:
        t = self._arith_type(op, dst, type)
        if T.kind(t) not in ("u", "s") and t not in ("f32", "f64"):
            _fail(op, f"type .{t} is not an integer, .f32 or .f64 type")
        d = self._dst(op, dst, t)
        self._emit(f"{op}.{t} {d}, {self._src(op, 'a', a, t)}, {self._src(op, 'b', b, t)}", pred)

    def min(self, dst, a, b, type=None, pred=None) -> None:
        self._minmax("min", dst, a, b, type, pred)

    def max(self, dst, a, b, type=None, pred=None) -> None:
        self._minmax("max", dst, a, b, type, pred)

    def _logic(self, op: str, dst, srcs, pred) -> None:
        if not isinstance(dst, Reg):
            _fail(op, f"destination must be a register, got {dst!r}")
        t = "pred" if dst.type == "pred" else f"b{T.bits(dst.type)}"
        if t not in ("pred", "b16", "b32", "b64"):
            _fail(op, f"destination .{dst.type}: needs a 16/32/64-bit or .pred register")
        d = self._dst(op, dst, t)
        names = [self._src(op, n, x, t, imm=t != "pred") for n, x in zip("abc", srcs, strict=False)]
        self._emit(f"{op}.{t} {d}, {', '.join(names)}", pred)

    def and_(self, dst, a, b, pred=None) -> None:
        self._logic("and", dst, (a, b), pred)

    def or_(self, dst, a, b, pred=None) -> None:
        self._logic("or", dst, (a, b), pred)

    def xor(self, dst, a, b, pred=None) -> None:
        self._logic("xor", dst, (a, b), pred)

    def not_(self, dst, a, pred=None) -> None:
        self._logic("not", dst, (a,), pred)

    def shl(self, dst, a, b, pred=None) -> None:
        """``shl.bN d, a, b`` (b: .u32 register or 0..N immediate)."""
        ins = "shl"
        if not isinstance(dst, Reg) or T.bits(dst.type) not in (16, 32, 64) or dst.type == "b128":
            _fail(ins, f"destination must be a 16/32/64-bit register, got {dst!r}")
        t = f"b{T.bits(dst.type)}"
        d = self._dst(ins, dst, t)
        self._emit(f"shl.{t} {d}, {self._src(ins, 'a', a, t)}, {self._src(ins, 'b', b, 'u32')}", pred)

    def shr(self, dst, a, b, type=None, pred=None) -> None:
        """``shr.{u,s,b}N``: logical for .u/.b, arithmetic for .s (type defaults to dst's)."""
        ins = "shr"
        t = self._arith_type(ins, dst, type)
        if T.kind(t) not in ("u", "s", "b") or T.bits(t) not in (16, 32, 64):
            _fail(ins, f"type .{t} is not a 16/32/64-bit integer or bit type")
        d = self._dst(ins, dst, t)
        self._emit(f"shr.{t} {d}, {self._src(ins, 'a', a, t)}, {self._src(ins, 'b', b, 'u32')}", pred)

    # ------------------------------------------------------------------ comparison and selection

    def setp(self, cmp: str, p, a, b, type: str | None = None, ftz: bool = False, pred=None) -> None:
        """``setp.cmp.type p, a, b``; the type defaults to ``a``'s register type."""
        ins = f"setp.{cmp}"
        if not isinstance(p, Reg) or p.type != "pred":
            _fail(ins, f"operand p (destination) must be a .pred register, got {p!r}")
        self._own(ins, "p", p)
        if type is None:
            if not isinstance(a, Reg):
                _fail(ins, "operand a is not a register; pass type=")
            type = a.type
        t = type
        if t not in T.TYPES or t in ("pred", "tf32", "b128") or T.bits(t) == 8:
            _fail(ins, f"type .{t} cannot be compared")
        k = T.kind(t)
        allowed = {"b": ("eq", "ne"), "u": _CMP_UNSIGNED, "s": _CMP_INT, "f": _CMP_FLOAT}[k]
        if cmp not in allowed:
            _fail(ins, f"comparison .{cmp} is not defined for .{t}; allowed: {', '.join(allowed)}")
        if t in T.PACKED:
            _fail(ins, "packed types need a pair of predicates; not supported")
        reqs = [T.F16] if t == "f16" else [Req((7, 8), 90, "setp .bf16")] if t == "bf16" else []
        mods = ".ftz" if ftz else ""
        if ftz and t != "f32":
            _fail(ins, ".ftz needs .f32")
        sa, sb = self._src(ins, "a", a, t), self._src(ins, "b", b, t)
        self._emit(f"setp.{cmp}{mods}.{t} {p.name}, {sa}, {sb}", pred, reqs)

    def selp(self, dst, a, b, p, pred=None) -> None:
        """``selp.type d, a, b, p``: d = p ? a : b."""
        ins = "selp"
        if not isinstance(dst, Reg):
            _fail(ins, f"destination must be a register, got {dst!r}")
        t = dst.type
        if t not in ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64"):
            _fail(ins, f"type .{t} is not selectable")
        d = self._dst(ins, dst, t)
        sa, sb = self._src(ins, "a", a, t), self._src(ins, "b", b, t)
        if not isinstance(p, Reg) or p.type != "pred":
            _fail(ins, f"operand p must be a .pred register, got {p!r}")
        self._own(ins, "p", p)
        self._emit(f"selp.{t} {d}, {sa}, {sb}, {p.name}", pred)

    # ------------------------------------------------------------------ control flow and sync

    def bra(self, label: Label, pred=None, uni: bool = False) -> None:
        """``{@p} bra{.uni} label``; ``pred=~p`` for ``@!p``."""
        if not isinstance(label, Label) or self._labels.get(label.name) is not label:
            _fail("bra", f"target must be a label of kernel {self.name!r}, got {label!r}")
        self._emit(f"bra{'.uni' if uni else ''} {label.name}", pred)

    def ret(self, pred=None) -> None:
        self._emit("ret", pred)

    def exit(self, pred=None) -> None:
        self._emit("exit", pred)

    def bar_sync(self, barrier: int = 0, count: int | None = None, pred=None) -> None:
        """``bar.sync a{, b}``; ``count`` must be a multiple of 32."""
        ins = "bar.sync"
        a = self._src(ins, "a (barrier)", barrier, "u32")
        if isinstance(barrier, int) and not 0 <= barrier <= 15:
            _fail(ins, f"operand a (barrier): {barrier} not in 0..15")
        text = f"bar.sync {a}"
        if count is not None:
            if isinstance(count, int) and (count <= 0 or count % 32):
                _fail(ins, f"operand b (thread count) {count} must be a positive multiple of 32")
            text += f", {self._src(ins, 'b (count)', count, 'u32')}"
        self._emit(text, pred)

    def shfl_sync(self, mode: str, dst, a, b, c, membermask=0xFFFFFFFF, pred_out=None, pred=None) -> None:
        """``shfl.sync.mode.b32 d{|p}, a, b, c, membermask`` (mode up/down/bfly/idx)."""
        ins = f"shfl.sync.{mode}"
        if mode not in ("up", "down", "bfly", "idx"):
            _fail(ins, f"mode {mode!r}; one of up, down, bfly, idx")
        d = self._dst(ins, dst, "b32")
        if pred_out is not None:
            if not isinstance(pred_out, Reg) or pred_out.type != "pred":
                _fail(ins, f"operand p must be a .pred register, got {pred_out!r}")
            self._own(ins, "p", pred_out)
            d += "|" + pred_out.name
        sa = self._src(ins, "a", a, "b32", imm=False)
        if isinstance(b, int) and not isinstance(b, bool) and not 0 <= b <= 31:
            _fail(ins, f"operand b (lane/offset) {b} not in 0..31")
        sb = self._src(ins, "b", b, "u32")
        sc = self._src(ins, "c", c, "u32")
        sm = self._src(ins, "membermask", membermask, "b32")
        self._emit(f"shfl.sync.{mode}.b32 {d}, {sa}, {sb}, {sc}, {sm}", pred, [T.SHFL_SYNC])

    # ------------------------------------------------------------------ conversion

    def cvt(self, dst, src, rnd=None, dtype=None, atype=None, ftz=False, sat=False, relu=False, pred=None) -> None:
        """``cvt{.rnd}{.ftz}{.sat}.dtype.atype d, a``.

        ``dtype``/``atype`` default to the registers' types; .b16/.b32 registers
        (e.g. tf32 or bf16 bit patterns) need them spelled out. Packing two f32
        into .f16x2/.bf16x2: pass ``src=(hi, lo)`` (or use :meth:`cvt_pack`).
        """
        ins = "cvt"
        if not isinstance(dst, Reg):
            _fail(ins, f"destination must be a register, got {dst!r}")
        dt = dtype or {"bf16": "bf16", "bf16x2": "bf16x2"}.get(dst.type, dst.type)
        if dt not in T.TYPES or dt in ("pred", "b128") or T.kind(dt) == "b":
            _fail(ins, f"destination type .{dt} needs dtype= (e.g. 'tf32', 'bf16', 'f16x2')")
        srcs = list(src) if isinstance(src, list | tuple) else [src]
        for i, s in enumerate(srcs):
            if not isinstance(s, Reg):
                _fail(ins, f"operand a[{i}] must be a register, got {s!r}")
        at = atype or srcs[0].type
        if at not in T.TYPES or at in ("pred", "b128") or T.kind(at) == "b":
            _fail(ins, f"source type .{at} needs atype=")
        mods = ""
        reqs: list[Req] = []
        dflt, aflt = T.is_float(dt), T.is_float(at)
        if dt in T.PACKED:
            if len(srcs) != 2 or at != "f32":
                _fail(ins, f"cvt to .{dt} takes two .f32 sources (hi, lo)")
            if rnd not in ("rn", "rz"):
                _fail(ins, f"cvt to .{dt} needs rounding rn or rz, got {rnd!r}")
            mods = f".{rnd}" + (".relu" if relu else "")
            reqs.append(Req((7, 0), 80, f"cvt.{dt}.f32"))
        else:
            if len(srcs) != 1:
                _fail(ins, f"cvt to .{dt} takes one source")
            if relu:
                _fail(ins, ".relu only applies to conversions to f16/bf16 types")
            if dt == at:
                _fail(ins, f"cvt from .{at} to itself")
            if dt == "tf32":
                if at != "f32" or rnd != "rna":
                    _fail(ins, "cvt to .tf32 is cvt.rna.tf32.f32 (rnd='rna', .f32 source)")
                mods = ".rna"
                reqs.append(Req((7, 0), 80, "cvt.rna.tf32.f32"))
            elif dflt and aflt:
                if dt == "bf16" or at == "bf16":
                    if {dt, at} != {"bf16", "f32"}:
                        _fail(ins, f"cvt between .{dt} and .{at} is not supported (only f32 <-> bf16)")
                    reqs.append(Req((7, 0), 80, "cvt.bf16.f32") if dt == "bf16" else T.CVT_F32_BF16)
                if T.bits(dt) < T.bits(at):
                    if rnd not in _FRND:
                        _fail(ins, f"narrowing .{at} -> .{dt} needs rounding from {_FRND}, got {rnd!r}")
                    mods = "." + rnd
                elif rnd is not None:
                    _fail(ins, f"widening .{at} -> .{dt} takes no rounding, got {rnd!r}")
            elif aflt:  # float -> int
                if rnd not in _IRND:
                    _fail(ins, f"float -> integer needs integer rounding from {_IRND}, got {rnd!r}")
                mods = "." + rnd
            elif dflt:  # int -> float
                if dt in ("bf16", "tf32"):
                    _fail(ins, f"integer -> .{dt} is not supported")
                if rnd not in _FRND:
                    _fail(ins, f"integer -> float needs rounding from {_FRND}, got {rnd!r}")
                mods = "." + rnd
            elif rnd is not None:
                _fail(ins, f"integer -> integer takes no rounding, got {rnd!r}")
        if ftz:
            if "f32" not in (dt, at):
                _fail(ins, ".ftz needs an .f32 source or destination")
            mods += ".ftz"
        if sat:
            mods += ".sat"
        dreg_t = {"tf32": "b32", "bf16x2": "b32", "f16x2": "b32", "bf16": "b16"}.get(dt, dt)
        if dst.type in ("bf16", "bf16x2") and dt == dst.type:
            dreg_t = dst.type
        d = self._reg(ins, "d", dst, dreg_t)
        names = [self._reg(ins, f"a[{i}]" if len(srcs) > 1 else "a", s, at) for i, s in enumerate(srcs)]
        self._emit(f"cvt{mods}.{dt}.{at} {d}, {', '.join(names)}", pred, reqs)

    def cvt_pack(self, dst, hi, lo, dtype: str = "f16x2", rnd: str = "rn", relu: bool = False, pred=None) -> None:
        """``cvt.rn.f16x2.f32 d, hi, lo``: ``hi`` goes to the upper 16 bits, ``lo`` to the lower."""
        if dtype not in T.PACKED:
            _fail("cvt", f"cvt_pack packs into .f16x2 or .bf16x2, not .{dtype}")
        self.cvt(dst, (hi, lo), rnd=rnd, dtype=dtype, atype="f32", relu=relu, pred=pred)

    def cvt_tf32(self, dst, src, pred=None) -> None:
        """``cvt.rna.tf32.f32 d, a`` (d: a .b32 register)."""
        self.cvt(dst, src, rnd="rna", dtype="tf32", atype="f32", pred=pred)

    # ------------------------------------------------------------------ async copies

    def cp_async(self, dst, src, size: int, cache: str = "ca", src_size=None, pred=None) -> None:
        """``cp.async.{ca,cg}.shared.global [d], [s], size{, src_size}`` (size 4/8/16; .cg only 16)."""
        ins = f"cp.async.{cache}"
        if cache not in ("ca", "cg"):
            _fail(ins, f"cache operator {cache!r}; use 'ca' or 'cg'")
        if size not in (4, 8, 16):
            _fail(ins, f"cp-size {size!r}; must be 4, 8 or 16")
        if cache == "cg" and size != 16:
            _fail(ins, f"cp.async.cg needs cp-size 16, got {size}")
        d = self._address(ins, dst, "shared")
        s = self._address(ins, src, "global")
        text = f"cp.async.{cache}.shared.global {d}, {s}, {size}"
        if src_size is not None:
            if isinstance(src_size, int) and not isinstance(src_size, bool) and not 0 <= src_size <= size:
                _fail(ins, f"operand src-size {src_size} not in 0..{size}")
            text += f", {self._src(ins, 'src-size', src_size, 'u32')}"
        self._emit(text, pred, [T.CP_ASYNC])

    def cp_async_commit(self) -> None:
        self._emit("cp.async.commit_group", None, [T.CP_ASYNC])

    def cp_async_wait(self, n: int = 0) -> None:
        """``cp.async.wait_group n``: wait until at most ``n`` groups are pending."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            _fail("cp.async.wait_group", f"operand N must be a non-negative int, got {n!r}")
        self._emit(f"cp.async.wait_group {n}", None, [T.CP_ASYNC])

    def cp_async_wait_all(self) -> None:
        self._emit("cp.async.wait_all", None, [T.CP_ASYNC])

    # ------------------------------------------------------------------ tensor cores

    def ldmatrix(self, dst, address, trans: bool = False, pred=None) -> None:
        """``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 {d..}, [a]``."""
        regs = _as_list(dst)
        ins = f"ldmatrix.x{len(regs)}"
        if len(regs) not in (1, 2, 4):
            _fail(ins, f"needs 1, 2 or 4 destination registers, got {len(regs)}")
        names = [self._reg(ins, f"d[{i}]", r, "b32") for i, r in enumerate(regs)]
        a = self._address(ins, address, "shared")
        t = ".trans" if trans else ""
        self._emit(
            f"ldmatrix.sync.aligned.m8n8.x{len(regs)}{t}.shared.b16 {{{', '.join(names)}}}, {a}", pred, [T.LDMATRIX]
        )

    def mma(self, shape: str, dtype: str, d, a, b, c, pred=None) -> None:
        """``mma.sync.aligned.shape.row.col.f32.dtype.dtype.f32 {d}, {a}, {b}, {c}``.

        Shapes/types: m16n8k8 (f16, bf16, tf32), m16n8k16 (f16, bf16); A/B
        fragments are .b32 registers (or .f16x2/.bf16x2 matching dtype), C/D .f32.
        """
        from .mma import MMA_SHAPES

        ins = f"mma.sync.aligned.{shape}.{dtype}"
        key = (shape, dtype)
        if key not in MMA_SHAPES:
            _fail(ins, f"unsupported shape/type; supported: {sorted(MMA_SHAPES)}")
        info = MMA_SHAPES[key]
        frag_t = {"f16": "f16x2", "bf16": "bf16x2", "tf32": "b32"}[dtype]
        groups = []
        for opname, regs, n, t in (
            ("d", d, info.regs_c, "f32"),
            ("a", a, info.regs_a, frag_t),
            ("b", b, info.regs_b, frag_t),
            ("c", c, info.regs_c, "f32"),
        ):
            regs = _as_list(regs)
            if len(regs) != n:
                _fail(ins, f"operand {opname} needs {n} registers, got {len(regs)}")
            if opname in ("a", "b") and dtype == "tf32":
                names = [self._reg(ins, f"{opname}[{i}]", r, "b32") for i, r in enumerate(regs)]
            else:
                names = [self._reg(ins, f"{opname}[{i}]", r, t) for i, r in enumerate(regs)]
            groups.append("{" + ", ".join(names) + "}")
        self._emit(
            f"mma.sync.aligned.{shape}.row.col.f32.{dtype}.{dtype}.f32 " + ", ".join(groups),
            pred,
            [info.req],
        )

    # ------------------------------------------------------------------ Hopper (sm_90 / sm_90a)

    def tensormap_param(self, name: str) -> Param:
        """A 128-byte tensor-map parameter (``.param .align 64 .b8 name[128]``, signature "tensormap")."""
        self._check_name(".param", name)
        p = Param(name, "tensormap", self)
        self.params.append(p)
        self._require(T.HOPPER_ASYNC)
        return p

    def param_address(self, dst, param: Param) -> None:
        """The *generic* address of a (tensor-map) parameter, for ``cp.async.bulk.tensor``:
        ``mov.u64 d, param; cvta.param.u64 d, d``.

        ``mov`` alone gives the parameter's address in the .param state space (PTX ISA, mov: "the
        non-generic address of the variable"), which the tensor copy does not take: its tensorMap
        operand is a generic address (PTX ISA, cp.async.bulk.tensor). On an H200 the bare ``mov``
        faulted with CUDA_ERROR_MISALIGNED_ADDRESS (the SASS used the parameter's offset as the
        address); ``cvta.param`` adds the parameter base. Needs PTX 7.7 and sm_70."""
        self._own("mov", "a", param)
        if not isinstance(param, Param):
            _fail("mov", f"operand a must be a Param, got {param!r}")
        d = self._dst("mov", dst, "u64")
        self._require(CVTA_PARAM)
        self._emit(f"mov.u64 {d}, {param.name}")
        self._emit(f"cvta.param.u64 {d}, {d}")

    def extern_shared(self, name: str, align: int = 16) -> Shared:
        """Dynamic shared memory: module-level ``.extern .shared .align A .b8 name[]`` (size set at launch)."""
        if not isinstance(align, int) or align < 1 or align & (align - 1):
            _fail(".extern .shared", f"align must be a power of two, got {align!r}")
        self._check_name(".shared", name)
        if any(s.name == name for s in self.module.extern_shared):
            _fail(".extern .shared", f"{name!r} is already declared in the module")
        s = Shared(name, "b8", 0, align, self)
        self.module.extern_shared.append(s)
        return s

    def _bar_addr(self, ins: str, bar) -> str:
        return self._address(ins, bar, "shared")

    def mbarrier_init(self, bar, count, pred=None) -> None:
        """``mbarrier.init.shared::cta.b64 [bar], count`` (expected arrivals, 1 .. 2^20-1)."""
        ins = "mbarrier.init"
        if isinstance(count, int) and not 0 < count < 1 << 20:
            _fail(ins, f"count {count} not in 1..2^20-1")
        c = self._src(ins, "count", count, "u32")
        self._emit(f"mbarrier.init.shared::cta.b64 {self._bar_addr(ins, bar)}, {c}", pred, [T.CP_ASYNC])

    def mbarrier_arrive(self, bar, state=None, pred=None) -> None:
        """``mbarrier.arrive.shared::cta.b64 state|_, [bar]``."""
        ins = "mbarrier.arrive"
        st = "_" if state is None else self._dst(ins, state, "b64")
        self._emit(f"mbarrier.arrive.shared::cta.b64 {st}, {self._bar_addr(ins, bar)}", pred, [T.HOPPER_ASYNC])

    def mbarrier_arrive_expect_tx(self, bar, tx, state=None, pred=None) -> None:
        """``mbarrier.arrive.expect_tx.shared::cta.b64 state|_, [bar], tx``: expect ``tx`` bytes, then arrive."""
        ins = "mbarrier.arrive.expect_tx"
        if isinstance(tx, int) and not 0 <= tx < 1 << 20:
            _fail(ins, f"tx-count {tx} not in 0..2^20-1")
        st = "_" if state is None else self._dst(ins, state, "b64")
        t = self._src(ins, "txCount", tx, "u32")
        self._emit(
            f"mbarrier.arrive.expect_tx.shared::cta.b64 {st}, {self._bar_addr(ins, bar)}, {t}", pred, [T.HOPPER_ASYNC]
        )

    def mbarrier_try_wait_parity(self, p, bar, parity, pred=None) -> None:
        """``mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity``: p = the phase of parity
        ``parity`` (0/1) has completed (may suspend the thread a while before answering false)."""
        ins = "mbarrier.try_wait.parity"
        d = self._dst(ins, p, "pred")
        q = self._src(ins, "phaseParity", parity, "u32")
        self._emit(
            f"mbarrier.try_wait.parity.shared::cta.b64 {d}, {self._bar_addr(ins, bar)}, {q}",
            pred,
            [T.MBARRIER_TRY_WAIT],
        )

    def fence_mbarrier_init(self) -> None:
        """``fence.mbarrier_init.release.cluster``: make mbarrier.init visible to the async proxy."""
        self._emit("fence.mbarrier_init.release.cluster", None, [T.HOPPER_ASYNC])

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta``: order generic-proxy shared writes before async-proxy reads."""
        self._emit("fence.proxy.async.shared::cta", None, [T.HOPPER_ASYNC])

    def cp_async_bulk_tensor(self, dst, tmap, coords, bar, pred=None) -> None:
        """``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [dst], [tmap, {c0, ..}], [bar]``: one TMA box load; ``tmap`` is a .u64 register holding the
        tensor map's generic address (:meth:`param_address`), ``coords`` .s32 registers/ints,
        innermost first."""
        ins = "cp.async.bulk.tensor"
        coords = _as_list(coords)
        if not 1 <= len(coords) <= 5:
            _fail(ins, f"needs 1-5 coordinates, got {len(coords)}")
        cs = ", ".join(self._src(ins, f"c{i}", c, "s32") for i, c in enumerate(coords))
        tm = self._reg(ins, "tensorMap", tmap, "u64")
        self._emit(
            f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            f"{self._address(ins, dst, 'shared')}, [{tm}, {{{cs}}}], {self._bar_addr(ins, bar)}",
            pred,
            [T.HOPPER_ASYNC],
        )

    def wgmma_fence(self) -> None:
        """``wgmma.fence.sync.aligned`` (before the first wgmma and after touching its registers)."""
        self._emit("wgmma.fence.sync.aligned", None, [T.WGMMA])

    def wgmma_commit(self) -> None:
        """``wgmma.commit_group.sync.aligned``: the pending wgmma operations form one group."""
        self._emit("wgmma.commit_group.sync.aligned", None, [T.WGMMA])

    def wgmma_wait(self, n: int = 0) -> None:
        """``wgmma.wait_group.sync.aligned n``: wait until at most ``n`` groups are pending."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 7:
            _fail("wgmma.wait_group", f"N must be an int in 0..7, got {n!r}")
        self._emit(f"wgmma.wait_group.sync.aligned {n}", None, [T.WGMMA])

    def wgmma(
        self,
        shape: str,
        dtype: str,
        d,
        a_desc,
        b_desc,
        scale_d,
        trans_a: int = 0,
        trans_b: int = 0,
        scale_a: int = 1,
        scale_b: int = 1,
    ) -> None:
        """``wgmma.mma_async.sync.aligned.shape.f32.dtype.dtype {d}, a-desc, b-desc, scale-d, ...``.

        A (64 x K) and B (K x N) from shared memory through 64-bit descriptors (.b64 registers);
        ``d``: N/2 .f32 accumulators; ``scale_d``: a .pred (false: D = A*B) ; ``trans_a``/``trans_b``:
        1 for MN-major operands (f16/bf16 only)."""
        from .wgmma import check_shape

        ins = f"wgmma.mma_async.{shape}.{dtype}"
        try:
            _, n, _ = check_shape(shape, dtype)
        except ValueError as e:
            _fail(ins, str(e))
        regs = _as_list(d)
        if len(regs) != n // 2:
            _fail(ins, f"operand d needs {n // 2} .f32 registers, got {len(regs)}")
        names = [self._reg(ins, f"d[{i}]", r, "f32") for i, r in enumerate(regs)]
        ad = self._reg(ins, "a-desc", a_desc, "b64")
        bd = self._reg(ins, "b-desc", b_desc, "b64")
        sd = self._pred_text(ins, scale_d)
        for what, v, ok in (
            ("imm-scale-a", scale_a, (1, -1)),
            ("imm-scale-b", scale_b, (1, -1)),
            ("imm-trans-a", trans_a, (0, 1)),
            ("imm-trans-b", trans_b, (0, 1)),
        ):
            if v not in ok:
                _fail(ins, f"{what} must be one of {ok}, got {v!r}")
        if dtype == "tf32" and (trans_a or trans_b):
            _fail(ins, "tf32 operands must be K-major (imm-trans 0)")
        tail = f"{scale_a}, {scale_b}" + ("" if dtype == "tf32" else f", {trans_a}, {trans_b}")
        self._emit(
            f"wgmma.mma_async.sync.aligned.{shape}.f32.{dtype}.{dtype} "
            f"{{{', '.join(names)}}}, {ad}, {bd}, {sd}, {tail}",
            None,
            [T.WGMMA],
        )

    def setmaxnreg(self, n: int, inc: bool) -> None:
        """``setmaxnreg.{inc,dec}.sync.aligned.u32 n`` (24..256, a multiple of 8), per warpgroup."""
        if isinstance(n, bool) or not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
            _fail("setmaxnreg", f"register count must be a multiple of 8 in 24..256, got {n!r}")
        self._emit(f"setmaxnreg.{'inc' if inc else 'dec'}.sync.aligned.u32 {n}", None, [T.WGMMA])

    # ------------------------------------------------------------------ rendering

    def required(self) -> Req:
        return _combine(self.reqs)

    def text(self) -> str:
        for lab in self._labels.values():
            if not lab.placed and any(lab.name in line for line in self.body):
                raise PtxTypeError(f"kernel {self.name!r}: label {lab.name} is branched to but never placed")
        out = [f".visible .entry {self.name}("]
        out.append(",\n".join(f"\t{p.decl()}" for p in self.params))
        out.append(")")
        out.extend(self.directives)
        out.append("{")
        for t in T.REG_TYPES:
            if self._counts.get(t):
                out.append(f"\t.reg .{T.DECL_TYPE.get(t, t)} %{_PREFIX[t]}<{self._counts[t]}>;")
        for r in self._named:
            out.append(f"\t.reg .{T.DECL_TYPE.get(r.type, r.type)} {r.name};")
        for s in self.shared_arrays:
            out.append(f"\t.shared .align {s.align} .{s.type} {s.name}[{s.count}];")
        out.append("")
        for line in self.body:
            out.append(line if line.endswith(":") else "\t" + line)
        out.append("}")
        return "\n".join(out) + "\n"


def _combine(reqs) -> Req:
    reqs = list(reqs) or [T.BASE]
    v = max(reqs, key=lambda r: r.version)
    s = max(reqs, key=lambda r: r.sm)
    why = v.why if v is s else f"{v.why}; {s.why}"
    return Req(v.version, s.sm, why)


# --------------------------------------------------------------------------- module


class Module:
    """A PTX module: ``.version``, ``.target``, ``.address_size 64`` and kernels.

    ``version`` ("7.0" or (7, 0)) and ``target`` ("sm_80") are inferred from the
    instructions when None; when given, using a feature that needs more raises
    :class:`PtxVersionError`.
    """

    def __init__(self, version=None, target: str | None = None):
        self._version = None if version is None else T.parse_version(version)
        self._target = target
        if target is not None:
            T.parse_target(target)
            tmin = T.target_min_version(target)
            if self._version is not None and self._version < tmin:
                raise PtxVersionError(
                    f".version {T.format_version(self._version)} does not know .target {target}"
                    f" (needs {T.format_version(tmin)})"
                )
        self.kernels: list[Kernel] = []
        self.extern_shared: list[Shared] = []

    def kernel(self, name: str, maxntid=None, reqntid=None, minnctapersm=None) -> Kernel:
        if not _IDENT.match(name):
            raise PtxTypeError(f".entry: name {name!r} is not a PTX identifier")
        if any(k.name == name for k in self.kernels):
            raise PtxTypeError(f".entry: kernel {name!r} already exists")
        k = Kernel(self, name, maxntid, reqntid, minnctapersm)
        self.kernels.append(k)
        return k

    def _check_req(self, req: Req) -> None:
        if self._version is not None and self._version < req.version:
            raise PtxVersionError(f".version {T.format_version(self._version)} is too low for {req}")
        if self._target is not None and T.parse_target(self._target)[0] < req.sm:
            raise PtxVersionError(f".target {self._target} is too low for {req}")
        if self._target is not None and req.suffix and T.parse_target(self._target) != (req.sm, req.suffix):
            raise PtxVersionError(f".target {self._target} lacks {req}: needs exactly sm_{req.sm}{req.suffix}")

    def required(self) -> Req:
        """The combined requirement of everything emitted so far."""
        return _combine(r for k in self.kernels for r in k.reqs)

    @property
    def target(self) -> str:
        if self._target is not None:
            return self._target
        req = self.required()
        specific = any(r.suffix for k in self.kernels for r in k.reqs)
        return f"sm_{req.sm}{'a' if specific else ''}"

    @property
    def version(self) -> str:
        if self._version is not None:
            return T.format_version(self._version)
        v = max(self.required().version, T.target_min_version(self.target))
        return T.format_version(v)

    def text(self) -> str:
        head = [
            "//",
            "// Generated by minijit ptx",
            "//",
            "",
            f".version {self.version}",
            f".target {self.target}",
            ".address_size 64",
            "",
        ]
        ext = [f".extern .shared .align {s.align} .{s.type} {s.name}[];" for s in self.extern_shared]
        if ext:
            head += [*ext, ""]
        return "\n".join(head) + "\n" + "\n".join(k.text() for k in self.kernels)
