"""The fused attention kernel on AArch64, NEON and SVE (128/256/512 bits): every size and stride
at run time, one kernel per (dtype, isa) and tile choice (issue 50 part 3). The x86-64 kernel's
calling convention and semantics (`minijit.kernels.x86_64.attention`):

    void f(const T* q, const T* kt, const T* v, T* o, const int64_t* args, const T* params)

One call computes ``o[i, :] = softmax_j(scale * q[i, :] . kt[:, j] + bias[i, j]  (keys j <= row0 + i
when causal)) @ v`` for ``L`` query rows; ``args`` int64[`ARGS`] (`pack_args`: sizes, row strides in
elements, ``row0``, ``causal``, the ``scratch`` address, ``kt_tile``, the optional additive
``bias`` with ``ldb``/``ldb_c``), ``params`` = [scale]; the layouts of q, K^T (plain E x S, or
tile-major with ``kt_tile``), v, o and the bias are the x86 kernel's. ``scratch``: a buffer of
`scratch_bytes` bytes per thread (any alignment; 64 is best). Nothing outside the L x Ev block of
``o`` is written, nothing outside the operands' blocks is read. A row with every key masked is
NaN (0/0).

``isa`` names the target and, for SVE, the vector length the code is built for: "neon",
"sve128", "sve256", "sve512" (`ISAS`). An SVE kernel checks the length it runs at on entry and
only fills o's block with NaN when it differs (`AArch64Target.attention_kernel` builds for the
host's length).

Algorithm (FlashAttention-2, unscaled; seed 001's appendix), as on x86-64: query tiles of ``g``
rows, key tiles of ``s_x`` keys (a multiple of the vector length). Per query tile: Q's rows copied
transposed into the scratch (E x g, zero rows past L), running max ``m`` = the lowest finite value,
sum ``l`` = 0, the unscaled output tile O (g x Ev, in vector slots) = 0. Per key tile (tiles above
a causal diagonal are not visited):

1. ``S = (Q_tile . KT_tile) * scale``: register blocks of g rows x ``cv`` vectors of keys, one
   scalar load of Q per row and step used as an indexed element (``fmla vd, vn, vm.s[0]``), stored
   as g rows of s_x; the last partial key tile reads a zero-padded copy of K^T's last S % s_x
   columns (made once per call);
2. the bias rows added (vectors; the tile that crosses S element by element; a column stride of
   0 broadcast);
3. per row, on a tile that crosses S or the causal diagonal, lanes past the row's last key set to
   -inf (SVE: ``whilelt`` and ``sel``; NEON: a lane mask from a table and ``bif``); the tile max
   (``fmaxv``; NEON: ``ext`` rotations), ``m_new``, ``alpha = exp(m_old - m_new)``,
   ``p = exp(s - m_new)`` in place (`vexp.emit_exp`, 4 vectors interleaved for fp32, 3 for fp64),
   ``l = alpha l + sum(p)``;
4. ``O = alpha O + P . V_tile``: register blocks of g rows x cv vectors of Ev, one scalar load of
   P per row and key.
After the last key tile, ``o = O / l`` for the tile's valid rows.

Ev that is not a multiple of the vector length: SVE runs the last vector under a ``whilelt``
predicate (p2); NEON keeps the last ``Ev % lanes`` columns one per vector slot (a scalar ``ldr``
or ``str`` moves one element, the other lanes stay 0), so no load or store leaves the operands.

Registers: vector z0/z1 (v0/v1) the rotating scalar multipliers, z2.. the K/V vectors, then
g x cv accumulators (cv = min(4, 30 // (g + 1))); the softmax reuses them all: the exp constants
in z0.. (7 for fp32, 12 for fp64), then the row's max, sum, -inf and temporaries, then the exp
registers. General: x19 args, x20 scratch, x21 the key tile's first key, x22 its K^T, x23 the
last key + 1, x24 the masking threshold, x25 rows of the tile, x26 keys of the tile, x27 S, x28
params; the rest in a stack frame.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from asm.aarch64 import Assembler, Label, P, V, X, mem, sp
from asm.aarch64.registers import XReg
from minijit.kernels import attention as spec
from minijit.kernels.aarch64.common import epilogue, load_kernel, prologue
from minijit.kernels.aarch64.vexp import SCRATCH, ExpConsts, VTarget, add_offset, emit_exp, emit_words, quads
from minijit.kernels.epilogue import Epilogue, attention_softmax

__all__ = [
    "ARGS",
    "G_MAX",
    "ISAS",
    "check_tiles",
    "generate",
    "inner_loops",
    "pack_args",
    "program",
    "scratch_bytes",
    "signature",
    "vtarget",
]

#: the int64 arguments, in order (the shared ones: no key-chunk chaining)
ARGS = spec.ARGS
OFFSET = {name: 8 * i for i, name in enumerate(ARGS)}
#: the targets: NEON, and SVE at the vector lengths (bits) the code is built for
ISAS = ("neon", "sve128", "sve256", "sve512")
G_MAX, SX_VECTORS_MAX = spec.G_MAX, spec.SX_VECTORS_MAX
DEFAULT_G, DEFAULT_SX_VECTORS = spec.DEFAULT_G, spec.DEFAULT_SX_VECTORS
signature = spec.signature

ARG, SCR, J0, KTCUR, KEND, THR, GR, NK, SREG, PRM = X[19:29]
XZR = XReg(31)
TMP = X[17]  # offsets that do not fit an immediate
ROW_PTRS = (X[5], X[6], X[7], X[8], X[13], X[14], X[15], X[16])  # SVE P.V: P's row pointers
#: the stack frame's slots (8 bytes each)
SLOTS = (
    "q", "kt", "v", "o", "ldq", "ldkt", "ldv", "ldo", "ldb", "causal", "kttile", "E", "Ev", "qb", "ktt", "sfull",
    "rows", "diag", "bias", "biasrow", "ktp", "ktld", "nfull", "tail", "tailkt",
)  # fmt: skip
FRAME = 8 * (len(SLOTS) + len(SLOTS) % 2)


def vtarget(dtype: str, isa: str) -> VTarget:
    """The `VTarget` of ``isa`` (one of `ISAS`) for ``dtype``; ValueError naming a bad one."""
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}, got {isa!r}")
    return VTarget(dtype, "neon", 128) if isa == "neon" else VTarget(dtype, "sve", int(isa[3:]))


def check_tiles(dtype: str, isa: str, g: int | None = None, s_x: int | None = None) -> tuple[int, int]:
    """The validated tile ``(g, s_x)`` for ``dtype`` on ``isa`` (`minijit.kernels.attention.check_tile`)."""
    return spec.check_tile(g, s_x, vtarget(dtype, isa).lanes, f"{dtype} {isa}")


def _align(vt: VTarget) -> int:
    return max(64, vt.vbytes)


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


def _layout(vt: VTarget, g: int, s_x: int) -> dict[str, int]:
    """Byte offsets of the fixed part of the scratch: scores/P (g x s_x), m, l, alpha (g each, whole
    vectors), then the output tile (the start of the run-time part)."""
    a = _align(vt)
    off = {"p": 0, "m": _up(g * s_x * vt.es, a)}
    off["l"] = off["m"] + _up(g * vt.es, a)
    off["alpha"] = off["l"] + _up(g * vt.es, a)
    off["o"] = off["alpha"] + _up(g * vt.es, a)
    return off


def _slots(vt: VTarget, Ev: int) -> int:
    """Vector slots of one output row: whole vectors, then NEON: one per column left over; SVE: one
    predicated vector."""
    full, tail = divmod(max(0, Ev), vt.lanes)
    return full + (tail if vt.isa == "neon" else int(tail > 0))


def scratch_bytes(dtype: str, isa: str, E: int, Ev: int, g: int | None = None, s_x: int | None = None) -> int:
    """Bytes of the scratch buffer one call needs (per thread): the fixed part, the output tile
    (g x the vector slots of Ev), Q's tile (E x g, whole vectors) and the padded K^T tail (E x s_x)."""
    vt = vtarget(dtype, isa)
    g, s_x = check_tiles(dtype, isa, g, s_x)
    a = _align(vt)
    E = max(0, E)
    q_tile = _up(E * g * vt.es + 16, a)  # + 16: the quad loads of the last e read past it
    return _layout(vt, g, s_x)["o"] + _up(g * _slots(vt, Ev) * vt.vbytes, a) + q_tile + E * s_x * vt.es


