"""x86-64 ``exp``: an in-register primitive for fused kernels (`emit_exp`) and a standalone kernel.

``emit_exp(a, t, x, scratch, consts)`` emits ``x = exp(x)`` for one vector register (or several,
interleaved instruction by instruction) of ``t.dtype`` fp32/fp64 on ``t.isa`` avx2/avx512, with
`SCRATCH` (3) scratch vector registers per register and the constants of an `ExpConsts`: a table
appended after the code (RIP-relative memory operands, ``{1toN}`` broadcasts on AVX-512) of which
any subset may be pinned in registers. ``generate(dtype, isa)`` is the kernel
``void(const T* x, T* y, int64_t n)``: ``y[i] = exp(x[i])`` for ``i < n`` (n at run time, a masked
tail), four registers per loop trip.

Algorithm (for MXCSR's default round to nearest; no FP state is changed; with FTZ set subnormal
results flush to +0, with DAZ subnormal inputs read as 0 and give 1 as they do anyway):

1. clamp: ``x = min(max(x, LO), HI)`` with ``LO``/``HI`` past the underflow/overflow thresholds
   (fp32 -176/90, fp64 -1418/710; see `CLAMP`), register forms that keep NaN (``vmax x, LO, x``:
   the second source comes back when one is NaN);
2. range reduction: ``n = round(x * log2(e))`` by the shifter ``S = 1.5 * 2^p`` (``t = fma(x,
   log2e, S)``, ``n = t - S``), then Cody-Waite with FMA: ``r = fma(-n, ln2_hi, x)`` is exact
   (``ln2_hi`` = ln 2 rounded to the dtype: the exact difference is a multiple of ``ulp(ln2_hi)``
   below 1/2), ``r = fma(-n, ln2_lo, r)``; ``|r| <= ln2/2`` up to the rounding of ``x*log2e``;
3. ``p = 1 + r + c2 r^2 + ... + cd r^d`` (Horner, FMA), a minimax polynomial of the relative
   error on [-0.35, 0.35] with the first two coefficients fixed at 1 (so ``exp(+-0) = 1``
   exactly): fp32 degree 6 (approximation error 3.3e-9 = 2^-28.2), fp64 degree 11 (4.1e-18 =
   2^-57.8). The coefficients (`minijit.kernels.exp`) come from `derive_coefficients` (a Remez exchange in mpmath,
   ``python -m minijit.kernels.exp``), rounded to the dtype;
4. scaling by ``2^n`` in two exact factors: ``n_a = floor(n/2)`` (``n/2 - 1/4`` rounded by the
   shifter), ``d = n - 2 n_a`` in {0, 1}, ``y = ((p * (1 + d)) * 2^n_a) * 2^n_a``. Every factor
   is a normal number (``2^n_a`` is +0 at the clamp LO, on purpose: see `CLAMP`), so the first
   products are exact and the last one rounds once: results in the subnormal range are the
   correctly rounded ``p * 2^n`` (gradual underflow, no flush), results past the largest finite
   value are +inf.

``2^n_a`` is built in the exponent field by one integer shift: the shifter of step 4a is
``S_a = 1.5*2^p + bias`` (bias 127 fp32, 1023 fp64; an integer in [2^p, 2^(p+1)), so ``t_a =
n/2 - 1/4 + S_a`` rounds exactly as with ``1.5*2^p``: ``t_a - S_a = n_a`` as before) and ``t_a``
holds the bits ``bits(1.5*2^p) + bias + n_a``; ``vpslld t_a, 23`` (fp32) / ``vpsllq t_a, 52``
(fp64) drops ``bits(1.5*2^p) << p`` (its low 32 - p / 64 - p bits are 0) and leaves ``(bias +
n_a) << p``: ``2^n_a`` (+0 at the clamp LO, where ``bias + n_a = 0``). The build is exact, so the
results are those of the earlier floating-point-only builds (fp32: ``vunpck``/``vaddpd``/
``vshufps``, five instructions; fp64: ``vaddpd``/``vshufps``/``vxorps``/``vunpcklps``, four)
bit for bit.

Error bound: at most 1 ulp (faithful: the result is one of the two neighbours of exp(x), so its
bit pattern is at most 1 from the correctly rounded one), on the reduced range (|x| <= ln2/2,
where n = 0) and over the whole range alike, subnormal results included (ulp = the spacing of
the dtype at the exact result: the subnormal spacing below the smallest normal). Budget: 0.5
for the last rounding, <= 0.35 * 0.5 * (1 + small) for the rounding of Horner's inner sum (times
|r|), <= 0.18 for the rounding of r (an error of ulp(r)/2 <= 2^-(p+2) relative), 0.06 (fp32) /
0.04 (fp64) for the approximation: about 0.95. Measured by tests/minijit/kernels/test_x86_vexp.py
(AVX2, Zen 3): fp32 against float64 exp over 2^20 points (whole range [-104, 89], dense
around 0 and the thresholds): max 0.844 ulp (reduced range 0.701, subnormal results 0.820);
fp64 against mpmath at 30 digits, 2^18 points of its sweep over [-746, 710]: max 0.912 ulp
(reduced range 0.705, subnormal results 0.819); bit-pattern distance at most 1 everywhere; the
results are monotone on both sweeps. About 96% of the results are correctly rounded.

Special cases, exact: ``exp(-inf) = +0``, ``exp(x) = +0`` for ``x < ln(2^-150)`` (fp32) /
``ln(2^-1075)`` (fp64) (where the correctly rounded result is 0), ``exp(+inf) = +inf`` and +inf
past the overflow threshold (about 88.72 / 709.78), ``exp(+-0) = 1``, NaN in -> quiet NaN out.
Huge finite ``|x|`` clamps. Subnormal inputs give 1 (as does any ``|x|`` below half an ulp of 1).
Subnormal results cost more (an underflowing multiply: 1.3-1.9x the time on Zen 3); results
for ``x <= LO`` (-inf, masked scores such as -1e9) do not (see `CLAMP`).

Use in a fused kernel::

    consts = ExpConsts.new(a, t, pinned={"lo": zmm20, "hi": zmm21})  # pinning is optional
    consts.setup(a)                                  # pinned constants, once, before the loops
    ...
    emit_exp(a, t, [acc0, acc1], [s0, s1, s2, s3, s4, s5], consts)   # acc = exp(acc), in place
    ...
    a.ret()
    consts.emit_data(a)                              # the table, after the code

Registers: ``emit_exp`` writes only its registers, their scratch registers and nothing else (no
general-purpose registers, flags or opmasks); ``ExpConsts.setup`` writes the pinned registers.
The fp32 and fp64 forms need AVX2+FMA (VEX) or AVX-512F.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from asm.x86_64 import Assembler, Label, Mem, Vec, bcst, dword, ptr, qword, rip, ymmword
from asm.x86_64.registers import cl, eax, ecx, edx, k1, rax, rcx, rdi, rdx, rsi
from minijit.kernels.exp import CLAMP, COEFFICIENTS, REDUCTION, derive_coefficients
from minijit.kernels.x86_64.common import Target, build, emit_mask_table
from minijit.runtime.kernel import Kernel

__all__ = ["SCRATCH", "ExpConsts", "emit_exp", "generate", "derive_coefficients", "constants", "signature"]

#: scratch vector registers `emit_exp` needs per register
SCRATCH = 3
#: the exponent bias and the bits of the significand (the shift that puts an integer into the exponent field)
EXPONENT_BIAS, MANTISSA_BITS = {"fp32": 127, "fp64": 1023}, {"fp32": 23, "fp64": 52}
#: the clamp of the ``nonpositive`` form: the largest x where n = round(x log2e) is one below the
#: smallest normal exponent (-127 / -1023), so that 2^n's exponent field is 0 and the result +0
NONPOSITIVE_LO = {"fp32": -88.0, "fp64": -709.0}


def constants(dtype: str) -> dict[str, tuple[str, float | int]]:
    """The table of `emit_exp` for ``dtype``: name -> (element kind, value), in table order.

    Kinds: "f" an element of the dtype (a float)."""
    if dtype not in COEFFICIENTS:
        raise ValueError(f"dtype must be 'fp32' or 'fp64', got {dtype!r}")
    p = 23 if dtype == "fp32" else 52
    lo, hi = CLAMP[dtype]
    table: dict[str, tuple[str, float | int]] = {"lo": ("f", lo), "hi": ("f", hi)}
    table["log2e"] = ("f", float.fromhex(REDUCTION[dtype]["log2e"]))
    table["shift"] = ("f", 1.5 * 2.0**p)
    for name in ("ln2_hi", "ln2_lo"):
        table[name] = ("f", float.fromhex(REDUCTION[dtype][name]))
    coefficients = [float.fromhex(c) for c in COEFFICIENTS[dtype]]
    for k in range(len(coefficients) + 1, 1, -1):  # Horner order: c_d first
        table[f"c{k}"] = ("f", coefficients[k - 2])
    table |= {"one": ("f", 1.0), "half": ("f", 0.5), "minus_quarter": ("f", -0.25), "two": ("f", 2.0)}
    table["lo_np"] = ("f", NONPOSITIVE_LO[dtype])
    table["shift_a"] = ("f", 1.5 * 2.0**p + EXPONENT_BIAS[dtype])  # step 4a's shifter: bits(1.5 2^p) + bias + n_a
    return table


def _element(kind: str, value: float | int, dtype: str) -> bytes:
    return struct.pack("<d" if dtype == "fp64" else "<f", value)


@dataclass
class ExpConsts:
    """The constants of `emit_exp` for one Target: a table at ``label`` (appended after the code by
    `emit_data`) and the constants ``pinned`` in registers (name -> register; `setup` loads them).

    AVX2 table entries are whole 32-byte vectors (memory operands); AVX-512 entries are single
    elements in 8-byte slots, used as ``{1toN}`` broadcasts. Pinning saves a load per use: the
    constants ``emit_exp`` first copies into a scratch register are "lo", "hi", "shift",
    "minus_quarter" and the top coefficient (`first_loads`); any other name of `constants` may be
    pinned too. One ExpConsts serves every `emit_exp` of a kernel; call `emit_data` once."""

    t: Target
    label: Label
    pinned: dict[str, Vec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.table = constants(self.t.dtype)
        unknown = set(self.pinned) - set(self.table)
        if unknown:
            raise ValueError(f"pinned: unknown constants {sorted(unknown)}; names: {list(self.table)}")
        regs = list(self.pinned.values())
        _check_regs(self.t, regs, "pinned")
        self.slot = 32 if self.t.isa == "avx2" else 8
        self.offsets = {name: i * self.slot for i, name in enumerate(self.table)}

    @staticmethod
    def new(a: Assembler, t: Target, pinned: dict[str, Vec] | None = None) -> ExpConsts:
        return ExpConsts(t, a.new_label("exp_consts"), dict(pinned or {}))

    @property
    def first_loads(self) -> tuple[str, ...]:
        """The constants loaded into a scratch register before use when not pinned."""
        return ("lo", "hi", "shift", "minus_quarter", next(n for n in self.table if n.startswith("c")))

    def _addr(self, name: str):
        return rip + self.label + self.offsets[name]

    def operand(self, name: str) -> Vec | Mem:
        """The constant as a source operand: its register when pinned, else the table entry."""
        if name in self.pinned:
            return self.pinned[name]
        return ymmword(self._addr(name)) if self.t.isa == "avx2" else bcst(self._addr(name))

    def load(self, a: Assembler, dst: Vec, name: str) -> None:
        """``dst`` = the constant in every lane (a register copy when pinned)."""
        if name in self.pinned:
            getattr(a, self.t.v("vmovu"))(dst, self.pinned[name])
        else:
            self._load_entry(a, dst, name)

    def _load_entry(self, a: Assembler, dst: Vec, name: str) -> None:
        if self.t.isa == "avx2":
            a.vmovups(dst, ymmword(self._addr(name)))
        elif self.t.es == 8:
            a.vbroadcastsd(dst, qword(self._addr(name)))
        else:
            a.vbroadcastss(dst, dword(self._addr(name)))

    def setup(self, a: Assembler) -> None:
        """Load every pinned constant into its register (once, before the code that uses them)."""
        for name, reg in self.pinned.items():
            self._load_entry(a, reg, name)

    def emit_data(self, a: Assembler) -> None:
        """Append the table, 64-byte aligned (int3 padding), after the code."""
        pad = -a.pos % 64
        if pad:
            a.db(b"\xcc" * pad)
        a.bind(self.label)
        for kind, value in self.table.values():
            element = _element(kind, value, self.t.dtype)
            a.db(element * (self.slot // len(element)) if self.t.isa == "avx2" else element.ljust(self.slot, b"\0"))


def _check_regs(t: Target, regs: Sequence[object], what: str) -> None:
    allowed = t.vregs
    for r in regs:
        if not isinstance(r, Vec) or r not in allowed:
            width = "zmm0..zmm31" if t.isa == "avx512" else "ymm0..ymm15"
            raise ValueError(f"{what}: {r!r} is not a {width} register")


def emit_exp(
    a: Assembler,
    t: Target,
    x: Vec | Sequence[Vec],
    scratch: Sequence[Vec],
    consts: ExpConsts,
    nonpositive: bool = False,
) -> None:
    """Emit ``x = exp(x)`` in place (see the module docstring for the method and the error bound).

    ``nonpositive``: the shorter form for ``x <= 0`` (the softmax's shifted scores; NaN and -inf
    too): no upper clamp and ``y = p * 2^n`` in one product (14 instructions against 19).
    Its results are the general form's bit for bit wherever ``n >= -126`` (fp32; -1022 fp64), that
    is wherever exp(x) is at least about 2^-126.5; below (x < about -87.68 / -708.7: subnormal
    results) they are +0 or within 2^-126 (2^-1022) of exp(x) in absolute terms (no gradual
    underflow). ``exp(-inf) = +0``, NaN in -> NaN out; for ``x > 0`` the results are not defined.

    ``x``: one register or several (their instructions are interleaved one by one, for
    instruction-level parallelism); ``scratch``: `SCRATCH` registers per register of ``x``
    (register ``i`` uses ``scratch[3i:3i+3]``), clobbered; ``consts``: the `ExpConsts` of ``t``.
    Registers must be distinct, of ``t``'s width, and not pinned constants."""
    xs = [x] if isinstance(x, Vec) else list(x)
    if consts.t != t:
        raise ValueError(f"consts are for {consts.t}, not {t}")
    if len(scratch) != SCRATCH * len(xs):
        raise ValueError(f"scratch: need {SCRATCH} registers per register ({SCRATCH * len(xs)}), got {len(scratch)}")
    regs = [*xs, *scratch]
    _check_regs(t, regs, "registers")
    if len(set(regs) | set(consts.pinned.values())) != len(regs) + len(consts.pinned):
        raise ValueError("registers, scratch registers and pinned constants must all be distinct")
    form = _steps_nonpositive if nonpositive else _steps
    steps = [form(a, t, r, scratch[SCRATCH * i : SCRATCH * i + SCRATCH], consts) for i, r in enumerate(xs)]
    while steps:
        for g in list(steps):
            if next(g, StopIteration) is StopIteration:
                steps.remove(g)


