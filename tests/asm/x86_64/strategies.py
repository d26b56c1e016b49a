"""Hypothesis strategies for x86-64 operands over their full legal ranges."""

from __future__ import annotations

from hypothesis import strategies as st

from asm.x86_64.memory import Addr, Mem
from asm.x86_64.registers import GPR32, GPR64, KREGS, Vec

INT8_EDGES = [0, 1, -1, 127, 128, -128, -129]
INT32_EDGES = [-(1 << 31), (1 << 31) - 1, 0x7FFF, -0x8000, 0x8000]


def gpr64s() -> st.SearchStrategy:
    return st.sampled_from(GPR64)


def gpr32s() -> st.SearchStrategy:
    return st.sampled_from(GPR32)


def gprs(width: int) -> st.SearchStrategy:
    return gpr64s() if width == 64 else gpr32s()


def int_range(lo: int, hi: int, edges: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """Integers in lo..hi with the boundaries (and int8/int32 edges inside the range) drawn often."""
    special = sorted({e for e in [lo, hi, *INT8_EDGES, *INT32_EDGES, *edges] if lo <= e <= hi})
    # small values: -200..200 clipped to lo..hi (bounds, not a filter: a filter rejects whole examples)
    small = [st.integers(max(lo, -200), min(hi, 200))] if max(lo, -200) <= min(hi, 200) else []
    return st.one_of(st.sampled_from(special), *small, st.integers(lo, hi))


def disps() -> st.SearchStrategy[int]:
    """Displacements: none, disp8, disp32, and multiples of 4..64 around the compressed-disp8 limits."""
    scaled = st.tuples(st.sampled_from([4, 8, 16, 32, 64]), st.integers(-130, 130)).map(lambda t: t[0] * t[1])
    return st.one_of(
        st.just(0),
        st.integers(-128, 127),
        st.sampled_from([-129, 128, -(1 << 31), (1 << 31) - 1]),
        st.integers(-(1 << 31), (1 << 31) - 1),
        scaled,
    )


@st.composite
def addrs(draw, rip: bool = True) -> Addr:
    """Any address: base (all 16 incl. rsp/rbp/r12/r13) and/or index (not rsp), every scale, any disp, RIP."""
    kind = draw(st.sampled_from(["base", "base", "base_index", "base_index", "index", "rip", "abs"]))
    disp = draw(disps())
    if kind == "rip" and rip:
        return Addr(rip=True, disp=disp)
    if kind == "abs":
        return Addr(disp=disp)
    index = draw(st.sampled_from([r for r in GPR64 if r.idx != 4]))
    scale = draw(st.sampled_from([1, 2, 4, 8]))
    if kind == "index":
        return Addr(index=index, scale=scale, disp=disp)
    base = draw(gpr64s())
    if kind == "base":
        return Addr(base=base, disp=disp)
    return Addr(base=base, index=index, scale=scale, disp=disp)


def mems(size: int | None = None, sized: bool | None = None) -> st.SearchStrategy[Mem]:
    """Memory operands; ``sized`` True/False forces the size to be written, None draws both."""
    flags = st.just(sized) if sized is not None else st.booleans()
    return st.tuples(addrs(), flags).map(lambda t: Mem(t[0], size if t[1] else None))


def bcsts(esize: int | None = None) -> st.SearchStrategy[Mem]:
    return st.tuples(addrs(), st.booleans()).map(lambda t: Mem(t[0], esize if t[1] else None, True))


def vregs(bits: int, max_idx: int = 31) -> st.SearchStrategy[Vec]:
    return st.integers(0, max_idx).map(lambda i: Vec(i, bits))


def kregs(lo: int = 0) -> st.SearchStrategy:
    return st.sampled_from(KREGS[lo:])


@st.composite
def masked(draw, reg, zero: bool = True):
    """``reg``, ``reg {k}`` or (``zero``) ``reg {k} {z}`` with k1..k7."""
    choice = draw(st.integers(0, 2 if zero else 1))
    if choice == 0:
        return reg
    k = draw(kregs(1))
    return reg.mask(k, zero=choice == 2)
