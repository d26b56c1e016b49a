"""The fused attention kernel on x86-64 (AVX2 and AVX-512), generic tier: every size and stride at
run time, one kernel per (dtype, ISA) and tile choice (issue 50 part 3, first version).

    void f(const T* q, const T* kt, const T* v, T* o, const int64_t* args, const T* params)

One call computes one (batch, head) slice for ``L`` query rows::

    o[i, :] = softmax_j(scale * q[i, :] . kt[:, j]  (keys j <= row0 + i when causal)) @ v

``q``: L x E rows (row stride ``ldq`` elements), ``kt``: K transposed, E x S (row stride ``ldkt``,
contiguous along the keys; with ``kt_tile`` > 0 the key tiles of s_x keys lie ``kt_tile``
elements apart: element (e, j) at ``kt[(j // s_x) * kt_tile + e * ldkt + j % s_x]``, so a K^T
packed tile-major, ``ldkt = s_x``, ``kt_tile = E * s_x``, streams contiguously; 0 is plain E x S),
``v``: S x Ev rows (``ldv``), ``o``: L x Ev rows (``ldo``); an optional additive ``bias`` (an
address in ``args``, 0 for none: torch's float attn_mask), element (i, j) at ``bias[i * ldb +
j * ldb_c]``, ``ldb`` any (0: one row for all), ``ldb_c`` 1 or 0, added to the scaled scores
(-inf entries are masked keys); ``args``
int64[`ARGS`] (`pack_args`); ``params``: [scale]. ``scratch`` (an address in ``args``) is a
caller-provided buffer of at least `scratch_bytes` bytes, one per thread (64-byte alignment is
best; any alignment works). Nothing outside the L x Ev block of ``o`` is written and nothing
outside the L x E, E x S and S x Ev blocks of the inputs is read. A row with every key masked
is NaN (0/0, torch's math definition); causal rows always see key 0, so that only happens for
S = 0.

Algorithm (FlashAttention-2, unscaled; seed 001's appendix): query tiles of ``g`` rows, key tiles
of ``s_x`` keys (a multiple of the vector length). Per query tile the rows of Q are copied
transposed into the scratch (E x g, zero rows past L: the register blocks always work on ``g``
rows), the running max ``m`` starts at the lowest finite value (not -inf: then ``m_old - m_new``
is never ``-inf - -inf`` and ``exp(-inf - m) = 0`` comes out exactly, which is what api.py's
``safe`` does), the running sum ``l`` and the unscaled output tile ``O`` (g x Ev, in the
scratch) at 0. Per key tile (tiles entirely above a causal diagonal are not visited):

1. scores ``S = (Q_tile . KT_tile) * scale``: register blocks of g rows x ``cv`` vectors of keys
   (keys in vector lanes, Q elements broadcast, one FMA chain over E per score), stored as g rows
   of s_x in the scratch. The last, partial key tile of the call reads a zero-padded copy of
   K^T's last S % s_x columns (made once per call), so no load needs a mask;
2. the softmax in two passes over the g rows. Pass 1, per row: on a tile that crosses S or a
   causal diagonal, lanes past the row's last key are set to -inf (a lane mask per vector from its
   clamped count: ``vblendv`` / merge-masked load); the tile max (a vmax tree, then a butterfly
   horizontal max), ``m_new = max(m_old, max)``, ``m_old - m_new`` kept. Then ``alpha =
   exp(m_old - m_new)`` for all g rows in one vector exp. Pass 2, per row: ``p = exp(s - m_new)``
   in place and the row sum kept as a vector, ``lv = alpha lv + p`` lane-wise (`vexp.emit_exp`'s
   form for x <= 0 throughout; ``l`` = the sum of ``lv``'s lanes once, in the epilogue);
3. ``O = alpha * O + P . V_tile``: register blocks of g rows x cv vectors of Ev (Ev in lanes, P
   elements broadcast, the tile's valid keys in order), the last Ev chunk with a masked V load;
4. after the last key tile: ``o = O * (1 / l)`` for the tile's valid rows, the last vector of each
   row a masked store.

A tile of more than `BLOCK_ROWS` rows (up to `G_MAX`) runs its rows as register blocks of 6 (the
last shorter) one after another in steps 1 and 3, over the same K^T / V vectors, which the first
block brought into L1; steps 2 and 4 walk all g rows.

Registers (a block of 6 rows): AVX2 scores 12 accumulators + 2 K vectors + 1 broadcast, P.V 12 + 2 V + 1
broadcast + the tail mask = 16; AVX-512 cv = 4: 24 + 4 + 1 (+ k2 for the Ev tail, k1 for the
key masks). `emit_exp` runs 1 (AVX2, ymm0..3) or 4 (AVX-512, zmm16..31) vectors at once, six of
its constants pinned in registers 4..7, 10, 11 (the rest memory operands).
"""

from __future__ import annotations

import struct

import numpy as np

from asm.x86_64 import Assembler, Label, Vec, ptr, qword, rip, word
from asm.x86_64.registers import KReg, r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi
from minijit.kernels import attention as spec
from minijit.kernels.epilogue import Epilogue, attention_softmax
from minijit.kernels.x86_64.common import CALLEE_SAVED, LOG2, Frame, Target, build, emit_mask_table
from minijit.kernels.x86_64.vexp import SCRATCH, ExpConsts, emit_exp
from minijit.runtime.kernel import Kernel

__all__ = [
    "ARGS",
    "G_MAX",
    "check_tiles",
    "generate",
    "pack_args",
    "program",
    "scratch_bytes",
    "signature",
]

#: the int64 arguments, in order: the shared ones, then the key-chunk chaining
ARGS = (*spec.ARGS, *spec.CHAIN_ARGS)
OFFSET = {name: 8 * i for i, name in enumerate(ARGS)}
SX_VECTORS_MAX, DEFAULT_G, DEFAULT_SX_VECTORS = (
    spec.SX_VECTORS_MAX,
    spec.DEFAULT_G,
    spec.DEFAULT_SX_VECTORS,
)
signature = spec.signature
#: the most query rows of a tile: up to four register blocks share each K^T and V tile while it is in L1
G_MAX = 24
#: the rows of a register block (AVX2: 6 x 2 vectors of accumulators; AVX-512: 6 x 4)
BLOCK_ROWS = 6