def _reduce(a: Assembler, t: Target, x: Vec, s0: Vec, c: ExpConsts) -> Iterator[None]:
    """Step 2 of both forms, yielding after each instruction: ``n = round(x log2e)`` into ``s0``
    by the shifter, then Cody-Waite ``r = x - n ln2_hi - n ln2_lo`` in place in ``x``."""
    v = functools.partial(_op, a, t)
    c.load(a, s0, "shift")
    yield
    v("vfmadd231")(s0, x, c.operand("log2e"))
    yield
    v("vsub")(s0, s0, c.operand("shift"))
    yield
    v("vfnmadd231")(x, s0, c.operand("ln2_hi"))
    yield
    v("vfnmadd231")(x, s0, c.operand("ln2_lo"))
    yield


def _horner(a: Assembler, t: Target, x: Vec, s1: Vec, c: ExpConsts) -> Iterator[None]:
    """Step 3 of both forms, yielding after each instruction: ``p = 1 + r (1 + r (c2 + r (c3 +
    ...)))`` into ``s1`` for ``r`` in ``x``."""
    names = [n for n in c.table if n.startswith("c")]
    c.load(a, s1, names[0])
    yield
    for name in [*names[1:], "one", "one"]:
        _op(a, t, "vfmadd213")(s1, x, c.operand(name))
        yield


