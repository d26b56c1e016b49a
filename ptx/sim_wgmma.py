"""Simulated warpgroup instructions: wgmma and setmaxnreg."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import mma as _mma
from . import sim_rules as R
from .sim_memory import _MASK, _U64, SHARED_BASE, _add_at
from .sim_parse import Instr

if TYPE_CHECKING:
    from .sim import _Cta


def _warpgroups(c: _Cta, ins: Instr, exe) -> np.ndarray:
    """Warpgroups (4 consecutive warps from a multiple of 4) executing ``ins``; all their threads must."""
    c.whole_warps(ins, exe)
    groups = np.unique(c.warp[exe] // 4)
    part = np.isin(c.warp // 4, groups) & ~exe
    if part.any() or c.n % 128:
        c.fail(ins, ".sync.aligned warpgroup instruction executed by part of a warpgroup", part)
    return groups


def _setmaxnreg(c: _Cta, ins: Instr, exe) -> None:
    _warpgroups(c, ins, exe)
    n = ins.ops[0].value
    if ins.ops[0].kind != "imm" or not 24 <= n <= 256 or n % 8 or ins.mods[0] not in ("inc", "dec"):
        c.fail(ins, "setmaxnreg needs .inc/.dec and an immediate multiple of 8 in 24..256")


def _wgmma(c: _Cta, ins: Instr, exe) -> None:
    groups = _warpgroups(c, ins, exe)
    op = ins.mods[0]
    if op == "fence":
        c.fence_step[exe] = c.step
        return
    if op == "commit_group":
        for g in groups.tolist():
            c.wg_groups.setdefault(g, []).append(c.wg_open.pop(g, []))
        return
    if op == "wait_group":
        _wgmma_wait(c, ins.ops[0].value, groups)
        return
    if op != "mma_async":
        c.fail(ins, f"wgmma.{op} is not supported by the simulator")
    form = _wgmma_form(c, ins)
    for g in groups.tolist():
        _wgmma_group(c, ins, form, g)


def _wgmma_wait(c: _Cta, n: int, groups: np.ndarray) -> None:
    """wgmma.wait_group n: retire the oldest groups until n stay pending (accumulators and operand bytes free)."""
    for g in groups.tolist():
        pend = c.wg_groups.get(g, [])
        while len(pend) > n:
            for rec in pend.pop(0):
                for name in rec["regs"]:
                    c.inflight[name] -= rec["threads"]
                _add_at(c.async_reads, rec["bytes"], -1)
        c.inflight = {k: v for k, v in c.inflight.items() if v.any()}


def _wgmma_form(c: _Cta, ins: Instr) -> dict:
    """The checked form of a wgmma.mma_async: types, N and K, transposes and scales."""
    from . import wgmma as W

    shape, dt, at, bt = ins.mods[3], ins.mods[4], ins.mods[5], ins.mods[6]
    if dt != "f32" or at != bt or at not in ("f16", "bf16", "tf32"):
        c.fail(ins, "only f32 accumulation of f16/bf16/tf32 is supported by the simulator")
    try:
        _, nn, kk = W.check_shape(shape, at)
    except ValueError as e:
        c.fail(ins, str(e))
    d, ad = ins.ops[:2]
    imms = [o.value for o in ins.ops[4:]]
    if ad.kind != "reg":
        c.fail(ins, "A from registers is not supported by the simulator (use a descriptor)")
    if at == "tf32" and len(imms) != 2:  # the ISA's tf32 form has no imm-trans: K-major operands only
        c.fail(ins, "wgmma tf32 takes imm-scale-a/b only (no imm-trans: both operands K-major)")
    if at != "tf32" and len(imms) != 4:
        c.fail(ins, f"wgmma .{at} with descriptors needs imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b")
    if at != "tf32" and not {imms[2], imms[3]} <= {0, 1}:
        c.fail(ins, f"imm-trans-a/b must be 0 or 1, got {imms[2]}, {imms[3]}")
    trans_a, trans_b = (imms[2], imms[3]) if at != "tf32" else (0, 0)  # 1: MN-major (transposed)
    sa, sb = (-1 if imms[0] in (-1, 0xFFFFFFFFFFFFFFFF) else 1), (-1 if imms[1] in (-1, 0xFFFFFFFFFFFFFFFF) else 1)
    if len(d.items) != nn // 2:
        c.fail(ins, f"{shape} needs {nn // 2} accumulator registers, got {len(d.items)}")
    rows, cols = W.acc_coords(nn)
    return dict(
        at=at,
        nn=nn,
        kk=kk,
        es=W.WGMMA_TYPES[at],
        trans=(trans_a, trans_b),
        scale=(sa, sb),
        rows=rows,
        cols=cols,
        names=[r.name for r in d.items],
    )


def _wgmma_group(c: _Cta, ins: Instr, f: dict, g: int) -> None:
    """wgmma.mma_async of warpgroup ``g``: checks, operand reads, products into the accumulators,
    and a record of the group's registers and shared bytes (in flight until wait_group)."""
    from . import wgmma as W

    sd = ins.ops[3]
    names, es = f["names"], f["es"]
    sel = np.arange(128 * g, 128 * g + 128)
    mask = np.zeros(c.n, bool)
    mask[sel] = True
    if (c.fence_step[sel] < 0).any():
        c.fail(ins, "wgmma.mma_async before any wgmma.fence in its warpgroup (missing wgmma.fence)", mask)
    for nm in names:
        gw = c.gen_write.get(nm)
        if gw is not None and (gw[sel] > c.fence_step[sel]).any():
            c.fail(ins, f"accumulator {nm} was written after the last wgmma.fence (missing wgmma.fence)", mask)
    descs = _wgmma_descriptors(c, ins, f["trans"], g, sel, mask)
    try:
        a_addr = W.operand_addresses(descs[0], 64, f["kk"], es, bool(f["trans"][0]))
        b_addr = W.operand_addresses(descs[1], f["nn"], f["kk"], es, bool(f["trans"][1]))
    except ValueError as e:
        c.fail(ins, str(e))
    A, fa = _wgmma_fetch(c, ins, a_addr, "A", es, f["at"])
    B, fb = _wgmma_fetch(c, ins, b_addr, "B", es, f["at"])
    sa, sb = f["scale"]
    prod = (sa * A) @ (sb * B).T  # (64, N), exact products, float64 sums
    scale = c.get(ins, sd, "pred", mask)[sel] if sd.kind == "reg" else np.full(128, bool(sd.value))
    if (scale != scale[0]).any():
        c.fail(ins, f"scale-d differs between the threads of warpgroup {g}")
    acc = prod[f["rows"], f["cols"]]  # (128, N/2)
    if scale[0]:
        for nm in names:
            if nm not in c.regs or not c.defined[nm][sel].all():
                c.fail(ins, f"accumulator {nm} is read (scale-d true) before it is written", mask)
        old = np.stack([(c.regs[nm][sel] & _U64(_MASK[32])).astype(np.uint32).view(np.float32) for nm in names], 1)
        acc = acc + old
    acc32 = acc.astype(np.float32)
    for i, nm in enumerate(names):
        full = c.regs.get(nm, np.zeros(c.n, _U64)).copy()
        full[sel] = acc32[:, i].view(np.uint32).astype(_U64)
        old_def = c.defined.get(nm, np.zeros(c.n, bool))
        c.regs[nm] = full
        c.defined[nm] = old_def | mask
        c.inflight[nm] = c.inflight.get(nm, np.zeros(c.n, np.int32)) + mask
    flat = np.concatenate([fa, fb])
    _add_at(c.async_reads, flat, 1)
    c.wg_open.setdefault(g, []).append({"regs": names, "threads": mask, "bytes": flat})


