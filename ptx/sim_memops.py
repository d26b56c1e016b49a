"""Simulated mov, ld, st and cvta: addresses, their state spaces and the access checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import sim_rules as R
from . import types as T
from .sim_memory import _MASK, _U64, GENERIC_SHARED, PARAM_BASE, SimError
from .sim_parse import Instr, Operand
from .sim_values import _misaligned, _sel, _tids, _type

if TYPE_CHECKING:
    from .sim import _Cta


def _mov(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, s = ins.ops
    w = T.bits(t)
    if d.kind == "vec":  # unpack
        raw = c.raw(ins, s, t, exe)
        pw = w // len(d.items)
        for i, r in enumerate(d.items):
            c.put(r.name, (raw >> _U64(i * pw)) & _U64(_MASK[pw]), f"b{pw}", exe)
        return
    if s.kind == "vec":  # pack
        pw = w // len(s.items)
        acc = np.zeros(c.n, _U64)
        for i, r in enumerate(s.items):
            acc |= (c.raw(ins, r, f"b{pw}", exe) & _U64(_MASK[pw])) << _U64(i * pw)
        c.put(d.name, acc, t, exe)
        return
    c.put_raw(d.name, c.raw(ins, s, t, exe) & _U64(_MASK[w] if t != "pred" else 1), exe)


def _space(ins: Instr) -> str:
    for m in ins.mods:
        s = m.split("::")[0]
        if s in ("param", "global", "shared", "local", "const"):
            return s
    return "generic"


def _addr(c: _Cta, ins: Instr, o: Operand, exe) -> np.ndarray:
    base = o.items[0]
    if base.kind == "sym":
        if base.name in c.shared:
            return np.full(c.n, c.shared[base.name][0] + o.value, np.int64)
        c.fail(ins, f"unknown symbol {base.name}")
    t = "u64"
    raw = c.raw(ins, base, t, exe)
    return (raw + _U64(o.value & _MASK[64])).astype(np.int64)


#: the state spaces (sim_rules codes) an address operand of each instruction state space may hold;
#: an untracked integer is accepted where its value lies in the space's window
_TAKES = {"generic": (R.GENERIC,), "shared": (R.SHARED_CTA,), "global": (R.GLOBAL,)}


def _in_window(a: np.ndarray, base: int, size: int) -> np.ndarray:
    """Which (uint64) addresses lie in [base, base + size)."""
    return (a >= _U64(base)) & (a < _U64(base + size))


def _resolve(
    c: _Cta, ins: Instr, space: str, addrs: np.ndarray, exe, o: Operand | None = None
) -> tuple[str, np.ndarray]:
    """("shared" or "global", the executing threads' addresses) of an address in instruction
    state space ``space``; checks the state space of operand ``o`` (rule state-space) and that
    each address lies in the space's window (shared: a 32-bit shared-window address)."""
    if o is not None and space in _TAKES:
        R.check_space(c, ins, o, _TAKES[space], exe, "address")
    if space == "generic":
        a = _sel(c, addrs.view(_U64), exe)
        sh = np.count_nonzero(_in_window(a, GENERIC_SHARED, 1 << 32))
        if sh == a.size:
            return "shared", (a - _U64(GENERIC_SHARED)).astype(np.int64)
        if sh:
            c.fail(ins, "generic access mixes shared and global addresses in one instruction")
        if np.count_nonzero(_in_window(a, PARAM_BASE, 1 << 32)):
            c.fail(ins, "generic loads and stores of kernel parameters are not supported by the simulator")
        return "global", a.astype(np.int64)
    if space == "shared":
        a = _sel(c, addrs, exe)
        wide = (a.view(_U64) >> _U64(32)) != 0
        if np.count_nonzero(wide):
            bad = int(a[wide][0]) & _MASK[64]
            c.fail(
                ins,
                R.message(
                    "state-space",
                    f".shared address {bad:#x} is not a shared-window address (a generic address? cvta.to.shared "
                    "converts one)",
                ),
            )
        return "shared", a
    if space == "global":
        return "global", _sel(c, addrs, exe)
    c.fail(ins, f"state space .{space} is not supported by the simulator")
    raise AssertionError


def _elem_bytes(t: str) -> int:
    if t == "b128":
        raise SimError(".b128 is not supported by the simulator")
    return max(1, T.bits(t) // 8)


def _ld(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    d, a = ins.ops
    dsts = d.items if d.kind == "vec" else [d]
    space = _space(ins)
    es = _elem_bytes(t)
    if space == "param":
        name = a.items[0].name
        if name not in c.params:
            c.fail(ins, f"unknown parameter {name}")
        ptype, bits = c.params[name]
        c.put(d.name, np.full(c.n, bits, _U64), ptype if ptype != "pred" else "b32", exe)
        return
    width = es * len(dsts)
    kind, addrs = _resolve(c, ins, space, _addr(c, ins, a, exe), exe, a)
    tids = _tids(c, exe)
    if kind == "shared":
        data = c.smem_read(ins, addrs, width, tids)
    else:
        mis = _misaligned(addrs, width)
        if np.count_nonzero(mis):
            c.fail(
                ins,
                R.message("access-align", f"misaligned global load of {width} bytes at {int(addrs[mis != 0][0]):#x}"),
            )
        try:
            data = c.mem.gather(addrs, width, "global load")
        except SimError as e:
            c.fail(ins, str(e), exe)
    if T.kind(t) == "s" and es < 8:  # sign-extend loads of signed types
        vals = np.ascontiguousarray(data).view(f"<i{es}").astype(np.int64).view(_U64)
    else:
        vals = np.ascontiguousarray(data).view(f"<u{es}").astype(_U64)
    for i, r in enumerate(dsts):
        if exe is c.ones:
            full = np.ascontiguousarray(vals[:, i])
        else:
            full = np.zeros(c.n, _U64)
            full[exe] = vals[:, i]
        c.put(r.name, full, "b64", exe)  # zero/sign-extended already


def _st(c: _Cta, ins: Instr, exe) -> None:
    t = _type(ins)
    a, s = ins.ops
    srcs = s.items if s.kind == "vec" else [s]
    es = _elem_bytes(t)
    width = es * len(srcs)
    kind, addrs = _resolve(c, ins, _space(ins), _addr(c, ins, a, exe), exe, a)
    cols = [_sel(c, c.raw(ins, r, t, exe), exe) & _U64(_MASK[8 * es] if es < 8 else _MASK[64]) for r in srcs]
    vals = cols[0][:, None] if len(cols) == 1 else np.stack(cols, axis=1)
    if es < 8:
        vals = vals.astype(f"<u{es}")
    data = np.ascontiguousarray(vals).view(np.uint8).reshape(len(addrs), width)
    tids = _tids(c, exe)
    if kind == "shared":
        c.smem_write(ins, addrs, data, tids)
        return
    mis = _misaligned(addrs, width)
    if np.count_nonzero(mis):
        c.fail(
            ins, R.message("access-align", f"misaligned global store of {width} bytes at {int(addrs[mis != 0][0]):#x}")
        )
    try:
        c.mem.scatter(addrs, data, "global store")
    except SimError as e:
        c.fail(ins, str(e), exe)


#: state spaces (sim_rules codes) whose addresses cvta.<space> converts to generic ones
_CVTA_FROM = {"shared": (R.SHARED_CTA, R.SHARED_CLUSTER), "param": (R.PARAM,), "global": (R.GLOBAL,)}


def _cvta(c: _Cta, ins: Instr, exe) -> None:
    """cvta.<space> (space -> generic) and cvta.to.<space> (generic -> space) for .shared,
    .param (kernel parameters: generic = PARAM_BASE + .param address) and .global (identity);
    the source must be an address of the space it converts from (rule state-space)."""
    d, s = ins.ops
    t = _type(ins)
    to = ins.mods[0] == "to"
    full = ins.mods[1 if to else 0]
    space = full.split("::")[0]
    if space not in _CVTA_FROM:
        c.fail(ins, f"cvta for .{space} is not supported by the simulator")
    if t != "u64":
        c.fail(ins, "cvta with 32-bit addresses is not supported by the simulator (.address_size 64)")
    R.check_space(c, ins, s, (R.GENERIC,) if to else _CVTA_FROM[space], exe, "source")
    v = c.raw(ins, s, t, exe)
    windows = {"shared": (GENERIC_SHARED, 1 << 32), "param": (PARAM_BASE, max(c.k.param_end, 1))}
    if to:
        a = _sel(c, v, exe)
        if space in windows:
            out = ~_in_window(a, *windows[space])
        else:  # global: anything outside the other windows
            out = _in_window(a, GENERIC_SHARED, 1 << 32) | _in_window(a, PARAM_BASE, 1 << 32)
        if np.count_nonzero(out):
            c.fail(
                ins,
                R.message(
                    "state-space",
                    f"generic address {int(a[out][0]):#x} does not fall within the address window of .{full}",
                ),
            )
    if space in windows:
        v = v - _U64(windows[space][0]) if to else v + _U64(windows[space][0])
    c.put(d.name, v, t, exe)
