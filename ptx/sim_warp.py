"""Simulated warp collectives: shfl.sync, ldmatrix and mma.sync."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from . import mma as _mma
from . import sim_rules as R
from .sim_memops import _addr, _resolve
from .sim_memory import _MASK, _U64
from .sim_parse import Instr, Operand

if TYPE_CHECKING:
    from .sim import _Cta


def _shfl(c: _Cta, ins: Instr, exe) -> None:
    d, a, b, cc, mm = ins.ops
    key = ("shfl", c.n)
    if exe is c.ones and key in ins.cache:  # constant operands, every thread: lanes checked before
        src_c, pval = ins.cache[key]
    else:
        src_c, pval = _shfl_lanes(c, ins, exe)
        if exe is c.ones and b.kind == cc.kind == mm.kind == "imm":
            ins.cache[key] = (src_c, pval)
    val = c.raw(ins, a, "b32", exe)
    c.put(d.name, val[src_c], "b32", exe)
    if d.pred:
        c.put(d.pred, pval, "pred", exe)


def _shfl_lanes(c: _Cta, ins: Instr, exe) -> tuple[np.ndarray, np.ndarray]:
    """shfl.sync's source thread and in-range predicate per thread, after its membership checks."""
    mode = ins.mods[1]
    d, a, b, cc, mm = ins.ops
    mask = c.get(ins, mm, "b32", exe)
    lane = c.lane
    members = ((mask >> lane) & 1).astype(bool)
    if (exe & ~members).any():
        c.fail(ins, "a thread outside membermask executes shfl.sync", exe & ~members)
    if exe is not c.ones:  # (with every thread executing, no member can be missing)
        warps = np.unique(c.warp[exe])
        inwarp = np.isin(c.warp, warps)
        if (inwarp & members & ~exe).any():
            c.fail(ins, "threads named in membermask do not execute this shfl.sync", inwarp & members & ~exe)
    bval = c.get(ins, b, "u32", exe) & 31
    cv = c.get(ins, cc, "u32", exe)
    cval, seg = cv & 31, (cv >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg & 31)
    min_lane = lane & seg
    if mode == "up":
        j = lane - bval
        pval = j >= max_lane
    elif mode == "down":
        j = lane + bval
        pval = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        pval = j <= max_lane
    else:
        j = min_lane | (bval & ~seg & 31)
        pval = j <= max_lane
    j = np.where(pval, j, lane)
    src = c.warp * 32 + j
    src_c = np.clip(src, 0, c.n - 1)
    if (exe & ((src >= c.n) | ~exe[src_c])).any():
        c.fail(ins, "shfl.sync reads a lane that does not execute it", exe & ~exe[src_c])
    src_c.flags.writeable = False
    pval.flags.writeable = False
    return src_c, pval


def _ldmatrix(c: _Cta, ins: Instr, exe) -> None:
    warps = c.whole_warps(ins, exe)
    nmat = int(next(m for m in ins.mods if m.startswith("x"))[1:])
    trans = "trans" in ins.mods
    d, a = ins.ops
    # lanes 8j..8j+7 of each warp give the 16-byte rows of matrix j
    giver = np.concatenate([w * 32 + np.arange(8 * nmat) for w in warps])
    R.check_space(c, ins, a, (R.SHARED_CTA,), c._mask(giver), "row address", "ldmatrix-row")
    _, addrs = _resolve(c, ins, "shared", _addr(c, ins, a, exe)[giver], c.ones)  # (c.ones: take them all)
    rows = c.smem_read(ins, addrs, 16, giver, "ldmatrix-row").view("<u2").reshape(len(warps), nmat, 8, 8)
    if trans:
        rows = rows.transpose(0, 1, 3, 2)
    lane = np.arange(32)
    r, col = lane // 4, 2 * (lane % 4)
    lo = rows[:, :, r, col].astype(_U64)  # (warps, nmat, 32)
    hi = rows[:, :, r, col + 1].astype(_U64)
    regs = lo | (hi << _U64(16))
    for j, reg in enumerate(d.items):
        if exe is c.ones:  # every warp: the new values are the whole register
            full = regs[:, j].reshape(-1)
        else:
            full = c.regs.get(reg.name, np.zeros(c.n, _U64)).copy()
            for wi, w in enumerate(warps):
                full[w * 32 : w * 32 + 32] = regs[wi, j]
        c.put(reg.name, full, "b32", exe)


@cache
def _layout(shape: str, dtype: str, operand: str) -> tuple[np.ndarray, np.ndarray]:
    lay = _mma.layout(shape, dtype, operand)
    return lay[..., 0], lay[..., 1]


def _mma_sync(c: _Cta, ins: Instr, exe) -> None:
    warps = c.whole_warps(ins, exe)
    shape, dtype = ins.mods[2], ins.mods[6]
    if ins.mods[3:5] != ("row", "col") or ins.mods[5] != "f32" or ins.mods[8] != "f32":
        c.fail(ins, "only .row.col mma with f32 accumulators is supported by the simulator")
    inf = _mma.info(shape, dtype)
    dd, aa, bb, cc = ins.ops
    every = exe is c.ones  # every warp: sel is every thread
    sel = c.tids if every else np.concatenate([w * 32 + np.arange(32) for w in warps])
    nw = len(warps)

    def frags(o: Operand, t: str, operand: str) -> np.ndarray:
        regs = np.stack([c.raw(ins, r, t, exe) if every else c.raw(ins, r, t, exe)[sel] for r in o.items], axis=1)
        if operand == "c":
            return (regs & _U64(_MASK[32])).astype(np.uint32).view(np.float32).reshape(nw, 32, -1)
        u = (regs & _U64(_MASK[32])).astype(np.uint32)
        return _mma.unpack_regs(dtype, u).reshape(nw, 32, -1)

    def tile(fr: np.ndarray, operand: str) -> np.ndarray:
        rows, cols = _layout(shape, dtype, operand)
        out = np.zeros((nw, *inf.dims(operand)), np.float64)
        out[:, rows, cols] = fr
        return out

    qa = _mma.quantize(dtype, tile(frags(aa, "b32", "a"), "a").astype(np.float32)).astype(np.float64)
    qb = _mma.quantize(dtype, tile(frags(bb, "b32", "b"), "b").astype(np.float32)).astype(np.float64)
    acc = tile(frags(cc, "f32", "c"), "c") + qa @ qb
    rows, cols = _layout(shape, dtype, "c")
    dfr = acc[:, rows, cols].astype(np.float32).reshape(nw * 32, -1)  # (nw*32, 4)
    for i, r in enumerate(dd.items):
        if every:
            full = dfr[:, i].view(np.uint32).astype(_U64)
        else:
            full = c.regs.get(r.name, np.zeros(c.n, _U64)).copy()
            full[sel] = dfr[:, i].view(np.uint32).astype(_U64)
        c.put_raw(r.name, full, exe)
