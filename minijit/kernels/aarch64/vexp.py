"""AArch64 ``exp``, NEON and SVE: an in-register primitive for fused kernels (`emit_exp`) and a
standalone kernel (`generate`).

``emit_exp(a, vt, x, scratch, consts)`` emits ``x = exp(x)`` for one vector register (or several,
interleaved instruction by instruction) of ``vt`` (a `VTarget`: dtype fp32/fp64, isa neon/sve and
the SVE vector length), with `SCRATCH` (3) scratch registers per register and the constants of an
`ExpConsts` held in registers. ``generate(dtype, isa, sve_vl)`` is the kernel
``void(const T* x, T* y, int64_t n)``: ``y[i] = exp(x[i])`` for ``i < n`` (n at run time).

Algorithm: the x86-64 primitive's (`minijit.kernels.x86_64.vexp`, whose coefficient, reduction
and clamp tables it uses), with the same operations in the same order, so that both ISA
families give the same bits for the same input:

1. clamp ``x = min(max(x, LO), HI)`` (``fmax``/``fmin`` return NaN when either input is NaN);
2. ``n = round(x log2e)`` by the shifter ``S = 1.5 * 2^p`` (``t = S + x * log2e``, ``n = t - S``),
   ``r = x - n ln2_hi - n ln2_lo`` (Cody-Waite, both FMAs);
3. ``p = 1 + r (1 + r (c2 + ... + cd r))`` (Horner, one FMA per coefficient; the minimax
   polynomial of the relative error on [-0.35, 0.35]: fp32 degree 6, fp64 degree 11);
4. ``2^n`` in two exact factors: ``n_a = floor(n / 2)`` as ``t_a = (n/2 - 1/4) + (S + bias)``
   (never a tie; ``bias`` = 127 / 1023 is the exponent bias) whose low bits are ``n_a + bias``;
   one integer shift ``shl``/``lsl`` by the mantissa width turns ``t_a`` into the bits of
   ``2^n_a`` (the shifter's own bits leave past the top); ``d = n - 2 n_a`` in {0, 1} (two
   exact subtractions), ``p = p + p d`` exactly, ``y = (p 2^n_a) 2^n_a``: one rounding, gradual
   underflow to subnormal results, overflow to +inf. At the clamp LO, ``n_a + bias = 0`` and
   ``2^n_a`` comes out as +0, so -inf and every ``x <= LO`` give +0.

Error bound: as the x86-64 primitive (same operations): at most 1 ulp everywhere, subnormal
results included (tests/minijit/kernels/test_aarch64_vexp.py measures it in the emulator).
Special cases: ``exp(-inf) = +0``, ``exp(+inf) = +inf`` and +inf past the overflow threshold,
``exp(+-0) = 1``, NaN in -> NaN out.

Constants: `ExpConsts` lays the table out in 16-byte quads, appended after the code (``.inst``
words) and loaded once by `ExpConsts.setup` (``ldr q`` / ``ld1rqw``/``ld1rqd``, which repeats the
quad in every 128-bit segment of an SVE vector). Multiplicands (log2e, ln2_hi, ln2_lo, 1/2) are
used as indexed elements (``fmla vd, vn, vm.s[i]``; on SVE the indexed operand must be in z0..z7
for fp32, z0..z15 for fp64: the first quads); the Horner and shifter addends are copied out of
their lanes by ``dup`` (one instruction, as the ``mov`` a destructive FMA needs anyway); the
clamp bounds and the two shifters are whole-vector quads. fp32 uses 7 registers, fp64 12.

Use in a fused kernel::

    consts = ExpConsts.new(a, vt, regs=[0, 1, 2, 3, 4, 5, 6])
    consts.setup(a, x16)                             # once, before the loops (x16 clobbered)
    ...
    emit_exp(a, vt, [8, 9], [10, 11, 12, 13, 14, 15], consts)   # v8, v9 = exp(v8, v9)
    ...
    consts.emit_data(a)                              # the table, after the code (after ret)

Registers are given by number (``v<n>`` / ``z<n>``); on SVE p0 must be all-true for the element
size (``ptrue p0.s`` / ``p0.d``). ``emit_exp`` writes only its registers and their scratch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from asm.aarch64 import Assembler, Label, P, V, X, Z, mem, sp
from asm.aarch64.registers import VecReg, VElem, XReg, ZElem, ZVec
from minijit.kernels.aarch64.common import DType, dtype_info, epilogue, load_kernel, prologue
from minijit.kernels.exp import CLAMP, COEFFICIENTS, REDUCTION

__all__ = ["SCRATCH", "VTarget", "ExpConsts", "constants", "emit_exp", "generate", "program", "signature"]

#: scratch vector registers `emit_exp` needs per register
SCRATCH = 3
ISAS = ("neon", "sve")
#: the SVE vector lengths (bits) a kernel may be built for
SVE_VLS = tuple(range(128, 2049, 128))


@dataclass(frozen=True)
class VTarget:
    """One vector target: ``dtype`` "fp32"/"fp64", ``isa`` "neon"/"sve" and ``vl`` the vector
    length in bits (128 for NEON; the SVE length the code is built for). The methods emit one
    vector operation on registers given by number, the same call for both ISAs (SVE forms are
    predicated on p0, all-true)."""

    dtype: str
    isa: str
    vl: int = 128

    def __post_init__(self) -> None:
        dtype_info(self.dtype)
        if self.isa not in ISAS:
            raise ValueError(f"isa must be one of {ISAS}, got {self.isa!r}")
        allowed = (128,) if self.isa == "neon" else SVE_VLS
        if self.vl not in allowed:
            raise ValueError(
                f"vl must be {'128' if self.isa == 'neon' else 'a multiple of 128 in 128..2048'} bits"
                f" for {self.isa}, got {self.vl!r}"
            )

    @property
    def t(self) -> DType:
        return dtype_info(self.dtype)

    @property
    def es(self) -> int:
        """Bytes per element."""
        return self.t.size

    @property
    def lanes(self) -> int:
        """Elements per vector."""
        return self.vl // 8 // self.es

    @property
    def vbytes(self) -> int:
        return self.vl // 8

    @property
    def scalable(self) -> bool:
        return self.isa == "sve"

    # -- operands --------------------------------------------------------------------------
    def r(self, n: int) -> VecReg | ZVec:
        """Register ``n`` as a whole vector of elements."""
        return self.t.z(n) if self.scalable else self.t.vec(n)

    def e(self, n: int, lane: int) -> VElem | ZElem:
        """Element ``lane`` of register ``n`` (of each 128-bit segment, on SVE)."""
        return self.t.z(n)[lane] if self.scalable else VElem(n, self.t.es, lane)

    def scalar(self, n: int) -> Any:
        """The scalar view ``s<n>`` / ``d<n>`` (loads and stores of one element)."""
        return self.t.scalar(n)

    # -- arithmetic --------------------------------------------------------------------------
    def add(self, a: Assembler, d: int, n: int, m: int) -> None:
        a.fadd(self.r(d), self.r(n), self.r(m))

    def sub(self, a: Assembler, d: int, n: int, m: int) -> None:
        a.fsub(self.r(d), self.r(n), self.r(m))

    def mul(self, a: Assembler, d: int, n: int, m: int) -> None:
        a.fmul(self.r(d), self.r(n), self.r(m))

    def div(self, a: Assembler, d: int, m: int) -> None:
        """d = d / m."""
        if self.scalable:
            a.fdiv(self.r(d), P[0].m, self.r(d), self.r(m))
        else:
            a.fdiv(self.r(d), self.r(d), self.r(m))

    def max(self, a: Assembler, d: int, m: int) -> None:
        """d = max(d, m) (NaN when either is)."""
        if self.scalable:
            a.fmax(self.r(d), P[0].m, self.r(d), self.r(m))
        else:
            a.fmax(self.r(d), self.r(d), self.r(m))

    def min(self, a: Assembler, d: int, m: int) -> None:
        """d = min(d, m) (NaN when either is)."""
        if self.scalable:
            a.fmin(self.r(d), P[0].m, self.r(d), self.r(m))
        else:
            a.fmin(self.r(d), self.r(d), self.r(m))

    def fmla(self, a: Assembler, d: int, n: int, m: int | tuple[int, int]) -> None:
        """d += n * m (m a register, or (register, lane): an indexed element)."""
        if isinstance(m, tuple):
            a.fmla(self.r(d), self.r(n), self.e(*m))
        elif self.scalable:
            a.fmla(self.r(d), P[0].m, self.r(n), self.r(m))
        else:
            a.fmla(self.r(d), self.r(n), self.r(m))

    def fmls(self, a: Assembler, d: int, n: int, m: tuple[int, int]) -> None:
        """d -= n * m[lane] (an indexed element)."""
        a.fmls(self.r(d), self.r(n), self.e(*m))

    def dup(self, a: Assembler, d: int, m: tuple[int, int]) -> None:
        """Every lane of d = element (register, lane)."""
        a.dup(self.r(d), self.e(*m))

    def mov(self, a: Assembler, d: int, n: int) -> None:
        if self.scalable:
            a.mov(Z[d].d, Z[n].d)
        else:
            a.mov(V[d].b16, V[n].b16)

    def shl(self, a: Assembler, d: int, n: int, shift: int) -> None:
        """Each element of n shifted left by ``shift`` bits as an integer."""
        a.lsl(self.r(d), self.r(n), shift) if self.scalable else a.shl(self.r(d), self.r(n), shift)

    def zero(self, a: Assembler, d: int) -> None:
        if self.scalable:
            a.dup(Z[d].d, 0)
        else:
            a.movi(V[d].d2, 0)

    # -- memory ------------------------------------------------------------------------------
    def ld(self, a: Assembler, d: int, base: XReg, off: int, tmp: XReg) -> None:
        """Load the vector at ``base + off`` bytes (``tmp`` clobbered when the offset does not fit)."""
        self._ldst(a, d, base, off, tmp, load=True)

    def st(self, a: Assembler, d: int, base: XReg, off: int, tmp: XReg) -> None:
        """Store the vector at ``base + off`` bytes."""
        self._ldst(a, d, base, off, tmp, load=False)

    def _ldst(self, a: Assembler, d: int, base: XReg, off: int, tmp: XReg, load: bool) -> None:
        if self.scalable:
            k, rest = divmod(off, self.vbytes)
            if rest or not -8 <= k <= 7:
                add_offset(a, tmp, base, off)
                base, k = tmp, 0
            if load:
                self.t.ld1(a, self.r(d), P[0].z, mem(base, vl=k))
            else:
                self.t.st1(a, self.r(d), P[0], mem(base, vl=k))
            return
        if off % 16 or not 0 <= off < 65536:
            add_offset(a, tmp, base, off)
            base, off = tmp, 0
        reg = V[d].Q
        (a.ldr if load else a.str)(reg, mem(base, off))

    def ldq(self, a: Assembler, d: int, base: XReg, off: int, tmp: XReg) -> None:
        """Load the quad at ``base + off`` (NEON: the register; SVE: repeated in every segment)."""
        if not self.scalable:
            self.ld(a, d, base, off, tmp)
            return
        if off % 16 or not -128 <= off <= 112:
            add_offset(a, tmp, base, off)
            base, off = tmp, 0
        getattr(a, "ld1rq" + self.t.suffix)(self.r(d), P[0].z, mem(base, off))


def add_offset(a: Assembler, rd: XReg, rn: XReg, off: int) -> None:
    """rd = rn + off (any int; x17 is not used)."""
    if 0 <= off < 4096:
        a.add(rd, rn, off)
    elif -4096 < off < 0:
        a.sub(rd, rn, -off)
    else:
        a.mov(rd, off)
        a.add(rd, rn, rd)


def signature(ctype: str) -> str:
    return f"void(const {ctype}* x, {ctype}* y, int64_t n)"


# -- constants ----------------------------------------------------------------------------------
#: constants used as indexed multiplicands (first: on SVE their register must be low)
MULTIPLICANDS = ("log2e", "ln2_hi", "ln2_lo", "half")
#: whole-vector constants, one quad each
WHOLE = ("lo", "hi", "shift", "shift_bias")


def constants(dtype: str) -> dict[str, float]:
    """The values `emit_exp` uses for ``dtype``: name -> value (the Horner coefficients ``c<k>``
    from the highest degree down)."""
    if dtype not in COEFFICIENTS:
        raise ValueError(f"dtype must be 'fp32' or 'fp64', got {dtype!r}")
    p, bias = (23, 127) if dtype == "fp32" else (52, 1023)
    lo, hi = CLAMP[dtype]
    values = {name: float.fromhex(REDUCTION[dtype][name]) for name in ("log2e", "ln2_hi", "ln2_lo")}
    values["half"] = 0.5
    values |= {"minus_quarter": -0.25, "one": 1.0}
    coefficients = [float.fromhex(c) for c in COEFFICIENTS[dtype]]
    for k in range(len(coefficients) + 1, 1, -1):
        values[f"c{k}"] = coefficients[k - 2]
    values |= {"lo": lo, "hi": hi, "shift": 1.5 * 2.0**p, "shift_bias": 1.5 * 2.0**p + bias}
    return values


def _layout(dtype: str) -> tuple[dict[str, tuple[int, int]], int]:
    """name -> (quad, lane) of every constant, and the number of quads: the lane constants packed
    (multiplicands first), then one quad per whole-vector constant."""
    lanes = 16 // dtype_info(dtype).size
    names = [n for n in constants(dtype) if n not in WHOLE]
    where = {n: divmod(i, lanes) for i, n in enumerate(names)}
    first = -(-len(names) // lanes)
    where |= {n: (first + i, 0) for i, n in enumerate(WHOLE)}
    return where, first + len(WHOLE)


def quads(dtype: str) -> int:
    """Registers an `ExpConsts` of ``dtype`` holds (7 for fp32, 12 for fp64)."""
    return _layout(dtype)[1]


@dataclass
class ExpConsts:
    """The constants of `emit_exp` for one `VTarget` in registers ``regs`` (numbers, `quads`
    of them, in table order): the table at ``label`` (appended by `emit_data`), loaded by `setup`.
    On SVE the multiplicand quads (the first one for fp32, two for fp64) must be z0..z7 (fp32) /
    z0..z15 (fp64): the indexed FMA's limits."""

    vt: VTarget
    label: Label
    regs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.where, count = _layout(self.vt.dtype)
        self.values = constants(self.vt.dtype)
        if len(self.regs) != count or len(set(self.regs)) != count or not all(0 <= r < 32 for r in self.regs):
            raise ValueError(f"regs: need {count} distinct register numbers 0..31 for {self.vt.dtype}, got {self.regs}")
        limit = 7 if self.vt.dtype == "fp32" else 15
        mult = {self.where[n][0] for n in MULTIPLICANDS}
        if self.vt.scalable and any(self.regs[q] > limit for q in mult):
            raise ValueError(
                f"regs: the multiplicand quads {sorted(mult)} must be z0..z{limit} on SVE, got {self.regs}"
            )
        self.count = count

    @staticmethod
    def new(a: Assembler, vt: VTarget, regs: Sequence[int]) -> ExpConsts:
        return ExpConsts(vt, a.new_label("exp_consts"), list(regs))

    def lane(self, name: str) -> tuple[int, int]:
        """(register, lane) of a packed constant."""
        q, lane = self.where[name]
        return self.regs[q], lane

    def whole(self, name: str) -> int:
        """The register of a whole-vector constant."""
        return self.regs[self.where[name][0]]

    def setup(self, a: Assembler, base: XReg) -> None:
        """Load the table into the registers (``base`` clobbered)."""
        a.adr(base, self.label)
        origin = 0  # the byte offset of ``base`` into the table
        for q, r in enumerate(self.regs):
            off = 16 * q - origin
            if self.vt.scalable and off > 112:  # past ld1rq's immediate: move the base on
                a.add(base, base, off)
                origin, off = 16 * q, 0
            self.vt.ldq(a, r, base, off, base)

    def data(self) -> bytes:
        """The table's bytes."""
        fmt = "<f" if self.vt.es == 4 else "<d"
        lanes = 16 // self.vt.es
        cells = [[0.0] * lanes for _ in range(self.count)]
        for name, (q, lane) in self.where.items():
            if name in WHOLE:
                cells[q] = [self.values[name]] * lanes
            else:
                cells[q][lane] = self.values[name]
        return b"".join(struct.pack(fmt, v) for quad in cells for v in quad)

    def emit_data(self, a: Assembler) -> None:
        """Append the table (16-byte aligned, after the code)."""
        emit_words(a, self.label, self.data())