def _op(a: Assembler, t: Target, name: str):
    """The assembler method of the instruction ``name`` with the dtype's suffix (`Target.v`)."""
    return getattr(a, t.v(name))


def _steps(a: Assembler, t: Target, x: Vec, scratch: Sequence[Vec], c: ExpConsts) -> Iterator[None]:
    """The instructions of one ``x = exp(x)``, yielding after each."""
    s0, s1, s2 = scratch
    op = c.operand

    def v(name: str):
        return getattr(a, t.v(name))

    def const_reg(dst: Vec, name: str) -> Iterator[None]:  # the constant in a register
        if name in c.pinned:
            return c.pinned[name]
        c.load(a, dst, name)
        yield
        return dst

    # 1. clamp, keeping NaN (the second source of vmax/vmin comes back when either is NaN)
    v("vmax")(x, (yield from const_reg(s0, "lo")), x)
    yield
    v("vmin")(x, (yield from const_reg(s0, "hi")), x)
    yield
    # 2. n = round(x log2e) (s0), r = x - n ln2 (x)
    yield from _reduce(a, t, x, s0, c)
    # 4a. t_a = floor(n/2) + shift (s2): round(n/2 - 1/4), never a tie
    c.load(a, s2, "minus_quarter")
    yield
    v("vfmadd231")(s2, s0, op("half"))
    yield
    v("vadd")(s2, s2, op("shift_a"))
    yield
    # 3. p = 1 + r (1 + r (c2 + r (c3 + ...))) (s1)
    yield from _horner(a, t, x, s1, c)
    # 4b. n_a = t_a - shift (x), d = n - 2 n_a in {0, 1} (s0), p = p * (1 + d) exactly (s1)
    v("vsub")(x, s2, op("shift_a"))
    yield
    v("vfnmadd231")(s0, x, op("two"))
    yield
    v("vfmadd231")(s1, s1, s0)
    yield
    # 4c. s2 = 2^n_a: (bias + n_a) << p
    _shift_left(a, t, s2)
    yield
    # 4d. y = (p 2^n_a) 2^n_a: exact, then one rounding (gradual underflow, overflow to inf)
    v("vmul")(x, s1, s2)
    yield
    v("vmul")(x, x, s2)
    yield