def pack_args(**values: int) -> np.ndarray:
    """The ``args`` array from keyword values (`minijit.kernels.attention.pack_args` over `ARGS`)."""
    return spec.pack_args(ARGS, **values)


class FusedAttention:
    """One attention kernel being emitted (the stages are methods, in the order they run)."""

    def __init__(self, a: Assembler, vt: VTarget, g: int, s_x: int, softmax: bool = True) -> None:
        self.a, self.vt, self.g, self.s_x, self.with_softmax = a, vt, g, s_x, softmax
        self.nv = s_x // vt.lanes  # vectors of keys in a tile
        self.per = 16 // vt.es  # elements of a quad
        self.mult = list(range(max(2, -(-g // self.per))))  # multipliers: z0.. (indexed elements)
        self.cv = min(4, (32 - len(self.mult)) // (g + 1))  # vectors per register block
        self.vin = list(range(len(self.mult), len(self.mult) + self.cv))
        base = len(self.mult) + self.cv
        self.acc = [[base + i * self.cv + u for u in range(self.cv)] for i in range(g)]
        # softmax: exp constants first (low registers), row state, then the exp registers
        nq = quads(vt.dtype)
        self.cregs = list(range(nq))
        self.mx, self.sum, self.neg, self.tmp, self.t2, self.mk = range(nq, nq + 6)
        self.ce = 4 if vt.dtype == "fp32" else 3
        self.ex = list(range(nq + 6, nq + 6 + self.ce * (1 + SCRATCH)))
        assert self.ex[-1] < 32
        self.off = _layout(vt, g, s_x)
        self.exp = ExpConsts.new(a, vt, self.cregs)
        self.consts: Label = a.new_label("attn_consts")
        self.masks: Label = a.new_label("lane_masks")

    # -- helpers -------------------------------------------------------------------------
    def slot(self, name: str):
        return mem(sp, 8 * SLOTS.index(name))

    def ld(self, reg: XReg, name: str) -> None:
        self.a.ldr(reg, self.slot(name))

    def st(self, name: str, reg: XReg) -> None:
        self.a.str(reg, self.slot(name))

    def arg(self, reg: XReg, name: str) -> None:
        self.a.ldr(reg, mem(ARG, OFFSET[name]))

    def loop(self, counter: XReg, body, name: str) -> None:
        """``while counter > 0: body(); counter -= 1`` (nothing when counter <= 0 on entry)."""
        a = self.a
        top, end = a.new_label(name), a.new_label(name + "_end")
        a.cmp(counter, 0)
        a.b_cond("le", end)
        a.bind(top)
        body()
        a.subs(counter, counter, 1)
        a.b_cond("ne", top)
        a.bind(end)

    def scalar_ld(self, reg: int, base: XReg, off: int) -> None:
        """One element into lane 0 of ``reg`` (the other lanes zeroed)."""
        if off % self.vt.es or not 0 <= off < 4096 * self.vt.es:
            add_offset(self.a, TMP, base, off)
            base, off = TMP, 0
        self.a.ldr(self.vt.scalar(reg), mem(base, off))

    def scalar_st(self, reg: int, base: XReg, off: int) -> None:
        """Lane 0 of ``reg`` to memory."""
        if off % self.vt.es or not 0 <= off < 4096 * self.vt.es:
            add_offset(self.a, TMP, base, off)
            base, off = TMP, 0
        self.a.str(self.vt.scalar(reg), mem(base, off))

    def bcast(self, reg: int, base: XReg, off: int) -> None:
        """Every lane of ``reg`` = the element at ``base + off``."""
        self.scalar_ld(reg, base, off)
        self.vt.dup(self.a, reg, (reg, 0))

    def fmul_e(self, d: int, n: int, m: int) -> None:
        """d = n * m[0] (an indexed element)."""
        self.a.fmul(self.vt.r(d), self.vt.r(n), self.vt.e(m, 0))

    def zero_vectors(self, ptr: XReg, count: XReg, name: str) -> None:
        """``count`` vectors of zeros from ``ptr`` (both clobbered)."""
        vt = self.vt
        vt.zero(self.a, self.tmp)

        def body() -> None:
            vt.st(self.a, self.tmp, ptr, 0, TMP)
            self.a.add(ptr, ptr, vt.vbytes)

        self.loop(count, body, name)

    def hreduce(self, op: str, x: int, tmp: int) -> None:
        """Every lane of ``x`` = max / sum over its lanes."""
        a, vt = self.a, self.vt
        if vt.scalable:
            (a.sve_fmaxv if op == "max" else a.faddv)(vt.scalar(tmp), P[0], vt.r(x))
            vt.dup(a, x, (tmp, 0))
            return
        f = vt.max if op == "max" else (lambda a_, d, m: vt.add(a_, d, d, m))
        for rot in (8, 4) if vt.es == 4 else (8,):
            a.ext(V[tmp].b16, V[x].b16, V[x].b16, rot)
            f(a, x, tmp)

    def mask_lanes(self, d: int, count: XReg, first: int) -> None:
        """Lanes ``i`` of ``d`` with ``first + i >= count`` = -inf (x7, x8 clobbered)."""
        a, vt = self.a, self.vt
        if vt.scalable:
            p1 = getattr(P[1], vt.t.es)
            a.mov(X[7], first)
            a.whilelt(p1, X[7], count)
            a.sel(vt.r(d), P[1], vt.r(d), vt.r(self.neg))
            return
        # lanes kept: clamp(count - first, 0, lanes); their mask from the table
        a.sub(X[7], count, first) if first else a.mov(X[7], count)
        a.cmp(X[7], 0)
        a.csel(X[7], X[7], XZR, "gt")
        a.mov(X[8], vt.lanes)
        a.cmp(X[7], X[8])
        a.csel(X[7], X[7], X[8], "lt")
        a.adr(X[8], self.masks)
        a.add(X[8], X[8], X[7], "lsl", 4)
        a.ldr(V[self.mk].Q, mem(X[8]))
        a.bif(V[d].b16, V[self.neg].b16, V[self.mk].b16)

    # -- the kernel ------------------------------------------------------------------------
    def emit(self) -> None:
        a, vt = self.a, self.vt
        frame = prologue(a, range(19, 29), range(8, 16), writeback=True)
        a.sub(sp, sp, FRAME)
        done = a.new_label("done")
        wrong_vl = a.new_label("wrong_vl")
        if vt.scalable:  # built for one vector length: at another, o = NaN
            a.rdvl(X[9], 1)
            a.cmp(X[9], vt.vbytes)
            a.b_cond("ne", wrong_vl)
            a.ptrue(getattr(P[0], vt.t.es))
        a.mov(ARG, X[4])
        a.mov(PRM, X[5])
        for reg, name in ((X[0], "q"), (X[1], "kt"), (X[2], "v"), (X[3], "o")):
            self.st(name, reg)
        for name in ("ldq", "ldkt", "ldv", "ldo", "ldb"):
            self.arg(X[9], name)
            a.lsl(X[9], X[9], vt.t.shift)
            self.st(name, X[9])
        for name in ("causal", "E", "Ev", "bias"):
            self.arg(X[9], name)
            self.st(name, X[9])
        self.st("biasrow", X[9])
        self.arg(SREG, "S")
        self.arg(X[9], "kt_tile")  # elements between key tiles of K^T; 0: s_x (plain E x S)
        a.mov(X[10], self.s_x)
        a.cmp(X[9], 0)
        a.csel(X[9], X[9], X[10], "ne")
        a.lsl(X[9], X[9], vt.t.shift)
        self.st("kttile", X[9])
        self.arg(X[9], "L")
        a.cmp(X[9], 0)
        a.b_cond("le", done)
        self.st("rows", X[9])
        self.arg(X[9], "Ev")
        a.cmp(X[9], 0)
        a.b_cond("le", done)
        self.arg(SCR, "scratch")
        # Ev: whole vectors and the columns left over; the tail predicate p2 (SVE)
        shift = vt.lanes.bit_length() - 1
        a.lsr(X[10], X[9], shift)
        self.st("nfull", X[10])
        a.lsl(X[12], X[10], shift)
        a.sub(X[11], X[9], X[12])
        self.st("tail", X[11])
        if vt.scalable:
            a.whilelt(getattr(P[2], vt.t.es), XZR, X[11])
            a.cmp(X[11], 0)
            a.add(X[12], X[10], 1)
            a.csel(X[10], X[12], X[10], "ne")  # slots: whole vectors + 1 when a tail
        else:
            a.add(X[10], X[10], X[11])  # slots: whole vectors + one per column left over
        # the run-time scratch layout: qb (Q^T tile) after the output tile, ktt after qb
        al = _align(vt)
        a.mov(X[12], self.g * vt.vbytes)
        a.mul(X[10], X[10], X[12])
        a.add(X[10], X[10], al - 1)
        a.lsr(X[10], X[10], al.bit_length() - 1)
        a.lsl(X[10], X[10], al.bit_length() - 1)
        add_offset(a, X[12], SCR, self.off["o"])
        a.add(X[10], X[10], X[12])
        self.st("qb", X[10])
        self.ld(X[11], "E")
        a.mov(X[12], self.g * vt.es)
        a.mul(X[11], X[11], X[12])
        a.add(X[11], X[11], al - 1 + 16)
        a.lsr(X[11], X[11], al.bit_length() - 1)
        a.lsl(X[11], X[11], al.bit_length() - 1)
        a.add(X[10], X[10], X[11])
        self.st("ktt", X[10])
        self.kt_tail()
        self.arg(X[9], "row0")
        a.add(X[9], X[9], 1)
        self.st("diag", X[9])
        top = a.label("qtile")
        self.query_tile()
        for name, ld in (("q", "ldq"), ("o", "ldo"), ("biasrow", "ldb")):
            self.ld(X[9], name)
            self.ld(X[10], ld)
            a.mov(X[11], self.g)
            a.madd(X[9], X[10], X[11], X[9])
            self.st(name, X[9])
        self.ld(X[9], "diag")
        a.add(X[9], X[9], self.g)
        self.st("diag", X[9])
        self.ld(X[9], "rows")
        a.subs(X[9], X[9], self.g)
        self.st("rows", X[9])
        a.b_cond("gt", top)
        a.bind(done)
        a.add(sp, sp, FRAME)
        epilogue(a, frame)
        if vt.scalable:
            a.bind(wrong_vl)
            self.nan_output()
            a.b(done)
        self.data()

    def nan_output(self) -> None:
        """o's L x Ev block = NaN, element by element (x3: o and x4: args as on entry)."""
        a, vt = self.a, self.vt
        a.adr(X[9], self.consts)
        a.ldr(vt.scalar(self.tmp), mem(X[9], 32))  # the NaN quad
        a.ldr(X[10], mem(X[4], OFFSET["L"]))
        a.ldr(X[11], mem(X[4], OFFSET["ldo"]))
        a.lsl(X[11], X[11], vt.t.shift)

        def row() -> None:
            a.ldr(X[12], mem(X[4], OFFSET["Ev"]))
            a.mov(X[13], X[3])

            def element() -> None:
                a.str(vt.scalar(self.tmp), mem(X[13]))
                a.add(X[13], X[13], vt.es)

            self.loop(X[12], element, "nan_col")
            a.add(X[3], X[3], X[11])

        self.loop(X[10], row, "nan_row")

    def kt_tail(self) -> None:
        """The last S % s_x columns of K^T, zero-padded to E x s_x in the scratch (``ktt``)."""
        a, vt = self.a, self.vt
        a.mov(X[9], self.s_x)
        a.udiv(X[10], SREG, X[9])  # whole tiles
        self.ld(X[11], "kttile")
        self.ld(X[12], "kt")
        a.madd(X[12], X[10], X[11], X[12])
        self.st("tailkt", X[12])  # the tail tile's K^T
        a.mul(X[10], X[10], X[9])
        self.st("sfull", X[10])
        skip = a.new_label("no_tail")
        a.cmp(X[10], SREG)
        a.b_cond("eq", skip)
        self.ld(X[0], "ktt")
        self.ld(X[1], "E")
        a.mov(X[2], self.nv)
        a.mul(X[1], X[1], X[2])
        self.zero_vectors(X[0], X[1], "ktt_zero")
        # rows: x0 walks K^T from column sfull, x1 the copy; x2 counts rows, x3 columns
        self.ld(X[0], "tailkt")
        self.ld(X[1], "ktt")
        self.ld(X[2], "E")
        self.ld(X[4], "ldkt")
        self.ld(X[5], "sfull")

        def row() -> None:
            a.sub(X[3], SREG, X[5])
            a.mov(X[6], 0)

            def element() -> None:
                a.ldr(vt.scalar(self.tmp), mem(X[0], X[6], "lsl", vt.t.shift))
                a.str(vt.scalar(self.tmp), mem(X[1], X[6], "lsl", vt.t.shift))
                a.add(X[6], X[6], 1)

            self.loop(X[3], element, "ktt_col")
            a.add(X[0], X[0], X[4])
            a.add(X[1], X[1], self.s_x * vt.es)

        self.loop(X[2], row, "ktt_row")
        a.bind(skip)

    def query_tile(self) -> None:
        a, vt, g = self.a, self.vt, self.g
        # rows of this tile: min(g, rows left)
        self.ld(GR, "rows")
        a.mov(X[9], g)
        a.cmp(GR, X[9])
        a.csel(GR, GR, X[9], "lt")
        # Q^T tile: zero, then rows i < gr: qb[e*g + i] = q[i*ldq + e]
        self.ld(X[0], "qb")
        self.ld(X[1], "E")
        a.mov(X[2], g * vt.es)
        a.mul(X[1], X[1], X[2])
        a.add(X[1], X[1], vt.vbytes - 1)
        a.lsr(X[1], X[1], vt.vbytes.bit_length() - 1)
        self.zero_vectors(X[0], X[1], "qb_zero")
        a.mov(X[2], GR)
        self.ld(X[3], "q")
        self.ld(X[4], "qb")
        self.ld(X[5], "ldq")

        def qrow() -> None:
            self.ld(X[6], "E")
            a.mov(X[7], X[3])
            a.mov(X[8], X[4])

            def element() -> None:
                a.ldr(vt.scalar(self.tmp), mem(X[7]))
                a.str(vt.scalar(self.tmp), mem(X[8]))
                a.add(X[7], X[7], vt.es)
                a.add(X[8], X[8], g * vt.es)

            self.loop(X[6], element, "q_col")
            a.add(X[3], X[3], X[5])
            a.add(X[4], X[4], vt.es)

        self.loop(X[2], qrow, "q_row")
        # m = lowest, l = 0, O = 0
        a.adr(X[9], self.consts)
        vt.ldq(a, self.t2, X[9], 16, TMP)
        vt.zero(a, self.tmp)
        for w in range(-(-g * vt.es // vt.vbytes)):
            vt.st(a, self.t2, SCR, self.off["m"] + w * vt.vbytes, TMP)
            vt.st(a, self.tmp, SCR, self.off["l"] + w * vt.vbytes, TMP)
            if not self.with_softmax:  # alpha stays 0: O = P . V of the last tile, no NaN from old scratch
                vt.st(a, self.tmp, SCR, self.off["alpha"] + w * vt.vbytes, TMP)
        add_offset(a, X[0], SCR, self.off["o"])
        self.ld(X[1], "nfull")
        self.ld(X[2], "tail")
        if vt.scalable:
            a.cmp(X[2], 0)
            a.add(X[3], X[1], 1)
            a.csel(X[1], X[3], X[1], "ne")
        else:
            a.add(X[1], X[1], X[2])
        a.mov(X[2], g)
        a.mul(X[1], X[1], X[2])
        self.zero_vectors(X[0], X[1], "o_zero")
        # key range: kend = causal ? min(S, diag - 1 + gr) : S; masking from thr = min(S, diag)
        a.mov(KEND, SREG)
        a.mov(THR, SREG)
        nc = a.new_label("not_causal")
        self.ld(X[9], "causal")
        a.cbz(X[9], nc)
        self.ld(X[9], "diag")
        a.cmp(X[9], THR)
        a.csel(THR, X[9], THR, "lt")
        a.add(X[9], X[9], GR)
        a.sub(X[9], X[9], 1)
        a.cmp(X[9], KEND)
        a.csel(KEND, X[9], KEND, "lt")
        a.bind(nc)
        # key tiles
        a.mov(J0, 0)
        self.ld(KTCUR, "kt")
        end = a.new_label("ktiles_end")
        a.cmp(KEND, 0)
        a.b_cond("le", end)
        top = a.label("ktile")
        self.key_tile()
        a.add(J0, J0, self.s_x)
        self.ld(X[9], "kttile")
        a.add(KTCUR, KTCUR, X[9])
        a.cmp(J0, KEND)
        a.b_cond("lt", top)
        a.bind(end)
        self.epilogue()

    def key_tile(self) -> None:
        a, vt = self.a, self.vt
        # K^T of the tile: KTCUR (stride ldkt) when the tile ends inside S, else the padded copy
        a.add(X[9], J0, self.s_x)
        a.cmp(X[9], SREG)
        self.ld(X[10], "ktt")
        a.csel(X[10], X[10], KTCUR, "gt")
        self.st("ktp", X[10])
        self.ld(X[10], "ldkt")
        a.mov(X[11], self.s_x * vt.es)
        a.csel(X[10], X[11], X[10], "gt")
        self.st("ktld", X[10])
        for c0 in range(0, self.nv, self.cv):
            self.scores(c0, min(self.cv, self.nv - c0))
        self.bias()
        if self.with_softmax:  # (without: a measure of the softmax's share, as on x86-64)
            masked, after = a.new_label("masked"), a.new_label("softmax_done")
            a.add(X[9], J0, self.s_x)
            a.cmp(X[9], THR)
            a.b_cond("gt", masked)
            self.softmax(masked=False)
            a.b(after)
            a.bind(masked)
            self.softmax(masked=True)
            a.bind(after)
        # nk = min(s_x, kend - J0)
        a.sub(NK, KEND, J0)
        a.mov(X[9], self.s_x)
        a.cmp(NK, X[9])
        a.csel(NK, NK, X[9], "lt")
        self.pv()

    def scores(self, c0: int, cv: int) -> None:
        """Score vectors c0..c0+cv of the tile for the g rows -> the scratch rows."""
        a, vt, g = self.a, self.vt, self.g
        PK, PQ, LD, CNT = X[0], X[1], X[2], X[3]
        acc = [row[:cv] for row in self.acc]
        for row in acc:
            for x in row:
                vt.zero(a, x)
        self.ld(PK, "ktp")
        if c0:
            add_offset(a, PK, PK, c0 * vt.vbytes)
        self.ld(PQ, "qb")
        self.ld(LD, "ktld")
        self.ld(CNT, "E")
        self.loop(CNT, lambda: self.scores_step(cv, PK, PQ, LD), "e")
        self.bcast(self.mult[0], PRM, 0)
        for i in range(g):
            for u in range(cv):
                self.fmul_e(acc[i][u], acc[i][u], self.mult[0])
                vt.st(a, acc[i][u], SCR, self.off["p"] + (i * self.s_x + (c0 + u) * vt.lanes) * vt.es, TMP)

    def scores_step(self, cv: int, PK: XReg, PQ: XReg, LD: XReg) -> None:
        """One e: cv K vectors, then per row one Q element and cv FMAs."""
        a, vt = self.a, self.vt
        for u in range(cv):
            vt.ld(a, self.vin[u], PK, u * vt.vbytes, TMP)
        for j in range(-(-self.g // self.per)):  # Q's g elements of this e, a quad at a time
            vt.ldq(a, self.mult[j], PQ, 16 * j, TMP)
        for i in range(self.g):
            for u in range(cv):
                vt.fmla(a, self.acc[i][u], self.vin[u], (self.mult[i // self.per], i % self.per))
        a.add(PK, PK, LD)
        a.add(PQ, PQ, self.g * vt.es)

    def bias(self) -> None:
        """Scores += the bias rows of the tile's valid rows (none when ``bias`` is 0): columns at
        stride 1 (vectors; the tile crossing S element by element) or 0 (broadcast)."""
        a, vt = self.a, self.vt
        PS, PB, CNT, J, SL, LDB = X[0], X[1], X[2], X[3], X[4], X[5]
        skip, done = a.new_label("no_bias"), a.new_label("bias_done")
        self.ld(X[9], "bias")
        a.cbz(X[9], skip)
        add_offset(a, PS, SCR, self.off["p"])
        self.ld(PB, "biasrow")
        self.ld(LDB, "ldb")
        a.mov(CNT, GR)
        col0, crossing = a.new_label("bias_col0"), a.new_label("bias_crossing")
        self.arg(X[9], "ldb_c")
        a.cbz(X[9], col0)
        a.add(PB, PB, J0, "lsl", vt.t.shift)
        a.add(X[9], J0, self.s_x)
        a.cmp(X[9], SREG)
        a.b_cond("gt", crossing)

        def full_row() -> None:
            for u in range(self.nv):
                vt.ld(a, self.tmp, PS, u * vt.vbytes, TMP)
                vt.ld(a, self.t2, PB, u * vt.vbytes, TMP)
                vt.add(a, self.tmp, self.tmp, self.t2)
                vt.st(a, self.tmp, PS, u * vt.vbytes, TMP)
            a.add(PS, PS, self.s_x * vt.es)
            a.add(PB, PB, LDB)

        def crossing_row() -> None:
            a.sub(SL, SREG, J0)
            a.mov(J, 0)

            def element() -> None:
                a.ldr(vt.scalar(self.tmp), mem(PS, J, "lsl", vt.t.shift))
                a.ldr(vt.scalar(self.t2), mem(PB, J, "lsl", vt.t.shift))
                vt.add(a, self.tmp, self.tmp, self.t2)
                a.str(vt.scalar(self.tmp), mem(PS, J, "lsl", vt.t.shift))
                a.add(J, J, 1)

            self.loop(SL, element, "bias_elem")
            a.add(PS, PS, self.s_x * vt.es)
            a.add(PB, PB, LDB)

        def col0_row() -> None:
            self.bcast(self.t2, PB, 0)
            for u in range(self.nv):
                vt.ld(a, self.tmp, PS, u * vt.vbytes, TMP)
                vt.add(a, self.tmp, self.tmp, self.t2)
                vt.st(a, self.tmp, PS, u * vt.vbytes, TMP)
            a.add(PS, PS, self.s_x * vt.es)
            a.add(PB, PB, LDB)

        self.loop(CNT, full_row, "bias_full")
        a.b(done)
        a.bind(crossing)
        self.loop(CNT, crossing_row, "bias_crossing")
        a.b(done)
        a.bind(col0)
        self.loop(CNT, col0_row, "bias_col0")
        a.bind(done)
        a.bind(skip)

    def softmax(self, masked: bool) -> None:
        """The g rows of the tile: mask, max, alpha, p = exp(s - m_new), l."""
        a, vt = self.a, self.vt
        PS, PM, CNT, DI, SL, STEP, R = X[0], X[1], X[2], X[3], X[4], X[5], X[6]
        self.exp.setup(a, X[9])
        a.adr(X[9], self.consts)
        vt.ldq(a, self.neg, X[9], 0, TMP)
        add_offset(a, PS, SCR, self.off["p"])
        add_offset(a, PM, SCR, self.off["m"])
        a.mov(CNT, self.g)
        if masked:  # keys of row i in this tile: min(S, causal ? diag + i : S) - J0
            a.sub(SL, SREG, J0)
            self.ld(STEP, "causal")
            self.ld(DI, "diag")
            a.sub(DI, DI, J0)
            a.cmp(STEP, 0)
            a.csel(DI, DI, SL, "ne")
        top = a.label("row_masked" if masked else "row")
        if masked:
            a.cmp(DI, SL)
            a.csel(R, DI, SL, "lt")
        # 1. the tile max (masking the scores first)
        for u in range(self.nv):
            dst = self.mx if u == 0 else self.tmp
            vt.ld(a, dst, PS, u * vt.vbytes, TMP)
            if masked:
                self.mask_lanes(dst, R, u * vt.lanes)
                vt.st(a, dst, PS, u * vt.vbytes, TMP)
            if u:
                vt.max(a, self.mx, self.tmp)
        self.hreduce("max", self.mx, self.tmp)
        # 2. m_new = max(m_old, max); alpha = exp(m_old - m_new)
        x0 = self.ex[0]
        self.bcast(self.t2, PM, 0)
        vt.max(a, self.mx, self.t2)
        vt.sub(a, x0, self.t2, self.mx)
        emit_exp(a, vt, x0, self.ex[1 : 1 + SCRATCH], self.exp)
        self.scalar_st(x0, PM, self.off["alpha"] - self.off["m"])
        self.scalar_st(self.mx, PM, 0)
        # 3. p = exp(s - m_new) in place, sum
        vt.zero(a, self.sum)
        for c0 in range(0, self.nv, self.ce):
            n = min(self.ce, self.nv - c0)
            xs = self.ex[:n]
            for u in range(n):
                vt.ld(a, xs[u], PS, (c0 + u) * vt.vbytes, TMP)
                vt.sub(a, xs[u], xs[u], self.mx)
            emit_exp(a, vt, xs, self.ex[n : n + SCRATCH * n], self.exp)
            for u in range(n):
                vt.st(a, xs[u], PS, (c0 + u) * vt.vbytes, TMP)
                vt.add(a, self.sum, self.sum, xs[u])
        self.hreduce("sum", self.sum, self.tmp)
        # 4. l = alpha l + sum
        self.scalar_ld(self.tmp, PM, self.off["alpha"] - self.off["m"])
        self.scalar_ld(self.t2, PM, self.off["l"] - self.off["m"])
        vt.fmla(a, self.sum, self.tmp, self.t2)
        self.scalar_st(self.sum, PM, self.off["l"] - self.off["m"])
        a.add(PS, PS, self.s_x * vt.es)
        a.add(PM, PM, vt.es)
        if masked:
            a.add(DI, DI, STEP)
        a.subs(CNT, CNT, 1)
        a.b_cond("ne", top)

    def pv(self) -> None:
        """O = alpha O + P . V over Ev: blocks of cv whole vectors, then 1..cv-1 whole vectors, then
        the tail (SVE: one predicated vector; NEON: one slot per column left over)."""
        a, vt, g, cv = self.a, self.vt, self.g, self.cv
        OBP, REM, EVOFF, VT = X[9], X[10], X[11], X[12]
        add_offset(a, OBP, SCR, self.off["o"])
        self.ld(REM, "nfull")
        a.mov(EVOFF, 0)
        self.ld(VT, "ldv")
        self.ld(X[13], "v")
        a.madd(VT, VT, J0, X[13])  # V at the tile's first key
        top, rest, tail, end = (a.new_label(n) for n in ("ev", "ev_rest", "ev_tail", "ev_done"))
        a.bind(top)
        a.cmp(REM, cv)
        a.b_cond("lt", rest)
        self.pv_block(cv, "full")
        add_offset(a, OBP, OBP, cv * g * vt.vbytes)
        a.add(EVOFF, EVOFF, cv * vt.vbytes)
        a.sub(REM, REM, cv)
        a.b(top)
        a.bind(rest)  # 0..cv-1 whole vectors
        self.variants(REM, cv - 1, lambda n: self.pv_block(n, "full"), tail, "ev_v")
        a.bind(tail)
        a.mov(X[13], g * vt.vbytes)
        a.madd(OBP, REM, X[13], OBP)
        a.add(EVOFF, EVOFF, REM, "lsl", vt.vbytes.bit_length() - 1)
        self.ld(REM, "tail")
        if vt.scalable:
            a.cbz(REM, end)
            self.pv_block(1, "pred")
        else:
            self.variants(REM, vt.lanes - 1, lambda n: self.pv_block(n, "single"), end, "ev_s")
        a.bind(end)

    def variants(self, count: XReg, most: int, emit, after: Label, name: str) -> None:
        """``emit(n)`` for the run-time ``count`` = n in 1..most (nothing for 0), then ``after``."""
        a = self.a
        labels = {n: a.new_label(f"{name}{n}") for n in range(1, most + 1)}
        for n, label in labels.items():
            a.cmp(count, n)
            a.b_cond("eq", label)
        a.b(after)
        for n, label in labels.items():
            a.bind(label)
            emit(n)
            a.b(after)

    def pv_block(self, nvec: int, kind: str) -> None:
        """``nvec`` slots of O at OBP (V columns from EVOFF bytes): O = alpha O + P . V. ``kind``:
        "full" vectors, "pred" one vector under p2 (SVE), "single" one column a slot (NEON)."""
        a, vt, g = self.a, self.vt, self.g
        OBP, EVOFF, VT = X[9], X[11], X[12]
        PV, PP, LD, CNT, PA = X[0], X[1], X[2], X[3], X[4]
        acc = [row[:nvec] for row in self.acc]
        add_offset(a, PA, SCR, self.off["alpha"])
        for i in range(g):
            m = self.mult[i % 2]
            self.bcast(m, PA, i * vt.es)
            for u in range(nvec):
                vt.ld(a, acc[i][u], OBP, (u * g + i) * vt.vbytes, TMP)
                self.fmul_e(acc[i][u], acc[i][u], m)
        a.add(PV, VT, EVOFF)
        add_offset(a, PP, SCR, self.off["p"])
        self.ld(LD, "ldv")
        a.mov(CNT, NK)
        if vt.scalable:  # P[i, k] broadcast by ld1rw/ld1rd from a pointer per row
            for i in range(g):
                add_offset(a, ROW_PTRS[i], PP, i * self.s_x * vt.es)

        def step() -> None:
            for u in range(nvec):
                if kind == "full":
                    vt.ld(a, self.vin[u], PV, u * vt.vbytes, TMP)
                elif kind == "pred":
                    vt.t.ld1(a, vt.r(self.vin[u]), P[2].z, mem(PV))
                else:
                    a.ldr(vt.scalar(self.vin[u]), mem(PV, u * vt.es))
            self.p_step(acc, nvec, PP)
            a.add(PV, PV, LD)

        self.loop(CNT, step, "k")
        for i in range(g):
            for u in range(nvec):
                vt.st(a, acc[i][u], OBP, (u * g + i) * vt.vbytes, TMP)

    def p_step(self, acc: list[list[int]], nvec: int, PP: XReg) -> None:
        """Per row one element of P (NEON: lane 0 of a scalar load; SVE: a broadcast load from its
        row pointer) and ``nvec`` FMAs; the pointers on by one key."""
        a, vt = self.a, self.vt
        for i in range(self.g):
            m = self.mult[i % 2]
            if vt.scalable:
                vt.t.ld1r(a, vt.r(m), P[0].z, mem(ROW_PTRS[i]))
            else:
                self.scalar_ld(m, PP, i * self.s_x * vt.es)
            for u in range(nvec):
                vt.fmla(a, acc[i][u], self.vin[u], (m, 0))
        for i in range(self.g) if vt.scalable else ():
            a.add(ROW_PTRS[i], ROW_PTRS[i], vt.es)
        if not vt.scalable:
            a.add(PP, PP, vt.es)

    def epilogue(self) -> None:
        """o[i] = O[i] / l[i] for the tile's rows (whole vectors, then the tail)."""
        a, vt, g = self.a, self.vt, self.g
        PO, POB, ROWS, PL, NV, ORow, OBRow = X[0], X[1], X[2], X[3], X[4], X[5], X[6]
        x, bc = self.acc[0][0], self.acc[0][1]
        self.ld(ORow, "o")
        add_offset(a, OBRow, SCR, self.off["o"])
        add_offset(a, PL, SCR, self.off["l"])
        a.mov(ROWS, GR)

        def row() -> None:
            a.mov(PO, ORow)
            a.mov(POB, OBRow)
            self.bcast(bc, PL, 0)
            self.ld(NV, "nfull")

            def vector() -> None:
                vt.ld(a, x, POB, 0, TMP)
                vt.div(a, x, bc)
                vt.st(a, x, PO, 0, TMP)
                a.add(PO, PO, vt.vbytes)
                add_offset(a, POB, POB, g * vt.vbytes)

            self.loop(NV, vector, "o_vec")
            self.ld(NV, "tail")
            if vt.scalable:
                skip = a.new_label("o_tail")
                a.cbz(NV, skip)
                vt.ld(a, x, POB, 0, TMP)
                vt.div(a, x, bc)
                vt.t.st1(a, vt.r(x), P[2], mem(PO))
                a.bind(skip)
            else:

                def column() -> None:
                    vt.ld(a, x, POB, 0, TMP)
                    vt.div(a, x, bc)
                    a.str(vt.scalar(x), mem(PO))
                    a.add(PO, PO, vt.es)
                    add_offset(a, POB, POB, g * vt.vbytes)

                self.loop(NV, column, "o_col")
            self.ld(X[7], "ldo")
            a.add(ORow, ORow, X[7])
            a.add(OBRow, OBRow, vt.vbytes)
            a.add(PL, PL, vt.es)

        self.loop(ROWS, row, "o_row")

    def data(self) -> None:
        """The kernel's constants (-inf, the lowest finite value, NaN), NEON's lane masks, the exp table."""
        vt = self.vt
        fmt = "<f" if vt.es == 4 else "<d"
        per = 16 // vt.es
        lowest = float(np.finfo(vt.t.np).min)
        values = (float("-inf"), lowest, float("nan"))
        emit_words(self.a, self.consts, b"".join(struct.pack(fmt, v) * per for v in values))
        if not vt.scalable:
            masks = b"".join((b"\xff" * (vt.es * c)).ljust(16, b"\0") for c in range(vt.lanes + 1))
            emit_words(self.a, self.masks, masks)
        self.exp.emit_data(self.a)


def program(
    dtype: str,
    isa: str,
    g: int | None = None,
    s_x: int | None = None,
    softmax: bool = True,
    epilogue: Epilogue | str | None = Epilogue.ONLINE_SOFTMAX,
) -> Assembler:
    """The assembled attention kernel for ``dtype`` ("fp32", "fp64"), ``isa`` (`ISAS`) and the
    tile (`check_tiles`). ``epilogue`` / ``softmax`` as in the x86-64 generator
    (`minijit.kernels.epilogue.attention_softmax`): the online softmax, or none (``softmax=False``),
    which leaves the softmax stage out (wrong results: the two products and their fills only)."""
    vt = vtarget(dtype, isa)
    g, s_x = check_tiles(dtype, isa, g, s_x)
    softmax = attention_softmax(epilogue, softmax)
    name = spec.kernel_name(dtype, isa, g, s_x, softmax)
    a = Assembler(name=name)
    FusedAttention(a, vt, g, s_x, softmax).emit()
    return a


def generate(
    dtype: str,
    isa: str,
    g: int | None = None,
    s_x: int | None = None,
    softmax: bool = True,
    epilogue: Epilogue | str | None = Epilogue.ONLINE_SOFTMAX,
) -> Any:
    """The fused attention kernel (see the module docstring; ``softmax``, ``epilogue`` as in
    `program`): native on an AArch64 host, else emulated in the qemu worker at the SVE length of
    ``isa``."""
    vt = vtarget(dtype, isa)
    a = program(dtype, isa, g, s_x, softmax, epilogue)
    return load_kernel(a, signature(vt.t.ctype), a.name, vt.vl if vt.scalable else 128)


def inner_loops(dtype: str, isa: str, g: int | None = None, s_x: int | None = None) -> dict[str, str]:
    """Listings of one iteration of the kernel's inner loops (for llvm-mca): "scores" (one e of a
    g x cv block of Q.K^T), "pv" (one key of a g x cv block of P.V) and "exp" (``4 (fp32) / 3
    (fp64)`` vectors of `emit_exp` with the loads, subtraction, stores and sum around them)."""
    vt = vtarget(dtype, isa)
    g, s_x = check_tiles(dtype, isa, g, s_x)
    out = {}
    for name in ("scores", "pv", "exp"):
        a = Assembler(name=name)
        k = FusedAttention(a, vt, g, s_x)
        if vt.scalable:
            a.ptrue(getattr(P[0], vt.t.es))
        top = a.label("loop")
        if name == "scores":
            k.scores_step(k.cv, X[0], X[1], X[2])
        elif name == "pv":
            for u in range(k.cv):
                vt.ld(a, k.vin[u], X[0], u * vt.vbytes, TMP)
            k.p_step(k.acc, k.cv, X[1])
            a.add(X[0], X[0], X[2])
        else:
            xs = k.ex[: k.ce]
            for u, r in enumerate(xs):
                vt.ld(a, r, X[0], u * vt.vbytes, TMP)
                vt.sub(a, r, r, k.mx)
            emit_exp(a, vt, xs, k.ex[k.ce : k.ce * (1 + SCRATCH)], k.exp)
            for u, r in enumerate(xs):
                vt.st(a, r, X[0], u * vt.vbytes, TMP)
                vt.add(a, k.sum, k.sum, r)
            a.add(X[0], X[0], k.ce * vt.vbytes)
        a.subs(X[3], X[3], 1)
        a.b_cond("ne", top)
        out[name] = a.listing()
    return out
