"""Instruction emitters for arithmetic, logic, shifts, comparison, selection and conversion."""

from __future__ import annotations

from . import types as T
from .builder_operands import _CMP_FLOAT, _CMP_INT, _CMP_UNSIGNED, _FRND, _IRND, Reg, _fail
from .types import Req


class _Arithmetic:
    """Integer and float arithmetic, logic, setp/selp and cvt (a part of :class:`ptx.builder.Kernel`)."""

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