def _steps_nonpositive(a: Assembler, t: Target, x: Vec, scratch: Sequence[Vec], c: ExpConsts) -> Iterator[None]:
    """The instructions of one ``x = exp(x)`` for ``x <= 0`` (`emit_exp`'s ``nonpositive``),
    yielding after each: the general form's steps 1-3 without the upper clamp and with the clamp
    at `NONPOSITIVE_LO`, then ``y = p * 2^n`` (exact scaling, one rounding)."""
    s0, s1, s2 = scratch
    op = c.operand

    def v(name: str):
        return getattr(a, t.v(name))

    # 1. clamp below, keeping NaN
    if "lo_np" in c.pinned:
        v("vmax")(x, c.pinned["lo_np"], x)
    else:
        c.load(a, s0, "lo_np")
        yield
        v("vmax")(x, s0, x)
    yield
    # 2. n = round(x log2e) (s0), r = x - n ln2 (x): as the general form
    yield from _reduce(a, t, x, s0, c)
    # 3. p (s1): Horner as the general form
    yield from _horner(a, t, x, s1, c)
    # 4. s2 = 2^n (+0 for n = -127 / -1023, at the clamp), y = p * 2^n
    v("vadd")(s2, s0, op("shift_a"))  # bits(1.5 2^p) + bias + n, exactly
    yield
    _shift_left(a, t, s2)  # (bias + n) << p
    yield
    v("vmul")(x, s1, s2)
    yield


