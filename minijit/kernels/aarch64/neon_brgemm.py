"""NEON batch-reduce GEMM: C += sum over br of A_br B_br (column-major, strides in elements).

    void f(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc,
           int64_t br_stride_a, int64_t br_stride_b)

A is M x K (``a[m + k*lda]``, or ``a[k + m*lda]`` with ``trans_a``), B is K x N
(``b[k + n*ldb]``, or ``b[n + k*ldb]`` with ``trans_b``), C is M x N
(``c[m + n*ldc]``); A_br starts ``br*br_stride_a`` elements after ``a``.

Blocking (fp32; fp64 halves the rows): C is swept in 16 x 4 register blocks
(16 accumulators), A columns are loaded as 4 q registers per k, and every B
column gives one q register holding 4 consecutive k, consumed by ``fmla`` by
element, so the K loop is unrolled by the vector length (4 fp32 / 2 fp64) and
issues 64 FMAs per 20 loads. Rows left over (M % 16) run as smaller blocks of
q/d/s "pieces" (4, 2, 1 rows), columns left over (N % 4) as narrower blocks,
K % 4 as single steps with scalar B loads. Nothing outside the matrices is
read or written.

``trans_b`` loads rows of B (contiguous in n) instead; ``trans_a`` loads rows
of A (contiguous in k) and transposes 4 x 4 (2 x 2) tiles with ``trn1``/``trn2``
into columns, one tile of rows per block (simpler, slower).

``trans_c`` (C row-major, ``c[n + m*ldc]``, as the x86-64 generator) is
computed in the transposed orientation: Cᵀ = Bᵀ·Aᵀ is the column-major
kernel for (n, m, trans_a = not trans_b, trans_b = not trans_a) with a and b
(lda/ldb, the br strides) swapped in its first instructions. With ``trans_b``
that is the fast ``trans_b`` path; without, the tile-transposing ``trans_a``
path. ``block`` then names the block of that swapped kernel.

`generate` (not `program`) hands one column (n = 1, no explicit ``block``) to the GEMV kernel
`minijit.kernels.aarch64.neon_gemv` (every transpose and stride), emulated at the same ``sve_vl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from asm.aarch64 import Assembler, X, mem, post
from asm.aarch64.registers import VecReg, VElem
from minijit.kernels.aarch64.common import (
    DType,
    brgemm_signature,
    check_bools,
    check_positive,
    dtype_info,
    epilogue,
    generator,
    prologue,
)
from minijit.kernels.aarch64.gemv import Neon as neon_gemv
from minijit.kernels.aarch64.pieces import Piece, ldst_pieces, piece_reg, split

__all__ = ["BLOCK", "Piece", "generate", "ldst_pieces", "program", "signature", "split"]

# -- blocking decisions -----------------------------------------------------------
BLOCK = {"fp32": (16, 4), "fp64": (8, 4)}  # default register block (rows, columns) of C
MAX_BR_SIZE = 1 << 20

# -- registers ----------------------------------------------------------------------
A, B, C, LDA, LDB, LDC, BR_A, BR_B = X[0:8]  # arguments (strides -> bytes)
N_CNT, M_CNT, BR_CNT, K_CNT = X[8:12]  # loop counters
A_M, C_M, A_BR, B_BR, XA, XT = X[12:18]  # block / br / walking pointers
B_COL = tuple(X[19:27])  # B column pointers (or B_COL[0]: B row pointer)
B_STEP = X[27]  # bytes from one N block of B to the next
ROW_OFF = tuple(X[24:27])  # trans_a: byte offsets of rows 1..3 of an A tile (blocks have <= 4 columns)


signature = brgemm_signature


def _fma(a: Assembler, t: DType, acc: int, src: int, width: int, elem: VElem) -> None:
    """acc += src * elem on ``width`` lanes (scalar form for one lane)."""
    if width == 1:
        a.fmla(t.scalar(acc), t.scalar(src), elem)
    else:
        a.fmla(t.vec(acc, width), t.vec(src, width), elem)


def _interleave(fmas: list[Callable[[], None]], loads: list[Callable[[], None]]) -> None:
    """Emit ``fmas`` with ``loads`` spread evenly between them (first load after the first FMA)."""
    if not loads:
        for f in fmas:
            f()
        return
    every = max(1, len(fmas) // len(loads))
    for i, f in enumerate(fmas):
        f()
        if i % every == 0 and loads:
            loads.pop(0)()
    for ld in loads:
        ld()


@dataclass
class _Kernel:
    """Emits one BRGEMM kernel; blocking decisions are fields, loops are methods."""

    t: DType
    m: int
    n: int
    k: int
    br_size: int
    trans_a: bool
    trans_b: bool
    mb: int  # rows per register block
    nb: int  # columns per register block
    swap: bool = False  # trans_c: Cᵀ = Bᵀ·Aᵀ, the caller's a/b arguments swapped on entry

    def __post_init__(self) -> None:
        t = self.t
        self.lanes = t.lanes
        self.unroll = t.lanes  # k per B q register (normal B) or per A tile (trans_a)
        # vector register map: B first, then two A sets, then accumulators
        self.max_pieces = 1 if self.trans_a else self.mb // t.lanes
        widest = max(len(split(c, t.lanes, 99)[0]) for c in range(1, self.nb + 1))  # B row pieces
        nb_regs = self.unroll * widest if self.trans_b else self.nb
        self.vb = 0
        self.va = nb_regs
        a_regs = 2 * self.lanes if self.trans_a else 2 * self.max_pieces
        self.vc = self.va + a_regs
        if self.vc + self.max_pieces * self.nb > 32:
            raise ValueError(f"block {self.mb}x{self.nb} needs more than 32 vector registers")

    # -- operand providers ---------------------------------------------------------
    def _b_loads(self, a: Assembler, cols: int, steps: int) -> Callable[[int, int], VElem]:
        """Load B for ``steps`` k of ``cols`` columns; returns (kk, j) -> element register."""
        t = self.t
        if not self.trans_b:  # column j: `steps` consecutive k in one register
            for j in range(cols):
                reg = piece_reg(t, self.vb + j, steps) if steps > 1 else t.scalar(self.vb + j)
                a.ldr(reg, post(B_COL[j], steps * t.size))
            return lambda kk, j: VElem(self.vb + j, t.es, kk)
        pieces = split(cols, self.lanes, 99)[0]  # row kk of B: pieces of columns
        regs = {}
        for kk in range(steps):
            idx = [self.vb + kk * len(pieces) + i for i in range(len(pieces))]
            ldst_pieces(a, t, False, idx, pieces, B_COL[0])
            a.add(B_COL[0], B_COL[0], LDB)
            for i, p in enumerate(pieces):
                for j in range(p.off, p.off + p.width):
                    regs[kk, j] = VElem(idx[i], t.es, j - p.off)
        return lambda kk, j: regs[kk, j]

    def _a_columns(self, a: Assembler, pieces: list[Piece], steps: int) -> list[Callable[[], None]]:
        """trans_a: load the tile rows (k contiguous), transpose; A column kk ends in v(va + kk)."""
        t, rows, base = self.t, pieces[0].width, self.va
        tmp = self.va + self.lanes
        for r in range(rows):
            reg = piece_reg(t, base + r, steps) if steps > 1 else t.scalar(base + r)
            a.ldr(reg, mem(XA) if r == 0 else mem(XA, ROW_OFF[r - 1]))
        a.add(XA, XA, steps * t.size)
        v = [VecReg(base + i, t.es, t.lanes) for i in range(self.lanes)]
        w = [VecReg(tmp + i, t.es, t.lanes) for i in range(self.lanes)]
        if t.lanes == 2:  # 2 x 2: rows r0, r1 -> columns k0, k1
            a.trn1(w[0], v[0], v[1])
            a.trn2(w[1], v[0], v[1])
            return [w[0], w[1]]
        a.trn1(w[0], v[0], v[1])  # [r0k0 r1k0 r0k2 r1k2]
        a.trn2(w[1], v[0], v[1])  # [r0k1 r1k1 r0k3 r1k3]
        a.trn1(w[2], v[2], v[3])
        a.trn2(w[3], v[2], v[3])
        d = [VecReg(r.idx, "d", 2) for r in w]
        out = [VecReg(base + i, "d", 2) for i in range(4)]
        a.trn1(out[0], d[0], d[2])  # k0
        a.trn1(out[1], d[1], d[3])  # k1
        a.trn2(out[2], d[0], d[2])  # k2
        a.trn2(out[3], d[1], d[3])  # k3
        return [VecReg(base + i, t.es, t.lanes) for i in range(4)]

    # -- K steps ---------------------------------------------------------------------
    def k_group(self, a: Assembler, pieces: list[Piece], cols: int, steps: int) -> None:
        """``steps`` k (1 or the unroll): B loads, then per k the A loads interleaved with the FMAs."""
        t = self.t
        elem = self._b_loads(a, cols, steps)
        acc = {(i, j): self.vc + j * len(pieces) + i for i in range(len(pieces)) for j in range(cols)}
        if self.trans_a:
            cols_a = self._a_columns(a, pieces, steps)
            for kk in range(steps):
                for j in range(cols):
                    _fma(a, t, acc[0, j], cols_a[kk].idx, pieces[0].width, elem(kk, j))
            return
        nset = len(pieces)

        def a_loads(kk: int) -> list[Callable[[], None]]:
            regs = [self.va + (kk % 2) * self.max_pieces + i for i in range(nset)]
            ops: list[Callable[[], None]] = []
            i = 0
            while i < nset:  # one op per ldr/ldp, then the pointer bump
                pair = i + 1 < nset and pieces[i + 1].width == pieces[i].width
                sub = pieces[i : i + 2] if pair else pieces[i : i + 1]
                ops.append(partial(ldst_pieces, a, t, False, regs[i : i + len(sub)], sub, XA))
                i += len(sub)
            ops.append(partial(a.add, XA, XA, LDA))
            return ops

        for op in a_loads(0):
            op()
        for kk in range(steps):
            src = [self.va + (kk % 2) * self.max_pieces + i for i in range(nset)]
            fmas = [
                partial(_fma, a, t, acc[i, j], src[i], pieces[i].width, elem(kk, j))
                for j in range(cols)
                for i in range(nset)
            ]
            _interleave(fmas, a_loads(kk + 1) if kk + 1 < steps else [])

    def k_loop(self, a: Assembler, pieces: list[Piece], cols: int) -> None:
        """All K: a counted loop of unrolled groups, then single steps."""
        loops, rest = divmod(self.k, self.unroll)
        if loops > 1:
            a.mov(K_CNT, loops)
            top = a.label("k")
            self.k_group(a, pieces, cols, self.unroll)
            a.subs(K_CNT, K_CNT, 1)
            a.b_ne(top)
        elif loops == 1:
            self.k_group(a, pieces, cols, self.unroll)
        for _ in range(rest):
            self.k_group(a, pieces, cols, 1)

    # -- one register block of C -------------------------------------------------------
    def block(self, a: Assembler, pieces: list[Piece], cols: int) -> None:
        """C[A_M rows, cols] += sum_br A_br B_br for one block at C_M / A_M / B (column block)."""
        t = self.t
        acc = lambda j: [self.vc + j * len(pieces) + i for i in range(len(pieces))]  # noqa: E731
        a.mov(XT, C_M)  # load the C block, column by column
        for j in range(cols):
            ldst_pieces(a, t, False, acc(j), pieces, XT)
            if j + 1 < cols:
                a.add(XT, XT, LDC)
        if self.br_size > 1:
            a.mov(A_BR, A_M)
            a.mov(B_BR, B)
            a.mov(BR_CNT, self.br_size)
            top = a.label("br")
        a_src, b_src = (A_BR, B_BR) if self.br_size > 1 else (A_M, B)
        a.mov(XA, a_src)  # A at (row block, k = 0) of this br
        a.mov(B_COL[0], b_src)
        if not self.trans_b:
            for j in range(1, cols):
                a.add(B_COL[j], B_COL[j - 1], LDB)
        self.k_loop(a, pieces, cols)
        if self.br_size > 1:
            a.add(A_BR, A_BR, BR_A)
            a.add(B_BR, B_BR, BR_B)
            a.subs(BR_CNT, BR_CNT, 1)
            a.b_ne(top)
        a.mov(XT, C_M)  # store the C block
        for j in range(cols):
            ldst_pieces(a, t, True, acc(j), pieces, XT)
            if j + 1 < cols:
                a.add(XT, XT, LDC)

    def m_sweep(self, a: Assembler, cols: int) -> None:
        """All rows for one column block: a loop over full row blocks, then the remainder blocks."""
        full, rest = divmod(self.m, self.mb)
        a.mov(A_M, A)
        a.mov(C_M, C)
        blocks = split(self.mb, self.lanes, self.max_pieces)
        if full > 1:
            a.mov(M_CNT, full)
            top = a.label("m")
        for _ in range(1 if full > 1 else full):
            for pieces in blocks:
                self._block_at(a, pieces, cols)
        if full > 1:
            a.subs(M_CNT, M_CNT, 1)
            a.b_ne(top)
        for pieces in split(rest, self.lanes, self.max_pieces):
            self._block_at(a, pieces, cols)

    def _block_at(self, a: Assembler, pieces: list[Piece], cols: int) -> None:
        """Run `block` for ``pieces`` at the current A_M/C_M, then step both past its rows."""
        rows = sum(p.width for p in pieces)
        pieces = [Piece(p.off - pieces[0].off, p.width) for p in pieces]
        self.block(a, pieces, cols)
        a.add(C_M, C_M, rows * self.t.size)
        if self.trans_a:  # next tile of rows: rows * lda bytes
            a.mov(XT, rows)
            a.madd(A_M, XT, LDA, A_M)
        else:
            a.add(A_M, A_M, rows * self.t.size)

    def emit(self) -> Assembler:
        """The whole kernel: prologue, N sweep (full column blocks, then the rest), epilogue."""
        t, a = self.t, Assembler(name="neon_brgemm")
        xregs = [r.idx for r in (*B_COL[: self.nb], B_STEP, *(ROW_OFF if self.trans_a else ()))]
        frame = prologue(a, xregs, range(self.vc + self.max_pieces * self.nb))
        if self.swap:  # trans_c: the caller's b is this kernel's A (and a its B)
            for x, y in ((A, B), (LDA, LDB), (BR_A, BR_B)):
                a.mov(XT, x)
                a.mov(x, y)
                a.mov(y, XT)
        for r in (LDA, LDB, LDC, BR_A, BR_B):  # element strides -> bytes
            a.lsl(r, r, t.shift)
        if self.trans_a:  # row offsets 1..lanes-1 of an A tile
            a.mov(ROW_OFF[0], LDA)
            for i in range(1, self.lanes - 1):
                a.add(ROW_OFF[i], ROW_OFF[i - 1], LDA)
        full, rest = divmod(self.n, self.nb)
        b_step = self.nb * t.size if self.trans_b else None
        if b_step is None:
            a.mov(XT, self.nb)
            a.mul(B_STEP, XT, LDB)
        if full > 1:
            a.mov(N_CNT, full)
            top = a.label("n")
        for _ in range(1 if full > 1 else full):
            self.m_sweep(a, self.nb)
            self._next_columns(a, self.nb)
        if full > 1:
            a.subs(N_CNT, N_CNT, 1)
            a.b_ne(top)
        if rest:  # the last, narrower column block
            self.m_sweep(a, rest)
        epilogue(a, frame)
        return a

    def _next_columns(self, a: Assembler, cols: int) -> None:
        """Advance B and C by ``cols`` columns."""
        t = self.t
        if self.trans_b:
            a.add(B, B, cols * t.size)
        elif cols == self.nb:
            a.add(B, B, B_STEP)
        else:
            a.mov(XT, cols)
            a.madd(B, XT, LDB, B)
        a.mov(XT, cols)
        a.madd(C, XT, LDC, C)


def _check(m: int, n: int, k: int, br_size: int, trans_a: bool, trans_b: bool, trans_c: bool, dtype: str) -> DType:
    check_positive(m=m, n=n, k=k)
    check_positive(MAX_BR_SIZE, br_size=br_size)
    t = dtype_info(dtype)
    check_bools(trans_a=trans_a, trans_b=trans_b, trans_c=trans_c)
    return t


def program(
    m: int,
    n: int,
    k: int,
    br_size: int = 1,
    trans_a: bool = False,
    trans_b: bool = False,
    trans_c: bool = False,
    dtype: str = "fp32",
    block: tuple[int, int] | None = None,
) -> tuple[Assembler, str]:
    """The kernel's `Assembler` and the listing of its innermost K-loop body (one unrolled group)."""
    t = _check(m, n, k, br_size, trans_a, trans_b, trans_c, dtype)
    if trans_c:  # Cᵀ = Bᵀ·Aᵀ: the column-major kernel of the transposed problem
        m, n, trans_a, trans_b = n, m, not trans_b, not trans_a
    mb, nb = block or ((t.lanes, 4) if trans_a else BLOCK[dtype])
    if mb % t.lanes or not 1 <= nb <= len(B_COL) or mb < t.lanes:
        raise ValueError(f"block must be (rows: a multiple of {t.lanes}, columns: 1..{len(B_COL)}), got {block}")
    if trans_a and (mb != t.lanes or nb > 4):
        raise ValueError(f"block must be ({t.lanes}, 1..4) with trans_a, got {block}")
    kern = _Kernel(t, m, n, k, br_size, trans_a, trans_b, mb, nb, swap=trans_c)
    a = kern.emit()
    body = Assembler(name="kloop")
    pieces = split(mb, t.lanes, kern.max_pieces)[0]
    kern.k_group(body, pieces, nb, kern.unroll)
    return a, body.listing()


