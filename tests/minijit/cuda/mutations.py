"""Deliberate bugs in the generated sm_90a GEMM, made by rewriting its PTX text (the production
generator has no test-only switches). Each function takes the kernel's PTX and returns the mutated
text; :func:`mutate` checks that the rewrite applied."""

from __future__ import annotations

import re
from collections.abc import Callable

_DESC_OR = re.compile(r"(or\.b64 %bd\d+, %rd\d+, )(0x[0-9A-Fa-f]+);")


def no_cvta_param(t: str) -> str:
    """Today's (issue 34) kernel: the tensor maps' .param-space addresses straight from ``mov``."""
    return re.sub(r"\n\s*cvta\.param\.u64 [^\n]*", "", t)


def tma_dst_plus16(t: str) -> str:
    """The first TMA load lands 16 bytes past its stage's (1024-byte aligned) tile."""
    return re.sub(r"(cp\.async\.bulk\.tensor\.[^\[]*\[)(%r\d+)\]", r"\1\2+16]", t, count=1)


def mbarrier_plus4(t: str) -> str:
    """The first mbarrier (full[0]) initialized 4 bytes past its 8-byte aligned place."""
    return re.sub(r"(mbarrier\.init\.shared::cta\.b64 \[)(%r\d+)\]", r"\1\2+4]", t, count=1)


def _desc(t: str, which: int, fn: Callable[[int], int]) -> str:
    """Apply ``fn`` to the constant bits of the ``which``-th descriptor ``or`` of each stage (0:
    X = B^T, wgmma's A; 1: Y = A, wgmma's B)."""
    hits = iter(range(10**9))

    def sub(m: re.Match) -> str:
        if next(hits) % 2 != which:
            return m.group(0)
        return f"{m.group(1)}{fn(int(m.group(2), 16)):#x};"

    return _DESC_OR.sub(sub, t)


def desc_x_plus16(t: str) -> str:
    """wgmma's A descriptor (X = B^T) starts 16 bytes late (start-address field + 1)."""
    return _desc(t, 0, lambda d: d + 1)


def desc_y_plus16(t: str) -> str:
    """wgmma's B descriptor (Y = A) starts 16 bytes late."""
    return _desc(t, 1, lambda d: d + 1)


def no_wgmma_fence(t: str) -> str:
    """The accumulators' registers reach wgmma without wgmma.fence."""
    return re.sub(r"\n\s*wgmma\.fence\.sync\.aligned;", "", t)


def expect_tx_plus16(t: str) -> str:
    """The full barrier expects 16 bytes more than the stage's TMA loads deliver."""
    return re.sub(
        r"(mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], )(\d+);",
        lambda m: f"{m.group(1)}{int(m.group(2)) + 16};",
        t,
    )


def wrong_swizzle(t: str) -> str:
    """The descriptors name the 64-byte swizzle (the tiles are written with the 128-byte one)."""
    return _DESC_OR.sub(lambda m: f"{m.group(1)}{(int(m.group(2), 16) & ~(3 << 62)) | (2 << 62):#x};", t)


def wrong_trans(t: str) -> str:
    """imm-trans-b (the last wgmma immediate) flipped: A's tile read in the other canonical layout."""
    return re.sub(r"(wgmma\.mma_async[^\n]*, )([01]);", lambda m: f"{m.group(1)}{1 - int(m.group(2))};", t)


def early_release(t: str) -> str:
    """Each consumer frees the stage whose wgmma group it has just issued (not the previous one,
    whose group wait_group 1 retired), and skips the release after the last group."""
    pat = re.compile(
        r"(wgmma\.wait_group\.sync\.aligned 1;)\n\s*setp\.ne\.s32 (%p\d+), %ri\d+, 0;\n\s*and\.pred \2, \2, (%p\d+);\n"
        r"\s*@\2 (mbarrier\.arrive\.shared::cta\.b64 _, )\[(%r\d+)\];\n(\s*)mov\.u32 \5, (%r\d+);"
    )

    def freed_now(m: re.Match) -> str:
        wait, lead, arrive, prev, ws, eb = m.group(1), m.group(3), m.group(4), m.group(5), m.group(6), m.group(7)
        return f"{wait}\n\t@{lead} {arrive}[{eb}];\n{ws}mov.u32 {prev}, {eb};"

    t, n = pat.subn(freed_now, t)
    if n != 1:
        return t
    # the release after wgmma.wait_group 0 (the last stage's)
    last = r"\s*@%p\d+ mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];"
    return re.sub(r"(wgmma\.wait_group\.sync\.aligned 0;\n(?:[^\n]*\n){0,2}?)" + last, r"\1", t, count=1)


MUTATIONS: dict[str, Callable[[str], str]] = {
    f.__name__: f
    for f in (
        no_cvta_param,
        tma_dst_plus16,
        mbarrier_plus4,
        desc_x_plus16,
        desc_y_plus16,
        no_wgmma_fence,
        expect_tx_plus16,
        wrong_swizzle,
        wrong_trans,
        early_release,
    )
}


def mutate(name: str, text: str) -> str:
    """``text`` with mutation ``name`` applied; AssertionError if it changed nothing."""
    out = MUTATIONS[name](text)
    assert out != text, f"mutation {name} did not apply"
    return out