def _wgmma_descriptors(c: _Cta, ins: Instr, trans, g: int, sel, mask) -> list[int]:
    """The A and B matrix descriptors of warpgroup ``g`` (uniform across it; rule wgmma-desc-row)."""
    from . import wgmma as W

    descs = []
    for o, mn_major in ((ins.ops[1], trans[0]), (ins.ops[2], trans[1])):
        v = c.raw(ins, o, "b64", mask)[sel]
        if (v != v[0]).any():
            c.fail(ins, f"descriptor {o.name} differs between the threads of warpgroup {g}")
        descs.append(int(v[0]))
        start, _, _, span, _ = W.decode_descriptor(descs[-1])
        # rule wgmma-desc-row: one row of the canonical layout stays in one row of the swizzle atom
        if span and (start % span if mn_major else start % span + 32 > span):
            c.fail(
                ins,
                R.message(
                    "wgmma-desc-row",
                    f"descriptor {o.name} ({'MN' if mn_major else 'K'}-major, {span}-byte swizzle) starts at "
                    f"shared address {start}, {start % span} bytes into a swizzle row",
                ),
                mask,
            )
    return descs


def _wgmma_fetch(c: _Cta, ins: Instr, addrs, what: str, es: int, at: str):
    """Operand values (float64) at shared ``addrs`` and the bytes read; copies must have landed
    and generic stores be fenced (fence.proxy.async)."""
    flat = (addrs[..., None] + np.arange(es)).reshape(-1)
    if ((flat < SHARED_BASE) | (flat >= c.shared_end)).any():
        c.fail(
            ins,
            R.message(
                "wgmma-desc-start",
                f"{what} descriptor reaches outside the shared arrays [{SHARED_BASE}, {c.shared_end})",
            ),
        )
    if (c.pending[flat] > 0).any():
        c.fail(ins, f"{what} reads shared memory a copy has not completed (missing mbarrier wait?)")
    if c.proxy_dirty[flat].any():
        c.fail(ins, f"{what} reads shared memory written by generic stores without fence.proxy.async")
    raw = c.smem[flat].reshape(*addrs.shape, es)
    u = np.ascontiguousarray(raw).view(f"<u{es}")[..., 0]
    if at == "f16":
        v = u.view(np.float16).astype(np.float64)
    elif at == "bf16":
        v = _mma.bf16_bits_to_f32(u).astype(np.float64)
    else:  # raw fp32 in shared memory: the tensor core reads the upper 19 bits (truncates)
        v = _mma.quantize("tf32", u.view(np.float32)).astype(np.float64)
    return v, flat