def emit_words(a: Assembler, label: Label, data: bytes) -> None:
    """Bind ``label`` at the next 16-byte boundary (``nop`` padding) and emit ``data`` as words."""
    while a.pos % 16:
        a.nop()
    a.bind(label)
    for i in range(0, len(data), 4):
        a.inst(int.from_bytes(data[i : i + 4], "little"))


def emit_exp(a: Assembler, vt: VTarget, x: int | Sequence[int], scratch: Sequence[int], consts: ExpConsts) -> None:
    """Emit ``x = exp(x)`` in place (see the module docstring). ``x``: one register number or
    several (their instructions interleaved one by one); ``scratch``: `SCRATCH` registers per
    register of ``x`` (register i uses ``scratch[3i:3i+3]``), clobbered. All distinct, none of
    the constants' registers."""
    xs = [x] if isinstance(x, int) else list(x)
    if consts.vt != vt:
        raise ValueError(f"consts are for {consts.vt}, not {vt}")
    if len(scratch) != SCRATCH * len(xs):
        raise ValueError(f"scratch: need {SCRATCH} registers per register ({SCRATCH * len(xs)}), got {len(scratch)}")
    regs = [*xs, *scratch]
    if any(not isinstance(r, int) or not 0 <= r < 32 for r in regs):
        raise ValueError(f"registers must be numbers 0..31, got {regs}")
    if len(set(regs) | set(consts.regs)) != len(regs) + len(consts.regs):
        raise ValueError("registers, scratch registers and the constants' registers must all be distinct")
    steps = [_steps(a, vt, r, scratch[SCRATCH * i : SCRATCH * i + SCRATCH], consts) for i, r in enumerate(xs)]
    while steps:
        for g in list(steps):
            if next(g, StopIteration) is StopIteration:
                steps.remove(g)


