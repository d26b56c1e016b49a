"""AArch64 fp16 <-> fp32 conversion kernels (NEON ``fcvtl``/``fcvtl2``, ``fcvtn``/``fcvtn2``, scalar ``fcvt``).

``program(src, dst)`` is the kernel ``void(const void* src, void* dst, int64_t n)``:
``dst[i] = convert(src[i])`` for ``0 <= i < n`` (nothing for ``n <= 0``); ``src`` and ``dst`` are
contiguous runs of ``n`` elements (fp16: 2 bytes, fp32: 4 bytes) that do not overlap.
``generate`` loads it (native on an AArch64 host, else in the emulator worker).

* ``("fp16", "fp32")``: ``fcvtl`` / ``fcvtl2`` (tail: ``fcvt s, h``), exact;
* ``("fp32", "fp16")``: ``fcvtn`` / ``fcvtn2`` (tail: ``fcvt h, s``) in FPCR's rounding mode (round to nearest even, the
  Linux default; FPCR.FZ16 clear: no flush of fp16 subnormals), overflow to +-inf.

Layout: eight elements a loop trip (one q register of fp16, two of fp32), then one 4-element
step, then element by element (``ldr``/``str`` of ``h``/``s`` registers, scalar ``fcvt``, the
same rounding), so nothing outside the ``n`` elements is read or written. SVE targets run
this NEON code (no SVE form yet). Only v0..v3 are used (caller-saved): no frame.
"""

from __future__ import annotations

from typing import Any

from asm.aarch64 import Assembler, V, X, post
from minijit.kernels.aarch64.common import load_kernel

__all__ = ["DIRECTIONS", "SIGNATURE", "generate", "program"]

DIRECTIONS = (("fp16", "fp32"), ("fp32", "fp16"))
SIGNATURE = "void(const void* src, void* dst, int64_t n)"
SP, DP, N = X[0], X[1], X[2]


def _step(a: Assembler, widen: bool, lanes: int) -> None:
    """Convert ``lanes`` (4: half a vector, 1: a scalar) elements from SP to DP, both advanced:
    load, fcvtl / fcvtn (fcvt for a scalar), store."""
    if lanes == 4:
        load, x, y, store = (V[0].D, V[0].h4, V[1].s4, V[1].Q) if widen else (V[0].Q, V[0].s4, V[2].h4, V[2].D)
        cvt = a.fcvtl if widen else a.fcvtn
    else:
        load, x, y, store = (V[0].H, V[0].H, V[1].S, V[1].S) if widen else (V[0].S, V[0].S, V[2].H, V[2].H)
        cvt = a.fcvt
    fp16, fp32 = 2 * lanes, 4 * lanes
    a.ldr(load, post(SP, fp16 if widen else fp32))
    cvt(y, x)
    a.str(store, post(DP, fp32 if widen else fp16))


def program(src: str = "fp16", dst: str = "fp32") -> Assembler:
    """The conversion kernel's code (see the module docstring). Bad arguments raise ValueError."""
    if (src, dst) not in DIRECTIONS:
        raise ValueError(f"(src, dst) must be one of {DIRECTIONS}, got {(src, dst)!r}")
    widen = src == "fp16"
    a = Assembler(name=f"convert_{src}_{dst}_neon")
    eight, four, single, done = (a.new_label(n) for n in ("eight", "four", "single", "done"))
    a.cmp(N, 0)
    a.b_cond("le", done)
    # eight elements a trip
    a.bind(eight)
    a.cmp(N, 8)
    a.b_cond("lt", four)
    if widen:
        a.ldr(V[0].Q, post(SP, 16))
        a.fcvtl(V[1].s4, V[0].h4)
        a.fcvtl2(V[2].s4, V[0].h8)
        a.stp(V[1].Q, V[2].Q, post(DP, 32))
    else:
        a.ldp(V[0].Q, V[1].Q, post(SP, 32))
        a.fcvtn(V[2].h4, V[0].s4)
        a.fcvtn2(V[2].h8, V[1].s4)
        a.str(V[2].Q, post(DP, 16))
    a.sub(N, N, 8)
    a.b(eight)
    # one 4-element step, then the last 0..3 elements one at a time (scalar fcvt)
    a.bind(four)
    a.cmp(N, 4)
    a.b_cond("lt", single)
    _step(a, widen, 4)
    a.sub(N, N, 4)
    a.bind(single)
    a.cbz(N, done)
    _step(a, widen, 1)
    a.sub(N, N, 1)
    a.b(single)
    a.bind(done)
    a.ret()
    return a


def generate(src: str = "fp16", dst: str = "fp32", sve_vl: int = 128) -> Any:
    """The loaded kernel of `program` (native on AArch64, else emulated at ``sve_vl`` bits)."""
    a = program(src, dst)
    return load_kernel(a, SIGNATURE, a.name, sve_vl)
