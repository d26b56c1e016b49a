"""The multiply-add of one x86-64 BRGEMM register block per dtype x ISA (`brgemm_vector.Block`):
which registers a block needs beside its accumulators and A vectors, and the instructions of one
K row's column ``j``. Integers wrap (two's complement, as numpy's integer einsum):

* fp32 / fp64: a broadcast of B (or an EVEX ``{1toN}`` operand) and ``vfmadd231``;
* s32, AVX2: B broadcast per row vector into the one B register, ``vpmulld b, a, b`` then
  ``vpaddd`` (the product overwrites the broadcast: no scratch register, the float blocks' sizes);
* s32 / s64, AVX-512: ``vpmulld`` / ``vpmullq`` (AVX512DQ) into a scratch register from the
  broadcast (or ``{1toN}``), then ``vpaddd`` / ``vpaddq``;
* s64, AVX2 (no 64-bit multiply): ``a*b mod 2^64 = lo(a)lo(b) + ((lo(a)hi(b) + hi(a)lo(b)) mod
  2^32) << 32``. Each output vector keeps two accumulators: ``vpmuludq`` adds lo(a)lo(b) to the
  first (``vpaddq``), ``vpmulld`` of A with the dword-swapped B (``vpshufd 0xB1``) gives both cross
  products in the dword lanes, added lane by lane (``vpaddd``, mod 2^32) to the second. The store
  folds them once per block: ``acc + (x << 32) + ((x >> 32) << 32)`` (`finish`).
"""

from __future__ import annotations

from typing import Any

from asm.x86_64 import Assembler, Mem, Vec
from minijit.kernels.x86_64.common import Target

__all__ = ["MulAdd"]


class MulAdd:
    """The multiply-add of ``t`` (`Target`: dtype x ISA) in a block of ``mv`` vectors of M."""

    def __init__(self, a: Assembler, t: Target, mv: int) -> None:
        self.a, self.t, self.mv = a, t, mv
        self.split64 = t.dtype == "s64" and t.isa == "avx2"  # two accumulators per output vector
        if self.split64 and mv != 1:
            raise ValueError(f"int64 AVX2 blocks hold one vector of M, got {mv}")
        #: accumulators per output vector
        self.chains = 2 if self.split64 else 1
        #: B registers (broadcast) and scratch registers after the A vectors
        self.n_b = 2 if t.isa == "avx512" or self.split64 else 1
        self.n_scratch = 1 if t.is_int and t.isa == "avx512" else 0
        if t.is_int:
            self.add = getattr(a, "vpaddd" if t.es == 4 else "vpaddq")
            self.mul = getattr(a, "vpmulld" if t.es == 4 else "vpmullq")
            self.broadcast = a.vpbroadcastd if t.es == 4 else a.vpbroadcastq
        else:
            self.fmadd = getattr(a, t.v("vfmadd231"))
            self.broadcast = a.vbroadcastss if t.es == 4 else a.vbroadcastsd

    def column(self, acc: list[Any], cross: list[Any] | None, av: list[Vec], b: Mem, bcst_b: Mem | None, regs) -> None:
        """Column ``j`` of one K row: ``acc[i] += av[i] * B`` for every row vector ``i`` (``cross``:
        the second accumulators of `split64`). ``b``: B's element as a scalar memory operand,
        ``bcst_b``: as an EVEX ``{1toN}`` operand (None: broadcast into a register); ``regs``:
        (B registers, scratch registers) for this column."""
        a, bc, scratch = self.a, regs[0], regs[1]
        if not self.t.is_int:
            if bcst_b is not None:
                self.fmadd(acc[0], av[0], bcst_b)
                return
            self.broadcast(bc[0], b)
            for i in range(self.mv):
                self.fmadd(acc[i], av[i], bc[0])
            return
        if self.split64:  # lo*lo into acc, both cross products (dword lanes) into cross
            lo, swapped = bc
            a.vpbroadcastq(lo, b)
            a.vpshufd(swapped, lo, 0xB1)
            a.vpmuludq(lo, av[0], lo)
            a.vpaddq(acc[0], acc[0], lo)
            a.vpmulld(swapped, av[0], swapped)
            a.vpaddd(cross[0], cross[0], swapped)
            return
        if self.t.isa == "avx2":  # the product overwrites the broadcast, one per row vector
            for i in range(self.mv):
                self.broadcast(bc[0], b)
                self.mul(bc[0], av[i], bc[0])
                self.add(acc[i], acc[i], bc[0])
            return
        src = bcst_b
        if src is None:
            self.broadcast(bc[0], b)
            src = bc[0]
        for i in range(self.mv):
            self.mul(scratch[0], av[i], src)
            self.add(acc[i], acc[i], scratch[0])

    def start(self, cross: list[Any]) -> None:
        """The second accumulators start at zero (`split64`; C goes to the first)."""
        for x in cross:
            self.a.vpxor(x, x, x)

    def finish(self, acc: Any, cross: Any, tmp: Vec) -> None:
        """``acc += (cross << 32) + ((cross >> 32) << 32)`` (`split64`): the two dword lanes of the
        cross products, each summed mod 2^32, into the high half; ``cross`` is clobbered."""
        a = self.a
        a.vpsllq(tmp, cross, 32)
        a.vpaddq(acc, acc, tmp)
        a.vpsrlq(cross, cross, 32)
        a.vpsllq(cross, cross, 32)
        a.vpaddq(acc, acc, cross)