def _steps(a: Assembler, vt: VTarget, x: int, scratch: Sequence[int], c: ExpConsts) -> Iterator[None]:
    """The instructions of one ``x = exp(x)``, yielding after each."""
    s0, s1, s2 = scratch
    # 1. clamp, keeping NaN
    vt.max(a, x, c.whole("lo"))
    yield
    vt.min(a, x, c.whole("hi"))
    yield
    # 2. n = round(x log2e) (s0), r = x - n ln2 (x)
    vt.mov(a, s0, c.whole("shift"))
    yield
    vt.fmla(a, s0, x, c.lane("log2e"))
    yield
    vt.sub(a, s0, s0, c.whole("shift"))
    yield
    vt.fmls(a, x, s0, c.lane("ln2_hi"))
    yield
    vt.fmls(a, x, s0, c.lane("ln2_lo"))
    yield
    # 3. p = 1 + r (1 + r (c2 + r (c3 + ...))): each step q = c + q r into the other register
    names = [n for n in c.values if n[0] == "c" and n[1:].isdigit()] + ["one", "one"]
    p, free = s1, s2
    vt.dup(a, p, c.lane(names[0]))
    yield
    for name in names[1:]:
        vt.dup(a, free, c.lane(name))
        yield
        vt.fmla(a, free, p, x)
        yield
        p, free = free, p
    # 4a. t_a = (n/2 - 1/4) + (S + bias): its low bits are floor(n/2) + bias (free)
    vt.dup(a, free, c.lane("minus_quarter"))
    yield
    vt.fmla(a, free, s0, c.lane("half"))
    yield
    vt.add(a, free, free, c.whole("shift_bias"))
    yield
    # 4b. n_a = t_a - (S + bias) (x); d = n - 2 n_a in {0, 1} (s0); p = p + p d, exact
    vt.sub(a, x, free, c.whole("shift_bias"))
    yield
    vt.sub(a, s0, s0, x)
    yield
    vt.sub(a, s0, s0, x)
    yield
    vt.fmla(a, p, p, s0)
    yield
    # 4c. 2^n_a: the exponent field from t_a's low bits (free)
    vt.shl(a, free, free, 23 if vt.dtype == "fp32" else 52)
    yield
    # 4d. y = (p 2^n_a) 2^n_a: exact, then one rounding
    vt.mul(a, x, p, free)
    yield
    vt.mul(a, x, x, free)
    yield