def _name(m: int, n: int, k: int, br_size: int, dtype: str, **kw: Any) -> str:
    flags = "".join(f"_{f[0]}{f[-1]}" for f in ("trans_a", "trans_b", "trans_c") if kw.get(f))
    return f"neon_brgemm_{m}x{n}x{k}_br{br_size}_{dtype}{flags}"


_generate = generator(
    program,
    signature,
    "JIT a BRGEMM kernel; returns the callable from `minijit.runtime.load`.",
    _name,
    sve_vl_before="block",
)


def generate(*args: Any, **kwargs: Any) -> Any:
    """JIT a BRGEMM kernel; returns the callable from `minijit.runtime.load`. One column (n = 1,
    no explicit ``block``) runs `neon_gemv`'s kernel (any transposes)."""
    bound = _generate.__signature__.bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    _check(p["m"], p["n"], p["k"], p["br_size"], p["trans_a"], p["trans_b"], p["trans_c"], p["dtype"])
    if p["n"] == 1 and p["block"] is None:
        flags = (p["trans_a"], p["trans_b"], p["trans_c"])
        return neon_gemv.generate(p["m"], p["k"], p["br_size"], *flags, p["dtype"], sve_vl=p["sve_vl"])
    return _generate(*args, **kwargs)


generate.__signature__ = _generate.__signature__  # type: ignore[attr-defined]
