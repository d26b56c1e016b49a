"""Simulated asynchronous copies: cp.async, mbarrier, TMA (cp.async.bulk.tensor) and fences."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import sim_rules as R
from .sim_memops import _TAKES, _addr, _resolve
from .sim_memory import _U64, GLOBAL_BASE, PARAM_BASE, SHARED_BASE, SimError, _add_at
from .sim_parse import Instr, Operand

if TYPE_CHECKING:
    from .sim import _Cta


def _cp_async(c: _Cta, ins: Instr, exe) -> None:
    if ins.mods[:3] == ("async", "bulk", "tensor"):
        _tma_issue(c, ins, exe)
        return
    op = ins.mods[1]  # cp.async.<op>
    if op == "commit_group":
        c.committed[exe] += 1
        return
    if op in ("wait_group", "wait_all"):
        if op == "wait_all":
            c.committed[exe] += 1
        n = 0 if op == "wait_all" else ins.ops[0].value
        _complete(c, ins, exe, n)
        return
    dst, src, size = ins.ops[0], ins.ops[1], ins.ops[2].value
    tids = np.flatnonzero(exe)
    R.check_space(c, ins, dst, (R.SHARED_CTA,), exe, "dst", "cp-async-size")
    R.check_space(c, ins, src, (R.GLOBAL,), exe, "src", "cp-async-size")
    _, sh = _resolve(c, ins, "shared", _addr(c, ins, dst, exe), exe)
    gl = _addr(c, ins, src, exe)[exe]
    ssz = c.get(ins, ins.ops[3], "u32", exe)[exe] if len(ins.ops) > 3 else np.full(tids.size, size, np.int64)
    if (ssz > size).any():
        c.fail(ins, f"src-size larger than cp-size {size}")
    if (gl % size).any():
        c.fail(ins, R.message("cp-async-size", f"cp.async global source misaligned for {size} bytes"), exe)
    idx = c._smem_index(ins, sh, size, tids, "cp-async-size")
    flat, wv = idx.reshape(-1), np.repeat(c.warp[tids], size)
    c._check_write(ins, flat, wv, what="starts an async copy into")
    _add_at(c.pending, flat, 1)
    c.copies.append(
        {
            "ins": ins,
            "tid": tids,
            "group": c.committed[tids].copy(),
            "dst": sh,
            "src": gl,
            "size": size,
            "ssz": ssz,
            "done": np.zeros(tids.size, bool),
        }
    )


def _complete(c: _Cta, ins: Instr, exe, n: int) -> None:
    for rec in c.copies:
        sel = ~rec["done"] & exe[rec["tid"]] & (rec["group"] < c.committed[rec["tid"]] - n)
        if not sel.any():
            continue
        size = rec["size"]
        tids, dst, src, ssz = rec["tid"][sel], rec["dst"][sel], rec["src"][sel], rec["ssz"][sel]
        data = np.zeros((tids.size, size), np.uint8)
        for k in np.unique(ssz):
            if k == 0:
                continue
            m = ssz == k
            try:
                data[m, :k] = c.mem.gather(src[m], int(k), "cp.async source")
            except SimError as e:
                c.fail(rec["ins"], str(e))
        idx = dst[:, None] + np.arange(size)
        flat = idx.reshape(-1)
        _add_at(c.pending, flat, -1)
        wv = np.repeat(c.warp[tids], size)
        c._check_write(rec["ins"], flat, wv, what="completes an async copy into")
        c.w_warp[flat] = wv
        c.w_epoch[flat] = c.epoch
        c.smem[idx] = data
        rec["done"][sel] = True
        c.stats.async_copies += int(sel.sum())
    c.copies = [r for r in c.copies if not r["done"].all()]


# --------------------------------------------------------------------------- Hopper: mbarrier, TMA, wgmma
#
# mbarrier objects live in a side table keyed by their shared address (init checks the 8 bytes
# are inside the shared arrays and 8-aligned). A phase completes when its pending arrivals and
# its transaction count are both zero; then the phase bit flips and the arrivals reset.
# try_wait that finds its phase incomplete parks the thread until that barrier completes a phase
# (then it runs try_wait again); when no thread can run, bulk copies in flight are delivered (the
# copy engine runs while everyone waits), and if threads are still parked, that is a deadlock.
# A completed phase starts a new race-check epoch, like bar.sync: ordering through mbarriers is
# trusted for ordinary shared accesses (coarser than the ISA's per-barrier acquire/release).
# Async-proxy accesses are checked separately: a tensor copy's bytes stay "pending" until it is
# delivered (reads fail before that), wgmma operand bytes stay "read" until wgmma.wait_group
# retires their group (a tensor copy landing on them fails), and wgmma may not read bytes that
# generic stores wrote unless fence.proxy.async ran in between.


def _mbar_at(c: _Cta, ins: Instr, exe, o: Operand) -> np.ndarray:
    """Shared addresses of the executing threads' mbarrier objects (operand ``o``), checked
    against rule mbarrier-object: in shared::cta, 8-byte aligned, inside the shared arrays."""
    space = "shared" if any(m.startswith("shared") for m in ins.mods) else "generic"
    R.check_space(c, ins, o, _TAKES[space], exe, "mbarrier operand", "mbarrier-object")
    kind, addrs = _resolve(c, ins, space, _addr(c, ins, o, exe), exe)
    if kind != "shared":
        c.fail(ins, R.message("mbarrier-object", "mbarrier address is not in shared memory"), exe)
    mis = addrs % 8 != 0
    if mis.any():
        c.fail(
            ins,
            R.message(
                "mbarrier-object", f"mbarrier object at shared address {int(addrs[mis][0])} is not 8-byte aligned"
            ),
            exe,
        )
    if ((addrs < SHARED_BASE) | (addrs + 8 > c.shared_end)).any():
        c.fail(ins, R.message("mbarrier-object", "mbarrier object outside the shared arrays"), exe)
    return addrs


def _mbar(c: _Cta, ins: Instr, a: int) -> dict:
    b = c.mbar.get(int(a))
    if b is None:
        c.fail(ins, f"mbarrier at shared address {int(a)} is used before mbarrier.init")
    return b


def _mbar_settle(c: _Cta, ins: Instr, a: int) -> None:
    """Complete the current phase of barrier ``a`` when arrivals and transactions are done."""
    b = c.mbar[a]
    if b["pending"] == 0 and b["tx"] == 0:
        b["phase"] += 1
        b["pending"] = b["count"]
        c.mb_wait[c.mb_wait == a] = -1  # parked waiters retry
        c.epoch += 1  # a completed phase orders shared accesses like bar.sync (race checks are per epoch)
    elif b["pending"] < 0:
        c.fail(ins, f"mbarrier at {a}: more arrivals than its count {b['count']} in one phase")


def _mbarrier(c: _Cta, ins: Instr, exe) -> None:
    op = ins.mods[0]
    tids = np.flatnonzero(exe)
    if op == "init":
        addrs = _mbar_at(c, ins, exe, ins.ops[0])
        cnt = c.get(ins, ins.ops[1], "u32", exe)[exe]
        for a, n in zip(addrs.tolist(), cnt.tolist(), strict=True):
            if not 0 < n < 1 << 20:
                c.fail(ins, f"mbarrier.init count {n} not in 1..2^20-1")
            c.mbar[a] = {"count": n, "pending": n, "tx": 0, "phase": 0}
        return
    if op == "inval":
        for a in _mbar_at(c, ins, exe, ins.ops[0]).tolist():
            c.mbar.pop(a, None)
        return
    if op == "expect_tx":
        addrs = _mbar_at(c, ins, exe, ins.ops[0])
        tx = c.get(ins, ins.ops[1], "u32", exe)[exe]
        for a, t in zip(addrs.tolist(), tx.tolist(), strict=True):
            _mbar(c, ins, a)["tx"] += t
        return
    if op == "arrive":
        d, bar = ins.ops[0], ins.ops[1]
        addrs = _mbar_at(c, ins, exe, bar)
        expect = "expect_tx" in ins.mods
        extra = ins.ops[2] if len(ins.ops) > 2 else None
        vals = c.get(ins, extra, "u32", exe)[exe] if extra is not None else np.ones(tids.size, np.int64)
        states = np.zeros(c.n, _U64)
        for j, a in enumerate(addrs.tolist()):
            b = _mbar(c, ins, a)
            states[tids[j]] = b["phase"]
            if expect:
                b["tx"] += int(vals[j])
                b["pending"] -= 1
            else:
                b["pending"] -= int(vals[j])
            _mbar_settle(c, ins, a)
        if d.kind != "sink":
            c.put(d.name, states, "b64", exe)
        return
    if op == "test_wait":  # non-blocking: the current answer
        done = _mbar_done(c, ins, exe)
        c.put(ins.ops[0].name, done, "pred", exe)
        return
    c.fail(ins, f"mbarrier.{op} is not supported by the simulator")


def _mbar_done(c: _Cta, ins: Instr, exe) -> np.ndarray:
    """Per thread: has the awaited phase (parity operand, or the phase of a state) completed?"""
    addrs = _mbar_at(c, ins, exe, ins.ops[1])
    done = np.zeros(c.n, bool)
    if "parity" in ins.mods:
        want = c.get(ins, ins.ops[2], "u32", exe)[exe] & 1
    else:
        want = c.raw(ins, ins.ops[2], "b64", exe)[exe].astype(np.int64)
    for j, (t, a) in enumerate(zip(np.flatnonzero(exe).tolist(), addrs.tolist(), strict=True)):
        ph = _mbar(c, ins, a)["phase"]
        done[t] = (ph & 1) != want[j] if "parity" in ins.mods else ph != want[j]
    return done


def _mbar_try_wait(c: _Cta, ins: Instr, exe) -> np.ndarray:
    """try_wait: threads whose phase completed get true; the others park (returned mask)."""
    done = _mbar_done(c, ins, exe)
    c.put(ins.ops[0].name, done, "pred", exe & done)
    park = exe & ~done
    if park.any():
        c.mb_wait[park] = _mbar_at(c, ins, exe, ins.ops[1])[~done[exe]]
    return park


def _mbar_report(c: _Cta, alive) -> str:
    parts = []
    for a in np.unique(c.mb_wait[alive & (c.mb_wait >= 0)]).tolist():
        b = c.mbar[a]
        who = np.flatnonzero(alive & (c.mb_wait == a))[:4].tolist()
        parts.append(
            f"threads {who} wait on the mbarrier at {a} whose phase {b['phase']} never completes "
            f"(pending arrivals {b['pending']} of {b['count']}, transaction count {b['tx']} bytes)"
        )
    others = alive & (c.mb_wait < 0)
    if others.any():
        parts.append(f"threads {np.flatnonzero(others)[:4].tolist()} wait at bar.sync")
    return "; ".join(parts)


def _tma_issue(c: _Cta, ins: Instr, exe) -> None:
    from .tensormap import SWIZZLES, TensorMapError, TensorMapTiled

    if "tile" not in ins.mods and "im2col" in ins.mods:
        c.fail(ins, "im2col tensor copies are not supported by the simulator")
    if "global" not in ins.mods or "shared::cluster" not in ins.mods:
        c.fail(ins, "only global -> shared::cluster tensor loads are supported by the simulator")
    if "mbarrier::complete_tx::bytes" not in ins.mods:
        c.fail(ins, "tensor load without mbarrier::complete_tx::bytes")
    if any(m.startswith("multicast") for m in ins.mods):
        c.fail(ins, "multicast (clusters) is not supported by the simulator")
    dst_o, src_o, bar_o = ins.ops[:3]
    tids = np.flatnonzero(exe)
    R.check_space(c, ins, src_o.items[0], (R.GENERIC,), exe, "tensorMap operand", "tensormap-generic")
    R.check_space(c, ins, dst_o, (R.SHARED_CTA, R.SHARED_CLUSTER), exe, "dstMem", "tma-dst-align")
    _, dst = _resolve(c, ins, "shared", _addr(c, ins, dst_o, exe), exe)
    bars = _mbar_at(c, ins, exe, bar_o)
    tm_addr = c.raw(ins, src_o.items[0], "u64", exe)[exe]
    coords = np.stack([c.get(ins, o, "s32", exe)[exe] for o in src_o.items[1].items], axis=1)
    for j, t in enumerate(tids.tolist()):
        a = int(tm_addr[j])
        entry = c.pspace.get(a)
        if entry is None:
            if PARAM_BASE <= a < PARAM_BASE + c.k.param_end:
                what = "points into the kernel parameters, not at a tensor-map parameter"
            elif a >= GLOBAL_BASE and a < PARAM_BASE:
                c.fail(ins, "tensor maps in global memory are not supported by the simulator (pass one as a parameter)")
            else:
                what = "is not a generic address (a .param-space address from mov? cvta.param converts it)"
            c.fail(ins, R.message("tensormap-generic", f"tensorMap operand {a:#x} {what}"), c._mask(np.array([t])))
        if a % R.RULES["tensormap-generic"].align_bytes:
            c.fail(ins, R.message("tensormap-generic", f"tensorMap operand {a:#x} is not 64-byte aligned"))
        try:
            tm = TensorMapTiled.unpack(entry[1])
        except TensorMapError as e:
            c.fail(ins, f"parameter {entry[0]}: {e}")
        if coords.shape[1] != tm.rank:
            c.fail(ins, f"{coords.shape[1]} coordinates for a rank-{tm.rank} tensor map")
        if any(e != 1 for e in tm.element_strides):
            c.fail(ins, "element strides other than 1 are not supported by the simulator")
        span = SWIZZLES[tm.swizzle]
        row = tm.box_dim[0] * tm.esize
        if span and row != span:
            c.fail(ins, f"a {span}-byte swizzle with {row}-byte box rows is not supported by the simulator")
        d = int(dst[j])
        if d % R.RULES["tma-dst-align"].align_bytes:
            c.fail(ins, R.message("tma-dst-align", f"shared destination {d} is not 128-byte aligned"))
        if span and d % (8 * span):
            c.fail(
                ins,
                R.message(
                    "tma-dst-swizzle", f"shared destination {d} is not {8 * span}-byte aligned (swizzle {span} B)"
                ),
            )
        _mbar(c, ins, int(bars[j]))
        nbytes = tm.box_bytes
        idx = np.arange(d, d + nbytes)
        c._smem_index(ins, np.array([d]), 1, np.array([t]))  # start inside shared memory
        if d + nbytes > c.shared_end:
            c.fail(ins, f"box of {nbytes} bytes at {d} runs past the shared arrays")
        from .tensormap import swizzle as _swz

        phys = _swz(idx, span)
        _add_at(c.pending, phys, 1)
        c.tma.append({"ins": ins, "tm": tm, "coords": coords[j].tolist(), "phys": phys, "bar": int(bars[j])})


def _deliver_tma(c: _Cta) -> None:
    """Complete every bulk tensor copy in flight: write the boxes, then complete_tx their bytes."""
    recs, c.tma = c.tma, []
    for rec in recs:
        tm, ins = rec["tm"], rec["ins"]
        es = tm.esize
        grids = np.meshgrid(*[np.arange(b) for b in reversed(tm.box_dim)], indexing="ij")
        pos = [g.reshape(-1) for g in reversed(grids)]  # dim 0 fastest
        offs = np.zeros(pos[0].size, np.int64)
        ok = np.ones(pos[0].size, bool)
        strides = (es, *tm.global_strides)
        for i in range(tm.rank):
            gi = pos[i] + rec["coords"][i]
            ok &= (gi >= 0) & (gi < tm.global_dim[i])
            offs += np.where(ok, gi, 0) * strides[i]
        data = np.zeros((offs.size, es), np.uint8)
        if ok.any():
            try:
                data[ok] = c.mem.gather(tm.global_address + offs[ok], es, "tensor copy source")
            except SimError as e:
                c.fail(ins, str(e))
        phys = rec["phys"]
        if (c.async_reads[phys] > 0).any():
            c.fail(
                ins,
                "a tensor copy overwrites shared memory that a wgmma still reads (release the stage "
                "only after wgmma.wait_group)",
            )
        _add_at(c.pending, phys, -1)
        c.smem[phys] = data.reshape(-1)
        c.w_warp[phys] = -1
        c.w_epoch[phys] = -1
        c.proxy_dirty[phys] = False
        c.stats.async_copies += 1
        b = c.mbar.get(rec["bar"])
        if b is None:
            c.fail(ins, f"the mbarrier at {rec['bar']} was invalidated while a copy was in flight")
        b["tx"] -= tm.box_bytes
        _mbar_settle(c, ins, rec["bar"])


def _fence(c: _Cta, ins: Instr, exe) -> None:
    if ins.mods and ins.mods[0] == "proxy" and "async" in ins.mods[1:2] + ins.mods[1:]:
        warps = np.unique(c.warp[exe])
        c.proxy_dirty[np.isin(c.w_warp, warps)] = False
    # other fences (mbarrier_init, acq_rel, sc) order memory; the simulator is sequential