# -- the standalone kernel -------------------------------------------------------------------
XP, YP, N, I, TMP = X[0], X[1], X[2], X[3], X[16]


def program(dtype: str = "fp32", isa: str = "neon", sve_vl: int = 128) -> Assembler:
    """The kernel ``void(const T* x, T* y, int64_t n)``: ``y[i] = exp(x[i])`` for ``0 <= i < n``
    (nothing for ``n <= 0``); ``x`` and ``y`` may be the same array. NEON: two vectors a loop trip,
    then one, then the last ``n % lanes`` elements through a zeroed stack vector; SVE: two
    vectors a trip under ``whilelt`` predicates (any vector length: ``sve_vl`` only names it)."""
    vt = VTarget(dtype, isa, sve_vl if isa == "sve" else 128)
    t = vt.t
    a = Assembler(name=f"vexp_{dtype}_{isa}")
    nq = quads(dtype)
    consts = ExpConsts.new(a, vt, list(range(nq)))
    xs = [nq, nq + 1]
    scratch = list(range(nq + 2, nq + 2 + 2 * SCRATCH))
    frame = prologue(a, (), range(32), writeback=True)  # d8..d15
    done = a.new_label("done")
    a.cmp(N, 0)
    a.b_cond("le", done)
    if vt.scalable:
        a.ptrue(getattr(P[0], t.es))
    consts.setup(a, TMP)
    if vt.scalable:
        p1, p2 = getattr(P[1], t.es), getattr(P[2], t.es)
        a.mov(I, 0)
        top = a.label("two")
        a.whilelt(p1, I, N)
        a.b_cond("none", done)
        t.inc(a, I)
        a.whilelt(p2, I, N)
        t.inc(a, I)
        for v in range(2):
            t.ld1(a, t.z(xs[v]), P[1 + v].z, mem(XP, vl=v))
        emit_exp(a, vt, xs, scratch, consts)
        for v, pred in enumerate((P[1], P[2])):
            t.st1(a, t.z(xs[v]), pred, mem(YP, vl=v))
        a.addvl(XP, XP, 2)
        a.addvl(YP, YP, 2)
        a.b(top)
    else:
        lanes = vt.lanes
        two, one, tail = a.new_label("two"), a.new_label("one"), a.new_label("tail")
        a.bind(two)
        a.cmp(N, 2 * lanes)
        a.b_cond("lt", one)
        a.ldp(V[xs[0]].Q, V[xs[1]].Q, mem(XP))
        emit_exp(a, vt, xs, scratch, consts)
        a.stp(V[xs[0]].Q, V[xs[1]].Q, mem(YP))
        a.add(XP, XP, 32)
        a.add(YP, YP, 32)
        a.sub(N, N, 2 * lanes)
        a.b(two)
        a.bind(one)
        a.cmp(N, lanes)
        a.b_cond("lt", tail)
        a.ldr(V[xs[0]].Q, mem(XP))
        emit_exp(a, vt, xs[0], scratch[:SCRATCH], consts)
        a.str(V[xs[0]].Q, mem(YP))
        a.add(XP, XP, 16)
        a.add(YP, YP, 16)
        a.sub(N, N, lanes)
        a.bind(tail)  # 0 <= N < lanes: through a zeroed vector on the stack
        a.cbz(N, done)
        a.sub(sp, sp, 16)
        a.movi(V[xs[0]].d2, 0)
        a.str(V[xs[0]].Q, mem(sp))
        a.mov(I, 0)
        copy_in = a.label("copy_in")
        a.ldr(t.scalar(xs[1]), mem(XP, I, "lsl", t.shift))
        a.str(t.scalar(xs[1]), mem(sp, I, "lsl", t.shift))
        a.add(I, I, 1)
        a.cmp(I, N)
        a.b_cond("lt", copy_in)
        a.ldr(V[xs[0]].Q, mem(sp))
        emit_exp(a, vt, xs[0], scratch[:SCRATCH], consts)
        a.str(V[xs[0]].Q, mem(sp))
        a.mov(I, 0)
        copy_out = a.label("copy_out")
        a.ldr(t.scalar(xs[1]), mem(sp, I, "lsl", t.shift))
        a.str(t.scalar(xs[1]), mem(YP, I, "lsl", t.shift))
        a.add(I, I, 1)
        a.cmp(I, N)
        a.b_cond("lt", copy_out)
        a.add(sp, sp, 16)
    a.bind(done)
    epilogue(a, frame)
    consts.emit_data(a)
    return a


def generate(dtype: str = "fp32", isa: str = "neon", sve_vl: int = 128) -> Any:
    """The loaded kernel of `program` (native on AArch64, else emulated at ``sve_vl`` bits)."""
    a = program(dtype, isa, sve_vl)
    return load_kernel(a, signature(dtype_info(dtype).ctype), a.name, sve_vl)
