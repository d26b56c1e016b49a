"""Hypothesis strategies for AArch64 operands over their full legal ranges."""

from __future__ import annotations

from hypothesis import strategies as st

from asm.aarch64.registers import PReg, VReg, WReg, XReg, ZReg


def xregs(*, sp: bool = False, zr: bool = True) -> st.SearchStrategy[XReg]:
    """X registers 0..30, plus sp (``sp=True``) or xzr (``zr=True``) as number 31."""
    extra = [XReg(31, sp=True)] if sp else ([XReg(31)] if zr else [])
    return st.sampled_from([XReg(i) for i in range(31)] + extra)


def wregs(*, sp: bool = False, zr: bool = True) -> st.SearchStrategy[WReg]:
    extra = [WReg(31, sp=True)] if sp else ([WReg(31)] if zr else [])
    return st.sampled_from([WReg(i) for i in range(31)] + extra)


def vnums() -> st.SearchStrategy[int]:
    return st.integers(0, 31)


def vecs(arrangement: str) -> st.SearchStrategy:
    """Vector registers with an arrangement given as text, e.g. "4s"."""
    attr = arrangement[-1] + arrangement[:-1]
    return vnums().map(lambda i: getattr(VReg(i), attr))


def zvecs(esize: str) -> st.SearchStrategy:
    return vnums().map(lambda i: getattr(ZReg(i), esize))


def preds(max_reg: int = 15) -> st.SearchStrategy[PReg]:
    return st.integers(0, max_reg).map(PReg)
