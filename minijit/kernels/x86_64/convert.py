"""x86-64 fp16 <-> fp32 conversion kernels (F16C on avx2, AVX-512F on avx512).

``generate(src, dst, isa)`` returns the Kernel ``void(const void* src, void* dst, int64_t n)``:
``dst[i] = convert(src[i])`` for ``0 <= i < n`` (nothing for ``n <= 0``); ``src`` and ``dst`` are
contiguous runs of ``n`` elements (fp16: 2 bytes, fp32: 4 bytes) that do not overlap.

* ``("fp16", "fp32")``: ``vcvtph2ps``, exact (every fp16 is an fp32; quiet NaNs keep sign and payload);
* ``("fp32", "fp16")``: ``vcvtps2ph`` with imm8 0: round to nearest even whatever MXCSR.RC says,
  overflow to +-inf, results below the fp16 normal range rounded to fp16 subnormals (no flush).

Layout of the code: four vectors per loop trip, then single vectors, then the tail. avx2 tail:
one 4-element xmm step, then element by element (``vpinsrw``/``vpextrw`` move one fp16 word, so
nothing past element ``n - 1`` is read or written). avx512 tail: one step under the opmask ``k1``
(masked-off lanes are neither read nor written).
"""

from __future__ import annotations

from asm.x86_64 import Assembler, dword, qword, word, xmmword, ymmword, zmmword
from asm.x86_64.registers import XMM, YMM, ZMM, cl, eax, ecx, edx, k1, rdi, rdx, rsi
from minijit.kernels.x86_64.common import ISAS, build, check_choice
from minijit.runtime.kernel import Kernel

__all__ = ["DIRECTIONS", "SIGNATURE", "generate"]

#: (source dtype, destination dtype) pairs
DIRECTIONS = (("fp16", "fp32"), ("fp32", "fp16"))
SIGNATURE = "void(const void* src, void* dst, int64_t n)"
UNROLL = 4
_BYTES = {"fp16": 2, "fp32": 4}


def generate(src: str = "fp16", dst: str = "fp32", isa: str = "avx2") -> Kernel:
    """The conversion kernel (see the module docstring). Bad arguments raise ValueError."""
    if (src, dst) not in DIRECTIONS:
        raise ValueError(f"(src, dst) must be one of {DIRECTIONS}, got {(src, dst)!r}")
    isa = check_choice("isa", isa, ISAS)
    a = Assembler(name="convert")
    widen = src == "fp16"
    vl = 16 if isa == "avx512" else 8  # fp32 lanes per vector
    regs = (ZMM if isa == "avx512" else YMM)[:UNROLL]
    sb, db = _BYTES[src], _BYTES[dst]

    def step(addr_s, addr_d, reg) -> None:
        """One full vector: ``vl`` elements from ``addr_s`` to ``addr_d``."""
        if widen:
            a.vcvtph2ps(reg, _half(isa, addr_s))
            a.vmovups(_full(isa, addr_d), reg)
        else:
            a.vmovups(reg, _full(isa, addr_s))
            a.vcvtps2ph(_half(isa, addr_d), reg, 0)

    four, one_loop, tail, done = a.new_label("four"), a.new_label("one"), a.new_label("tail"), a.new_label("done")
    # four vectors a trip
    a.cmp(rdx, UNROLL * vl)
    a.jl(one_loop)
    a.bind(four)
    for u in range(UNROLL):
        step(rdi + u * vl * sb, rsi + u * vl * db, regs[u])
    a.add(rdi, UNROLL * vl * sb)
    a.add(rsi, UNROLL * vl * db)
    a.sub(rdx, UNROLL * vl)
    a.cmp(rdx, UNROLL * vl)
    a.jge(four)
    # single vectors
    a.bind(one_loop)
    a.cmp(rdx, vl)
    a.jl(tail)
    one = a.label("one_top")
    step(rdi, rsi, regs[0])
    a.add(rdi, vl * sb)
    a.add(rsi, vl * db)
    a.sub(rdx, vl)
    a.cmp(rdx, vl)
    a.jge(one)
    # the tail: 0 <= rdx < vl elements
    a.bind(tail)
    a.test(rdx, rdx)
    a.jle(done)
    if isa == "avx512":
        _masked_tail(a, widen)
    else:
        _avx2_tail(a, widen, sb, db, done)
    a.bind(done)
    a.vzeroupper()
    a.ret()
    return build(a, SIGNATURE, f"convert_{src}_{dst}_{isa}")


def _half(isa: str, addr):
    """The fp16 side of one vector: 16 (avx2) or 32 (avx512) bytes."""
    return ymmword(addr) if isa == "avx512" else xmmword(addr)


def _full(isa: str, addr):
    """The fp32 side of one vector."""
    return zmmword(addr) if isa == "avx512" else ymmword(addr)


def _masked_tail(a: Assembler, widen: bool) -> None:
    """avx512: the last rdx (1..15) elements under k1 = (1 << rdx) - 1."""
    a.mov(ecx, edx)
    a.mov(eax, 1)
    a.shl(eax, cl)
    a.dec(eax)
    a.kmovw(k1, eax)
    x = ZMM[0]
    if widen:
        a.vcvtph2ps(x.maskz(k1), ymmword(rdi))
        a.vmovups(zmmword(rsi).mask(k1), x)
    else:
        a.vmovups(x.maskz(k1), zmmword(rdi))
        a.vcvtps2ph(ymmword(rsi).mask(k1), x, 0)


def _avx2_tail(a: Assembler, widen: bool, sb: int, db: int, done) -> None:
    """avx2: one 4-element xmm step if rdx >= 4, then the last 0..3 elements one at a time."""
    x = XMM[0]
    singles = a.new_label("singles")
    a.cmp(rdx, 4)
    a.jl(singles)
    if widen:
        a.vcvtph2ps(x, qword(rdi))
        a.vmovups(xmmword(rsi), x)
    else:
        a.vmovups(x, xmmword(rdi))
        a.vcvtps2ph(qword(rsi), x, 0)
    a.add(rdi, 4 * sb)
    a.add(rsi, 4 * db)
    a.sub(rdx, 4)
    a.jz(done)
    a.bind(singles)  # 1..3 elements
    top = a.label("single")
    if widen:
        a.vpinsrw(x, x, word(rdi), 0)
        a.vcvtph2ps(x, x)
        a.vmovss(dword(rsi), x)
    else:
        a.vmovss(x, dword(rdi))
        a.vcvtps2ph(x, x, 0)
        a.vpextrw(word(rsi), x, 0)
    a.add(rdi, sb)
    a.add(rsi, db)
    a.dec(rdx)
    a.jnz(top)
