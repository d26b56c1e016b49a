"""Instruction emitters for data movement: mov, ld, st, cvta and the cp.async copies."""

from __future__ import annotations

from . import types as T
from .builder_operands import _SPACES, CVTA_PARAM, Addr, Param, Reg, Shared, _as_list, _fail, _mem_type


class _DataMovement:
    """mov, ld/st, cvta and cp.async (a part of :class:`ptx.builder.Kernel`)."""

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
