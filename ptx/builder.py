"""PTX module builder: kernels, typed virtual registers, validated instructions.

Every instruction method checks its operands (register kinds, types, counts,
immediate ranges, modifiers) and raises :class:`ptx.PtxTypeError` naming the
instruction and the operand *before* anything is appended to the kernel body.
Each instruction also records the PTX ISA version and sm target it needs;
:meth:`Module.text` emits the lowest ``.version``/``.target`` that covers them
unless the caller fixed them (then a feature that needs more raises
:class:`ptx.PtxVersionError` at the point where it is used).

The operands live in :mod:`ptx.builder_operands`; :class:`Kernel` gathers its instruction
emitters by family from :mod:`ptx.builder_memory`, :mod:`ptx.builder_arith` and
:mod:`ptx.builder_tensor`.

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

from collections.abc import Sequence

from . import types as T
from .builder_arith import _Arithmetic
from .builder_memory import _DataMovement
from .builder_operands import (  # noqa: F401
    _AUTO_NAME,
    _CMP_FLOAT,
    _CMP_INT,
    _CMP_UNSIGNED,
    _FRND,
    _IDENT,
    _IRND,
    _PREFIX,
    _SPACES,
    CVTA_PARAM,
    Addr,
    Label,
    NotPred,
    Param,
    Reg,
    Shared,
    Special,
    _as_list,
    _fail,
    _mem_type,
    _Vec3,
    addr,
    sreg,
)
from .builder_tensor import _TensorCores
from .errors import PtxTypeError, PtxVersionError
from .types import Req

# --------------------------------------------------------------------------- kernel


class Kernel(_DataMovement, _Arithmetic, _TensorCores):
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