ARG, SCR, J0 = r8, rbx, rbp  # the args array, the scratch base, the key tile's first key
k1, k2 = KReg(1), KReg(2)


def check_tiles(dtype: str, isa: str, g: int | None = None, s_x: int | None = None) -> tuple[int, int]:
    """The validated tile ``(g, s_x)`` for ``dtype`` on ``isa`` (`minijit.kernels.attention.check_tile`)."""
    return spec.check_tile(g, s_x, Target.of(dtype, isa).vl, f"{dtype} {isa}", G_MAX)


def _r64(n: int) -> int:
    return -(-n // 64) * 64


def _layout(t: Target, g: int, s_x: int) -> dict[str, int]:
    """Byte offsets of the fixed part of the scratch: scores/P (g x s_x), m, l, alpha (g each),
    the row sums as vectors (g vectors: lane-wise partial sums, reduced once at the end), then the
    output tile (start of the run-time part)."""
    off = {"p": 0, "m": _r64(g * s_x * t.es)}
    off["l"] = off["m"] + _r64(g * t.es)
    off["alpha"] = off["l"] + _r64(g * t.es)
    off["lv"] = off["alpha"] + _r64(g * t.es)
    off["o"] = off["lv"] + _r64(g * t.vbytes)
    return off


def scratch_bytes(dtype: str, isa: str, E: int, Ev: int, g: int | None = None, s_x: int | None = None) -> int:
    """Bytes of the scratch buffer one call needs (per thread): the fixed part, the output tile
    (g x Ev rounded up to vectors), Q's tile (E x g) and the padded K^T tail (E x s_x)."""
    t = Target.of(dtype, isa)
    g, s_x = check_tiles(dtype, isa, g, s_x)
    nvec = -(-max(0, Ev) // t.vl)
    return _layout(t, g, s_x)["o"] + _r64(g * nvec * t.vbytes) + _r64(max(0, E) * g * t.es) + max(0, E) * s_x * t.es


def pack_args(**values: int) -> np.ndarray:
    """The ``args`` array from keyword values (`minijit.kernels.attention.pack_args` over `ARGS`)."""
    return spec.pack_args(ARGS, **values)


def _arg(name: str):
    return qword(ARG + OFFSET[name])


class FusedAttention:
    """One attention kernel being emitted."""

    def __init__(self, a: Assembler, t: Target, g: int, s_x: int, softmax: bool = True) -> None:
        self.a, self.t, self.g, self.s_x, self.with_softmax = a, t, g, s_x, softmax
        self.nv = s_x // t.vl  # vectors of keys in a tile
        regs = t.vregs
        nregs = len(regs)
        mask = 1 if t.isa == "avx2" else 0
        # the tile's g rows in register blocks of up to BLOCK_ROWS rows, one after another over
        # the same K^T / V vectors (L1-resident after the first block)
        rb = min(g, BLOCK_ROWS)
        self.blocks = [(r0, min(rb, g - r0)) for r0 in range(0, g, rb)]
        self.cv = min(4, (nregs - 1 - mask) // (rb + 1))  # vectors per register block
        self.acc = [[regs[i * self.cv + u] for u in range(self.cv)] for i in range(rb)]
        base = rb * self.cv
        self.vin = regs[base : base + self.cv]  # K or V vectors
        self.bc = regs[base + self.cv]  # the broadcast register
        self.vmask = regs[15] if t.isa == "avx2" else None
        assert base + self.cv + 1 + mask <= nregs
        # softmax: exp chunks (one at a time in ymm0..3 on AVX2: out-of-order execution overlaps the
        # unrolled exps; four in zmm16..31 on AVX-512), reductions in low registers (VEX permutes),
        # the exp's most used constants pinned in 4..7, 10, 11 (the FP load pipes bound it otherwise)
        self.ce = 1 if t.isa == "avx2" else 4
        self.ex = regs[:4] if t.isa == "avx2" else regs[16:32]
        self.a_regs = regs
        self.tmp, self.t2, self.sum, self.mx, self.mk, self.neg = (regs[i] for i in (8, 9, 12, 13, 14, 15))
        top_c = "c6" if t.dtype == "fp32" else "c11"  # Horner's first coefficient
        pin = ("shift", "one", "lo_np", "log2e", "shift_a", top_c)
        self.off = _layout(t, g, s_x)
        self.frame = Frame(list(CALLEE_SAVED))
        names = (
            "q", "kt", "v", "o", "params", "ldq", "ldkt", "ldv", "ldo", "qb", "ktt", "evmask", "nvec",
            "rows", "gr", "diag", "kend", "thr", "nk", "ktp", "ktld", "S", "causal", "sfull", "kttile", "ktcur",
            "bias", "biasrow", "ldb", "lse", "chain",
        )  # fmt: skip
        self.slot = {n: self.frame.slot(n) for n in names}
        self.mask_table: Label = a.new_label("masks")
        self.consts_label: Label = a.new_label("attn_consts")
        self.exp = ExpConsts.new(a, t, dict(zip(pin, (regs[i] for i in (4, 5, 6, 7, 10, 11)), strict=True)))

    # -- helpers -----------------------------------------------------------------------------
    def v(self, name: str):
        return getattr(self.a, self.t.v(name))

    def bcast(self, dst: Vec, mem) -> None:
        getattr(self.a, self.t.s("vbroadcast"))(dst, self.t.smem(mem))

    def smov(self, dst, src) -> None:
        getattr(self.a, self.t.s("vmov"))(dst, src)

    def const(self, dst: Vec, index: int) -> None:
        """Broadcast constant ``index`` of the kernel's table (0: -inf, 1: the lowest finite, 2: 1)."""
        self.bcast(dst, rip + self.consts_label + 8 * index)

    def loop(self, counter, body, name: str) -> None:
        """``while counter > 0: body(); counter -= 1`` (counter a register or slot, set by the
        caller; nothing when it is <= 0)."""
        a = self.a
        top, end = a.new_label(name), a.new_label(name + "_end")
        a.cmp(counter, 0)
        a.jle(end)
        a.bind(top)
        body()
        a.dec(counter)
        a.jnz(top)
        a.bind(end)

    def zero(self, ptr_reg, count_reg, name: str) -> None:
        """``count_reg`` vectors of zeros from ``ptr_reg`` (both clobbered)."""
        a, t = self.a, self.t
        self.v("vxor")(self.tmp, self.tmp, self.tmp)

        def body() -> None:
            self.v("vmovu")(t.vmem(ptr_reg), self.tmp)
            a.add(ptr_reg, t.vbytes)

        self.loop(count_reg, body, name)

    def hreduce(self, op: str, x: Vec, tmp: Vec) -> None:
        """Every lane of ``x`` = ``op`` (vmax/vadd) over its lanes (butterfly)."""
        a, t = self.a, self.t
        f = self.v(op)
        if t.isa == "avx512":
            a.vextractf64x4(tmp.ymm, x, 1)
            f(x.ymm, x.ymm, tmp.ymm)
        a.vperm2f128(tmp.ymm, x.ymm, x.ymm, 1)
        f(x.ymm, x.ymm, tmp.ymm)
        if t.es == 4:
            for sel in (0x4E, 0xB1):
                a.vshufps(tmp.ymm, x.ymm, x.ymm, sel)
                f(x.ymm, x.ymm, tmp.ymm)
        else:
            a.vshufpd(tmp.ymm, x.ymm, x.ymm, 0x5)
            f(x.ymm, x.ymm, tmp.ymm)
        if t.isa == "avx512":
            getattr(a, t.s("vbroadcast"))(x, x.xmm)

    def count_mask(self, count, kreg: KReg, dst: Vec | None) -> None:
        """The lane mask of ``count`` (a register, 0..vl) lanes: ``kreg`` on AVX-512, ``dst`` on
        AVX2 (clobbers rax when it is not ``count``, and rcx)."""
        a, t = self.a, self.t
        a.lea(rcx, ptr(rip + self.mask_table))
        if t.isa == "avx512":
            a.kmovw(kreg, word(rcx + count * 2))
        else:
            if count is not rax:
                a.mov(rax, count)
            a.neg(rax)
            a.add(rax, t.vl)
            a.vmovups(dst, t.vmem(rcx + rax * t.es))

    # -- the kernel --------------------------------------------------------------------------
    def emit(self) -> None:
        a, t, s = self.a, self.t, self.slot
        self.frame.enter(a)
        done = a.new_label("done")
        for reg, name in ((rdi, "q"), (rsi, "kt"), (rdx, "v"), (rcx, "o"), (r9, "params")):
            a.mov(s[name], reg)
        for name in ("ldq", "ldkt", "ldv", "ldo"):
            a.mov(rax, _arg(name))
            a.shl(rax, LOG2[t.es])
            a.mov(s[name], rax)
        for name in ("S", "causal"):
            a.mov(rax, _arg(name))
            a.mov(s[name], rax)
        a.mov(rax, _arg("kt_tile"))  # elements between key tiles of K^T; 0: s_x (plain E x S)
        nonzero = a.new_label("kt_tile")
        a.test(rax, rax)
        a.jnz(nonzero)
        a.mov(rax, self.s_x)
        a.bind(nonzero)
        a.shl(rax, LOG2[t.es])
        a.mov(s["kttile"], rax)
        a.cmp(_arg("L"), 0)
        a.jle(done)
        a.cmp(_arg("Ev"), 0)
        a.jle(done)
        a.mov(SCR, _arg("scratch"))
        # Ev in vectors, the run-time scratch layout, the Ev tail mask
        a.mov(rax, _arg("Ev"))
        a.add(rax, t.vl - 1)
        a.shr(rax, t.vl.bit_length() - 1)
        a.mov(s["nvec"], rax)
        a.imul(rdx, rax, self.g * t.vbytes)  # the output tile's bytes (a multiple of 32)
        a.add(rdx, 63)
        a.and_(rdx, -64)
        a.lea(rdx, ptr(rdx + SCR + self.off["o"]))
        a.mov(s["qb"], rdx)
        a.mov(rcx, _arg("E"))
        a.imul(rcx, rcx, self.g * t.es)
        a.add(rcx, 63)
        a.and_(rcx, -64)
        a.add(rdx, rcx)
        a.mov(s["ktt"], rdx)
        a.shl(rax, t.vl.bit_length() - 1)  # nvec * vl
        a.sub(rax, t.vl)
        a.neg(rax)
        a.add(rax, _arg("Ev"))  # lanes of the last vector: 1..vl
        if t.isa == "avx512":
            self.count_mask(rax, k2, None)
        else:
            a.neg(rax)
            a.add(rax, t.vl)
            a.lea(rcx, ptr(rip + self.mask_table))
            a.lea(rax, ptr(rcx + rax * t.es))
            a.mov(s["evmask"], rax)
        self.kt_tail()
        a.mov(rax, _arg("L"))
        a.mov(s["rows"], rax)
        a.mov(rax, _arg("row0"))
        a.inc(rax)
        a.mov(s["diag"], rax)
        a.mov(rax, _arg("bias"))
        a.mov(s["bias"], rax)
        a.mov(s["biasrow"], rax)
        a.mov(rax, _arg("ldb"))
        a.shl(rax, LOG2[t.es])
        a.mov(s["ldb"], rax)
        for name in ("lse", "chain"):
            a.mov(rax, _arg(name))
            a.mov(s[name], rax)
        top = a.label("qtile")
        self.query_tile()
        a.mov(rax, s["ldq"])
        a.imul(rax, rax, self.g)
        a.add(s["q"], rax)
        a.mov(rax, s["ldo"])
        a.imul(rax, rax, self.g)
        a.add(s["o"], rax)
        a.add(s["diag"], self.g)
        a.mov(rax, s["ldb"])
        a.imul(rax, rax, self.g)
        a.add(s["biasrow"], rax)
        a.add(s["lse"], 2 * self.g * t.es)  # (read only when chain is set, so never at 0)
        a.sub(s["rows"], self.g)
        a.cmp(s["rows"], 0)
        a.jg(top)
        a.bind(done)
        self.frame.leave(a)
        self.data()

    def kt_tail(self) -> None:
        """The last S % s_x columns of K^T, zero-padded to E x s_x in the scratch (``ktt``)."""
        a, t, s = self.a, self.t, self.slot
        a.mov(rax, s["S"])
        a.xor(rdx, rdx)
        a.mov(rcx, self.s_x)
        a.div(rcx)  # full tiles
        a.mov(rsi, rax)
        a.imul(rsi, s["kttile"])
        a.add(rsi, s["kt"])
        a.mov(s["ktcur"], rsi)  # the tail tile's K^T
        a.imul(rax, rax, self.s_x)
        a.mov(s["sfull"], rax)
        skip = a.new_label("no_tail")
        a.cmp(rax, s["S"])
        a.je(skip)
        a.mov(rdi, s["ktt"])
        a.mov(rsi, _arg("E"))
        a.imul(rsi, rsi, self.nv)
        self.zero(rdi, rsi, "ktt_zero")
        # rows: rsi walks K^T from column sfull, rdi the copy; r10 counts rows, r11 columns
        a.mov(rsi, s["ktcur"])
        a.mov(rdi, s["ktt"])
        a.mov(r10, _arg("E"))

        def row() -> None:
            a.mov(r11, s["S"])
            a.sub(r11, s["sfull"])
            a.xor(rax, rax)

            def element() -> None:
                self.smov(self.tmp.xmm, t.smem(rsi + rax * t.es))
                self.smov(t.smem(rdi + rax * t.es), self.tmp.xmm)
                a.inc(rax)

            self.loop(r11, element, "ktt_col")
            a.add(rsi, s["ldkt"])
            a.add(rdi, self.s_x * t.es)

        self.loop(r10, row, "ktt_row")
        a.bind(skip)

    def query_tile(self) -> None:
        a, t, s, g = self.a, self.t, self.slot, self.g
        # rows of this tile: min(g, rows left)
        a.mov(rax, s["rows"])
        a.cmp(rax, g)
        lt = a.new_label("gr")
        a.jle(lt)
        a.mov(rax, g)
        a.bind(lt)
        a.mov(s["gr"], rax)
        # Q^T tile: zero, then rows i < gr: qb[e*g + i] = q[i*ldq + e]
        a.mov(rdi, s["qb"])
        a.mov(rsi, _arg("E"))
        a.imul(rsi, rsi, g * t.es)
        a.add(rsi, t.vbytes - 1)
        a.shr(rsi, t.vbytes.bit_length() - 1)
        self.zero(rdi, rsi, "qb_zero")
        a.mov(r10, s["gr"])
        a.mov(rsi, s["q"])
        a.mov(rdi, s["qb"])

        def qrow() -> None:
            a.mov(r11, _arg("E"))
            a.mov(rax, rsi)
            a.mov(rcx, rdi)

            def element() -> None:
                self.smov(self.tmp.xmm, t.smem(rax))
                self.smov(t.smem(rcx), self.tmp.xmm)
                a.add(rax, t.es)
                a.add(rcx, g * t.es)

            self.loop(r11, element, "q_col")
            a.add(rsi, s["ldq"])
            a.add(rdi, t.es)

        self.loop(r10, qrow, "q_row")
        # m = lowest, l = 0, O = 0
        self.const(self.tmp, 1)
        self.v("vxor")(self.t2, self.t2, self.t2)
        for w in range(-(-g * t.es // t.vbytes)):
            self.v("vmovu")(t.vmem(SCR + self.off["m"] + w * t.vbytes), self.tmp)
            self.v("vmovu")(t.vmem(SCR + self.off["l"] + w * t.vbytes), self.t2)
            # alpha = 0: without the softmax O = P . V of the last tile; with it, the lanes past g
            # (exp'ed with the rows' alpha vector) stay finite
            self.v("vmovu")(t.vmem(SCR + self.off["alpha"] + w * t.vbytes), self.t2)
        for i in range(g):  # the row sums' vectors
            self.v("vmovu")(t.vmem(SCR + self.off["lv"] + i * t.vbytes), self.t2)
        a.lea(rdi, ptr(SCR + self.off["o"]))
        a.mov(rsi, s["nvec"])
        a.imul(rsi, rsi, g)
        self.zero(rdi, rsi, "o_zero")
        self.resume()
        # key range: kend = causal ? min(S, diag - 1 + gr) : S; masking from thr = min(S, diag)
        a.mov(rax, s["S"])
        a.mov(rcx, rax)
        nc = a.new_label("not_causal")
        a.cmp(s["causal"], 0)
        a.je(nc)
        a.mov(rdx, s["diag"])
        a.cmp(rdx, rcx)
        k1_ = a.new_label("thr")
        a.jge(k1_)
        a.mov(rcx, rdx)
        a.bind(k1_)
        a.add(rdx, s["gr"])
        a.dec(rdx)
        k2_ = a.new_label("kend")
        a.cmp(rdx, rax)
        a.jge(k2_)
        a.mov(rax, rdx)
        a.bind(k2_)
        a.bind(nc)
        a.mov(s["kend"], rax)
        a.mov(s["thr"], rcx)
        # key tiles
        a.xor(J0, J0)
        a.mov(rax, s["kt"])
        a.mov(s["ktcur"], rax)
        end = a.new_label("ktiles_end")
        a.cmp(s["kend"], 0)
        a.jle(end)
        top = a.label("ktile")
        self.key_tile()
        a.add(J0, self.s_x)
        a.mov(rax, s["kttile"])
        a.add(s["ktcur"], rax)
        a.cmp(J0, s["kend"])
        a.jl(top)
        a.bind(end)
        self.epilogue()

    def key_tile(self) -> None:
        a, t, s = self.a, self.t, self.slot
        # K^T of the tile: kt + J0 (stride ldkt) when the tile ends inside S, else the padded copy
        tail, go = a.new_label("kt_tail"), a.new_label("kt_go")
        a.lea(rax, ptr(J0 + self.s_x))
        a.cmp(rax, s["S"])
        a.jg(tail)
        a.mov(rax, s["ktcur"])
        a.mov(s["ktp"], rax)
        a.mov(rax, s["ldkt"])
        a.mov(s["ktld"], rax)
        a.jmp(go)
        a.bind(tail)
        a.mov(rax, s["ktt"])
        a.mov(s["ktp"], rax)
        a.mov(s["ktld"], self.s_x * t.es)
        a.bind(go)
        for c0 in range(0, self.nv, self.cv):
            self.scores(c0, min(self.cv, self.nv - c0))
        self.bias()
        if self.with_softmax:  # (without: the bench's measure of the softmax's share)
            masked, after = a.new_label("masked"), a.new_label("softmax_done")
            a.lea(rax, ptr(J0 + self.s_x))
            a.cmp(rax, s["thr"])
            a.jg(masked)
            self.row_max(masked=False)
            a.jmp(after)
            a.bind(masked)
            self.row_max(masked=True)
            a.bind(after)
            self.exp_rows()
        # nk = min(s_x, kend - J0)
        a.mov(rax, s["kend"])
        a.sub(rax, J0)
        small = a.new_label("nk")
        a.cmp(rax, self.s_x)
        a.jle(small)
        a.mov(rax, self.s_x)
        a.bind(small)
        a.mov(s["nk"], rax)
        self.pv()

    def scores(self, c0: int, cv: int) -> None:
        """Score vectors c0..c0+cv of the tile for the g rows -> the scratch rows, one register
        block of rows after another over the same K^T vectors."""
        for r0, rows in self.blocks:
            self.scores_block(c0, cv, r0, rows)

    def scores_block(self, c0: int, cv: int, r0: int, rows: int) -> None:
        """Score vectors c0..c0+cv of the tile's rows r0..r0+rows (one register block)."""
        a, t, s, g = self.a, self.t, self.slot, self.g
        PK, PQ, LD, CNT = rsi, rdi, rdx, rcx
        acc = [row[:cv] for row in self.acc[:rows]]
        for row in acc:
            for x in row:
                self.v("vxor")(x, x, x)
        a.mov(PK, s["ktp"])
        if c0:
            a.add(PK, c0 * t.vbytes)
        a.mov(PQ, s["qb"])
        if r0:
            a.add(PQ, r0 * t.es)
        a.mov(LD, s["ktld"])
        a.mov(CNT, _arg("E"))

        def step() -> None:
            for u in range(cv):
                self.v("vmovu")(self.vin[u], t.vmem(PK + u * t.vbytes))
            for i in range(rows):
                self.bcast(self.bc, PQ + i * t.es)
                for u in range(cv):
                    self.v("vfmadd231")(acc[i][u], self.vin[u], self.bc)
            a.add(PK, LD)
            a.add(PQ, g * t.es)

        self.loop(CNT, step, "e")
        a.mov(rax, s["params"])
        self.bcast(self.bc, rax)
        for i in range(rows):
            row = r0 + i
            for u in range(cv):
                self.v("vmul")(acc[i][u], acc[i][u], self.bc)
                self.v("vmovu")(t.vmem(SCR + self.off["p"] + (row * self.s_x + (c0 + u) * t.vl) * t.es), acc[i][u])

    def bias(self) -> None:
        """Scores += the bias rows of the tile's valid rows (none when ``bias`` is 0): columns at
        stride 1 (vector loads; masked past S) or 0 (one element per row, broadcast)."""
        a, t, s = self.a, self.t, self.slot
        PS, PB, CNT, SL = r10, r11, r12, r13
        skip = a.new_label("no_bias")
        a.cmp(s["bias"], 0)
        a.je(skip)
        a.lea(PS, ptr(SCR + self.off["p"]))
        a.mov(PB, s["biasrow"])
        a.mov(CNT, s["gr"])
        col0, crossing, done = a.new_label("bias_col0"), a.new_label("bias_crossing"), a.new_label("bias_done")
        a.cmp(_arg("ldb_c"), 0)
        a.je(col0)
        a.lea(PB, ptr(PB + J0 * t.es))
        a.lea(rax, ptr(J0 + self.s_x))
        a.cmp(rax, s["S"])
        a.jg(crossing)
        for variant in ("full", "crossing", "col0"):
            if variant == "crossing":
                a.bind(crossing)
                a.mov(SL, s["S"])
                a.sub(SL, J0)
            elif variant == "col0":
                a.bind(col0)

            def row(variant=variant) -> None:
                if variant == "col0":
                    self.bcast(self.t2, PB)
                for u in range(self.nv):
                    mem = t.vmem(PS + u * t.vbytes)
                    src = t.vmem(PB + u * t.vbytes)
                    if variant == "col0":
                        src = self.t2
                    elif variant == "crossing":
                        a.mov(rax, SL)
                        if u:
                            a.sub(rax, u * t.vl)
                        else:
                            a.test(rax, rax)
                        pos, small = a.new_label("bpos"), a.new_label("bsmall")
                        a.jge(pos)
                        a.xor(rax, rax)
                        a.bind(pos)
                        a.cmp(rax, t.vl)
                        a.jle(small)
                        a.mov(rax, t.vl)
                        a.bind(small)
                        self.count_mask(rax, k1, self.mk)
                        if t.isa == "avx512":
                            self.v("vmovu")(self.t2.maskz(k1), src)
                        else:
                            getattr(a, t.v("vmaskmov"))(self.t2, self.mk, src)
                        src = self.t2
                    self.v("vmovu")(self.tmp, mem)
                    self.v("vadd")(self.tmp, self.tmp, src)
                    self.v("vmovu")(mem, self.tmp)
                a.add(PS, self.s_x * t.es)
                a.add(PB, s["ldb"])

            self.loop(CNT, row, f"bias_{variant}")
            a.jmp(done)
        a.bind(done)
        a.bind(skip)

    def row_max(self, masked: bool) -> None:
        """Pass 1 over the g rows of the tile: mask (``masked``), the row max, ``m_new = max(m_old,
        max)``; m = m_new and alpha = m_old - m_new (its exp in `exp_rows`)."""
        a, t, s = self.a, self.t, self.slot
        PS, PM, CNT, DI, SL, STEP = r10, r11, r12, r13, r14, r15
        vmovu = self.v("vmovu")
        a.lea(PS, ptr(SCR + self.off["p"]))
        a.lea(PM, ptr(SCR + self.off["m"]))
        a.mov(CNT, self.g)
        if masked:
            # keys of row i in this tile: min(S, causal ? diag + i : S) - J0
            a.mov(SL, s["S"])
            a.sub(SL, J0)
            a.mov(DI, SL)
            nc = a.new_label("nc")
            a.mov(STEP, s["causal"])
            a.test(STEP, STEP)
            a.jz(nc)
            a.mov(DI, s["diag"])
            a.sub(DI, J0)
            a.bind(nc)
            self.const(self.neg, 0)
        top = a.label("row_masked" if masked else "row")
        if masked:
            a.mov(r9, DI)  # this row's key count, clamped per vector below
            a.cmp(r9, SL)
            le = a.new_label("lim")
            a.jle(le)
            a.mov(r9, SL)
            a.bind(le)
        # the tile max (masking the scores first): a tree of vmax over the row's vectors
        parts, low = [], self.a_regs[:4]  # low registers: the VEX permutes of hreduce
        for u in range(self.nv):
            dst = low[u] if u < 4 else self.tmp
            mem = t.vmem(PS + u * t.vbytes)
            if masked:
                a.mov(rax, r9)
                if u:
                    a.sub(rax, u * t.vl)
                else:
                    a.test(rax, rax)
                pos, small = a.new_label("pos"), a.new_label("small")
                a.jge(pos)
                a.xor(rax, rax)
                a.bind(pos)
                a.cmp(rax, t.vl)
                a.jle(small)
                a.mov(rax, t.vl)
                a.bind(small)
                self.count_mask(rax, k1, self.mk)
                if t.isa == "avx512":
                    vmovu(dst, self.neg)
                    vmovu(dst.mask(k1), mem)
                else:
                    vmovu(dst, mem)
                    getattr(a, t.v("vblendv"))(dst, self.neg, dst, self.mk)
                vmovu(mem, dst)
                if u >= 4:
                    self.v("vmax")(low[u % 4], low[u % 4], dst)
            elif u >= 4:
                self.v("vmax")(low[u % 4], low[u % 4], mem)
            else:
                vmovu(dst, mem)
            if u < 4:
                parts.append(dst)
        while len(parts) > 1:  # pairwise
            half = (len(parts) + 1) // 2
            for k in range(len(parts) - half):
                self.v("vmax")(parts[k], parts[k], parts[half + k])
            parts = parts[:half]
        mx = parts[0]
        self.hreduce("vmax", mx, self.tmp)
        # m_new = max(m_old, max); alpha's argument m_old - m_new
        self.bcast(self.t2, PM)
        self.v("vmax")(mx, mx, self.t2)
        self.v("vsub")(self.t2, self.t2, mx)
        self.smov(t.smem(PM + (self.off["alpha"] - self.off["m"])), self.t2.xmm)
        self.smov(t.smem(PM), mx.xmm)
        a.add(PS, self.s_x * t.es)
        a.add(PM, t.es)
        if masked:
            a.add(DI, STEP)
        a.dec(CNT)
        a.jnz(top)

    def exp_rows(self) -> None:
        """Pass 2: alpha = exp(m_old - m_new) of the g rows at once (vectors of rows), then per
        row p = exp(s - m_new) in place and the row sum's vector ``lv = alpha lv + p`` (lane-wise;
        reduced once, in `epilogue`)."""
        a, t = self.a, self.t
        PS, PM, CNT, PLV = r10, r11, r12, r13
        vmovu = self.v("vmovu")
        self.exp.setup(a)  # the pinned constants (the products use their registers)
        x0 = self.ex[0]
        for w in range(-(-self.g * t.es // t.vbytes)):
            mem = t.vmem(SCR + self.off["alpha"] + w * t.vbytes)
            vmovu(x0, mem)
            emit_exp(a, t, x0, self.ex[1 : 1 + SCRATCH], self.exp, nonpositive=True)
            vmovu(mem, x0)
        a.lea(PS, ptr(SCR + self.off["p"]))
        a.lea(PM, ptr(SCR + self.off["m"]))
        a.lea(PLV, ptr(SCR + self.off["lv"]))
        a.mov(CNT, self.g)
        top = a.label("exp_row")
        self.bcast(self.mx, PM)
        self.v("vxor")(self.sum, self.sum, self.sum)
        for c0 in range(0, self.nv, self.ce):
            n = min(self.ce, self.nv - c0)
            xs = self.ex[:n]
            for u in range(n):
                vmovu(xs[u], t.vmem(PS + (c0 + u) * t.vbytes))
                self.v("vsub")(xs[u], xs[u], self.mx)
            emit_exp(a, t, xs, self.ex[n : n + SCRATCH * n], self.exp, nonpositive=True)
            for u in range(n):
                vmovu(t.vmem(PS + (c0 + u) * t.vbytes), xs[u])
                self.v("vadd")(self.sum, self.sum, xs[u])
        # lv = alpha * lv + sum
        self.bcast(self.tmp, PM + (self.off["alpha"] - self.off["m"]))
        self.v("vfmadd231")(self.sum, self.tmp, t.vmem(PLV))
        vmovu(t.vmem(PLV), self.sum)
        a.add(PS, self.s_x * t.es)
        a.add(PM, t.es)
        a.add(PLV, t.vbytes)
        a.dec(CNT)
        a.jnz(top)

    def pv(self) -> None:
        """O = alpha * O + P . V over the Ev chunks: full chunks of cv vectors, then 1..cv vectors
        with the last masked."""
        a, t, s = self.a, self.t, self.slot
        OBP, REM, EVOFF = r10, r11, r12
        cv = self.cv
        a.lea(OBP, ptr(SCR + self.off["o"]))
        a.mov(REM, _arg("Ev"))
        a.xor(EVOFF, EVOFF)
        a.mov(r13, s["ldv"])
        a.imul(r13, J0)
        a.add(r13, s["v"])  # V at the tile's first key
        top, tail, end = a.new_label("ev"), a.new_label("ev_tail"), a.new_label("ev_done")
        a.bind(top)
        a.cmp(REM, cv * t.vl)
        a.jl(tail)
        self.pv_block(cv, masked=False)
        a.add(OBP, cv * self.g * t.vbytes)
        a.add(EVOFF, cv * t.vbytes)
        a.sub(REM, cv * t.vl)
        a.jmp(top)
        a.bind(tail)
        a.test(REM, REM)
        a.jz(end)
        labels = {v: a.new_label(f"ev_v{v}") for v in range(1, cv + 1)}
        for v, label in labels.items():
            if v < cv:
                a.cmp(REM, v * t.vl)
                a.jle(label)
            else:
                a.jmp(label)
        for v, label in labels.items():
            a.bind(label)
            self.pv_block(v, masked=True)
            a.jmp(end)
        a.bind(end)

    def pv_block(self, nvec: int, masked: bool) -> None:
        """O = alpha * O + P . V for ``nvec`` vectors of Ev (the last masked when ``masked``), one
        register block of rows after another over the same V vectors."""
        a, t, s = self.a, self.t, self.slot
        if masked and self.vmask is not None:
            a.mov(rax, s["evmask"])
            a.vmovups(self.vmask, t.vmem(rax))
        for r0, rows in self.blocks:
            self.pv_rows(nvec, masked, r0, rows)

    def pv_rows(self, nvec: int, masked: bool, r0: int, rows: int) -> None:
        a, t, s, g = self.a, self.t, self.slot, self.g
        OBP, EVOFF = r10, r12
        PV, PP, CNT, LD = rsi, rdi, rcx, rdx
        acc = [row[:nvec] for row in self.acc[:rows]]
        for i in range(rows):
            self.bcast(self.bc, SCR + self.off["alpha"] + (r0 + i) * t.es)
            for u in range(nvec):
                self.v("vmul")(acc[i][u], self.bc, t.vmem(OBP + (u * g + r0 + i) * t.vbytes))
        a.lea(PV, ptr(r13 + EVOFF))
        a.lea(PP, ptr(SCR + self.off["p"] + r0 * self.s_x * t.es))
        a.mov(LD, s["ldv"])
        a.mov(CNT, s["nk"])

        def step() -> None:
            for u in range(nvec):
                mem = t.vmem(PV + u * t.vbytes)
                if masked and u == nvec - 1:
                    if t.isa == "avx512":
                        self.v("vmovu")(self.vin[u].maskz(k2), mem)
                    else:
                        getattr(a, t.v("vmaskmov"))(self.vin[u], self.vmask, mem)
                else:
                    self.v("vmovu")(self.vin[u], mem)
            for i in range(rows):
                self.bcast(self.bc, PP + i * self.s_x * t.es)
                for u in range(nvec):
                    self.v("vfmadd231")(acc[i][u], self.vin[u], self.bc)
            a.add(PV, LD)
            a.add(PP, t.es)

        self.loop(CNT, step, "k")
        for i in range(rows):
            for u in range(nvec):
                self.v("vmovu")(t.vmem(OBP + (u * g + r0 + i) * t.vbytes), acc[i][u])

    def resume(self) -> None:
        """chain bit 0 (resume): the tile's rows continue a previous call's state: m, l from
        ``lse`` (m, l per row) and the unscaled output O from ``o`` (as a keep call left it)."""
        a, t, s, g = self.a, self.t, self.slot, self.g
        x = self.acc[0][0]
        skip = a.new_label("no_resume")
        a.test(s["chain"], 1)
        a.jz(skip)
        if self.vmask is not None:
            a.mov(rax, s["evmask"])
            a.vmovups(self.vmask, t.vmem(rax))
        a.mov(r10, s["gr"])
        a.mov(rsi, s["o"])
        a.lea(rdi, ptr(SCR + self.off["o"]))
        a.mov(r11, s["lse"])
        a.lea(r12, ptr(SCR + self.off["m"]))
        a.lea(r13, ptr(SCR + self.off["lv"]))

        def row() -> None:
            for k in (0, 1):  # m, l
                self.smov(self.tmp.xmm, t.smem(r11 + k * t.es))
                self.smov(t.smem(r12 + k * (self.off["l"] - self.off["m"])), self.tmp.xmm)
            self.v("vmovu")(t.vmem(r13), self.tmp)  # the row sum's vector: (l, 0, ..., 0)
            a.add(r13, t.vbytes)
            a.mov(rax, rsi)
            a.mov(rcx, rdi)
            a.mov(rdx, s["nvec"])
            a.dec(rdx)

            def vector() -> None:
                self.v("vmovu")(x, t.vmem(rax))
                self.v("vmovu")(t.vmem(rcx), x)
                a.add(rax, t.vbytes)
                a.add(rcx, g * t.vbytes)

            self.loop(rdx, vector, "r_vec")
            if t.isa == "avx512":
                self.v("vmovu")(x.maskz(k2), t.vmem(rax))
            else:
                getattr(a, t.v("vmaskmov"))(x, self.vmask, t.vmem(rax))
            self.v("vmovu")(t.vmem(rcx), x)
            a.add(rsi, s["ldo"])
            a.add(rdi, t.vbytes)
            a.add(r11, 2 * t.es)
            a.add(r12, t.es)

        self.loop(r10, row, "r_row")
        a.bind(skip)

    def epilogue(self) -> None:
        """o[i] = O[i] * (1 / l[i]) for the tile's rows; the last vector of each row masked. chain
        bit 1 (keep): o[i] = O[i] unscaled and (m, l) of each row to ``lse``, for a next call to
        resume."""
        a, t, s = self.a, self.t, self.slot
        PO, POB, ROWS, PL, NV = rsi, rdi, r12, r11, rcx
        x = self.acc[0][0]
        if self.with_softmax:
            for i in range(self.g):  # l = the sum of each row's vector
                self.v("vmovu")(x, t.vmem(SCR + self.off["lv"] + i * t.vbytes))
                self.hreduce("vadd", x, self.tmp)
                self.smov(t.smem(SCR + self.off["l"] + i * t.es), x.xmm)
        a.mov(r13, s["o"])
        a.lea(r14, ptr(SCR + self.off["o"]))
        a.lea(PL, ptr(SCR + self.off["l"]))
        a.mov(ROWS, s["gr"])
        if self.vmask is not None:
            a.mov(rax, s["evmask"])
            a.vmovups(self.vmask, t.vmem(rax))

        def row() -> None:
            a.mov(PO, r13)
            a.mov(POB, r14)
            norm, go = a.new_label("norm"), a.new_label("norm_go")
            a.test(s["chain"], 2)
            a.jz(norm)
            self.const(self.bc, 2)  # keep: O * 1, exact
            a.jmp(go)
            a.bind(norm)
            self.bcast(x, PL)  # O * (1 / l): one division a row
            self.const(self.bc, 2)
            self.v("vdiv")(self.bc, self.bc, x)
            a.bind(go)
            a.mov(NV, s["nvec"])
            a.dec(NV)

            def vector() -> None:
                self.v("vmul")(x, self.bc, t.vmem(POB))
                self.v("vmovu")(t.vmem(PO), x)
                a.add(PO, t.vbytes)
                a.add(POB, self.g * t.vbytes)

            self.loop(NV, vector, "o_vec")
            self.v("vmul")(x, self.bc, t.vmem(POB))
            if t.isa == "avx512":
                self.v("vmovu")(t.vmem(PO).mask(k2), x)
            else:
                getattr(a, t.v("vmaskmov"))(t.vmem(PO), self.vmask, x)
            a.add(r13, s["ldo"])
            a.add(r14, t.vbytes)
            a.add(PL, t.es)

        self.loop(ROWS, row, "o_row")
        keep = a.new_label("no_keep")
        a.test(s["chain"], 2)
        a.jz(keep)
        a.mov(r10, s["gr"])
        a.mov(r11, s["lse"])
        a.lea(r15, ptr(SCR + self.off["m"]))

        def state() -> None:
            for k in (0, 1):  # m, l
                self.smov(self.tmp.xmm, t.smem(r15 + k * (self.off["l"] - self.off["m"])))
                self.smov(t.smem(r11 + k * t.es), self.tmp.xmm)
            a.add(r11, 2 * t.es)
            a.add(r15, t.es)

        self.loop(r10, state, "lse_row")
        a.bind(keep)

    def data(self) -> None:
        a, t = self.a, self.t
        if t.isa == "avx512":
            a.bind(self.mask_table)
            a.db(b"".join(((1 << c) - 1).to_bytes(2, "little") for c in range(17)))
        else:
            emit_mask_table(a, self.mask_table)
        a.bind(self.consts_label)
        fmt = "<f" if t.es == 4 else "<d"
        lowest = float(np.finfo(np.float32 if t.es == 4 else np.float64).min)
        for value in (float("-inf"), lowest, 1.0):
            a.db(struct.pack(fmt, value).ljust(8, b"\0"))
        self.exp.emit_data(a)


def program(
    dtype: str,
    isa: str,
    g: int | None = None,
    s_x: int | None = None,
    softmax: bool = True,
    epilogue: Epilogue | str | None = Epilogue.ONLINE_SOFTMAX,
) -> Assembler:
    """The assembled attention kernel for ``dtype`` ("fp32", "fp64"), ``isa`` ("avx2", "avx512")
    and the tile (`check_tiles`). The epilogue of the first product is ``epilogue``: the online
    softmax (`Epilogue.ONLINE_SOFTMAX`), or `Epilogue.NONE` (as ``softmax=False``), which leaves
    the softmax stage (mask, max, exp, sum) out: the two products and their fills only, wrong
    results; `minijit bench attention` times it to measure the softmax's share of the kernel's time
    (`minijit.kernels.epilogue.attention_softmax`)."""
    t = Target.of(dtype, isa)
    g, s_x = check_tiles(dtype, isa, g, s_x)
    softmax = attention_softmax(epilogue, softmax)
    a = Assembler(name="attention")
    FusedAttention(a, t, g, s_x, softmax).emit()
    return a


def generate(
    dtype: str,
    isa: str,
    g: int | None = None,
    s_x: int | None = None,
    softmax: bool = True,
    epilogue: Epilogue | str | None = Epilogue.ONLINE_SOFTMAX,
) -> Kernel:
    """The fused attention kernel (see the module docstring; ``softmax``, ``epilogue`` as in `program`)."""
    t = Target.of(dtype, isa)
    g, s_x = check_tiles(dtype, isa, g, s_x)
    softmax = attention_softmax(epilogue, softmax)
    name = spec.kernel_name(dtype, isa, g, s_x, softmax)
    return build(program(dtype, isa, g, s_x, softmax), signature(t.ctype), name)