def _shift_left(a: Assembler, t: Target, x: Vec) -> None:
    """``x`` <<= the significand's bits, per element (vpslld 23 / vpsllq 52)."""
    (a.vpslld if t.dtype == "fp32" else a.vpsllq)(x, x, MANTISSA_BITS[t.dtype])


def signature(ctype: str) -> str:
    return f"void(const {ctype}* x, {ctype}* y, int64_t n)"


#: constants the standalone AVX-512 kernel pins in zmm16.. (the rest are {1toN} memory operands)
AVX512_PINNED = ("lo", "hi", "shift", "minus_quarter", "one", "half")


def generate(dtype: str = "fp32", isa: str = "avx2", nonpositive: bool = False) -> Kernel:
    """The kernel ``void(const T* x, T* y, int64_t n)``: ``y[i] = exp(x[i])`` for ``0 <= i < n``
    (nothing for ``n <= 0``; ``nonpositive``: `emit_exp`'s form for x <= 0). Four registers per
    loop trip, then single registers, then one masked partial register (opmask k1 / vmaskmov).
    ``x`` and ``y`` may be the same array."""
    t = Target.of(dtype, isa)
    a = Assembler(name="vexp")
    regs = t.vregs
    unroll = 4
    xs, scratch = regs[:unroll], regs[unroll : unroll * (1 + SCRATCH)]
    pinned = {name: regs[16 + i] for i, name in enumerate(AVX512_PINNED)} if isa == "avx512" else {}
    consts = ExpConsts.new(a, t, pinned)
    vmovu = getattr(a, t.v("vmovu"))
    one_loop, tail, done = a.new_label("one"), a.new_label("tail"), a.new_label("done")
    consts.setup(a)

    a.cmp(rdx, unroll * t.vl)
    a.jl(one_loop)
    top = a.label("four")
    for u in range(unroll):
        vmovu(xs[u], t.vmem(rdi + u * t.vbytes))
    emit_exp(a, t, xs, scratch, consts, nonpositive)
    for u in range(unroll):
        vmovu(t.vmem(rsi + u * t.vbytes), xs[u])
    a.add(rdi, unroll * t.vbytes)
    a.add(rsi, unroll * t.vbytes)
    a.sub(rdx, unroll * t.vl)
    a.cmp(rdx, unroll * t.vl)
    a.jge(top)

    a.bind(one_loop)
    a.cmp(rdx, t.vl)
    a.jl(tail)
    one = a.label("one_top")
    vmovu(xs[0], t.vmem(rdi))
    emit_exp(a, t, xs[0], scratch[:SCRATCH], consts, nonpositive)
    vmovu(t.vmem(rsi), xs[0])
    a.add(rdi, t.vbytes)
    a.add(rsi, t.vbytes)
    a.sub(rdx, t.vl)
    a.cmp(rdx, t.vl)
    a.jge(one)

    a.bind(tail)  # 0 <= rdx < vl elements left
    a.test(rdx, rdx)
    a.jle(done)
    mask_table = None
    if isa == "avx512":
        a.mov(ecx, edx)
        a.mov(eax, 1)
        a.shl(eax, cl)
        a.dec(eax)
        a.kmovw(k1, eax)
        vmovu(xs[0].maskz(k1), t.vmem(rdi))
        emit_exp(a, t, xs[0], scratch[:SCRATCH], consts, nonpositive)
        vmovu(t.vmem(rsi).mask(k1), xs[0])
    else:
        mask = regs[15]
        mask_table = a.new_label("mask")
        a.mov(rcx, t.vl)
        a.sub(rcx, rdx)
        a.lea(rax, ptr(rip + mask_table))
        a.vmovups(mask, ymmword(rax + rcx * t.es))  # the first rdx lanes all ones
        maskmov = getattr(a, t.v("vmaskmov"))
        maskmov(xs[0], mask, t.vmem(rdi))
        emit_exp(a, t, xs[0], scratch[:SCRATCH], consts, nonpositive)
        maskmov(t.vmem(rsi), mask, xs[0])
    a.bind(done)
    a.vzeroupper()
    a.ret()
    if mask_table is not None:
        emit_mask_table(a, mask_table)
    consts.emit_data(a)
    return build(a, signature(t.ctype), f"vexp_{dtype}_{isa}" + ("_nonpositive" if nonpositive else ""))
