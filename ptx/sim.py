"""A functional simulator for the PTX this package emits: kernels run on the CPU, checked.

    mem = sim.Memory()
    x = mem.upload(np.arange(n, dtype=np.float32))          # device address (int)
    y = mem.alloc(4 * n)
    sim.launch(module.text(), "vadd", grid=(g, 1, 1), block=(256, 1, 1), args=(x, x, y, n), memory=mem)
    mem.read(y, np.float32, n)

It parses the PTX *text* (what ptxas would get) and executes one CTA at a time, all its threads
as numpy vectors. Threads diverge freely: each has its own program counter and the simulator
always runs the threads at the lowest one (min-PC reconvergence), which is exact for the
functional result of structured code. Nothing undefined passes silently; a :class:`SimError`
names the kernel, the PTX line and the threads when a kernel

- reads or writes global memory outside every allocation, or misaligned;
- uses an address in a state space the instruction does not take, or aligned less than the PTX ISA
  requires (the rule table :data:`ptx.sim_rules.RULES`, e.g. the .param-space address ``mov`` gives
  as ``cp.async.bulk.tensor``'s tensorMap, which wants a generic one): every address the simulator
  computes carries its state space (param, shared::cta, shared::cluster, global, generic), and the
  error names the rule;
- touches shared memory outside its arrays, reads bytes a ``cp.async`` has not completed
  (no ``cp.async.wait_group`` yet), or races: a byte written by one warp and read or written by
  another with no ``bar.sync`` between them (detected per barrier epoch, whatever the order);
- reads a register before any instruction wrote it (per thread);
- runs ``mma.sync.aligned`` / ``ldmatrix.sync.aligned`` with part of a warp, ``shfl.sync`` with
  a membermask that is not the set of threads executing it, or takes a lane outside it;
- waits at ``bar.sync`` while other threads of the CTA wait elsewhere or run to a different one;
- runs for more than ``max_steps`` instructions.

Numerics: integer ops wrap like the hardware; float arithmetic and conversions are correctly
rounded as the PTX ISA defines them (:mod:`ptx.sim_float`): ``fma``/``mad`` round once (f16/f32
vectorised, f64 exactly per lane), ``.rz/.rm/.rp`` exactly per lane, ``.ftz`` flushes f32/f16
subnormal inputs and results to a zero of their sign, 64-bit integers convert with one rounding,
float -> integer saturates; NaN results of f32 arithmetic (0x7fffffff), f16 arithmetic and
f32 -> f16/bf16 (0x7fff) and cvt.rna.tf32 (the H200's 0x7fc00000 with the sign kept) are the
canonical ones. ``mma.sync`` and ``wgmma`` multiply the quantized inputs exactly and accumulate in
float64 (the tensor core's internal order and precision are not modelled: results are held to
`minijit.cuda.hwrecord.accumulation_bound`; ``wgmma`` reads tf32 operands from raw fp32 in shared
memory by truncating them to 10 mantissa bits, as an H200 does). tests/ptx/test_sim_oracle.py
holds every float form to an independent softfloat. Supported: the instructions
:mod:`ptx.builder` emits, except ``.b128`` registers, f16x2/bf16 arithmetic and
``div.approx/full``.
The simulator is slow (tens of microseconds per warp instruction): it is for tests of small
launches, never for timing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import sim_rules as R
from . import types as T

# the address map and NaN constants, public here as before the split
from .sim_arith import CANONICAL_NAN as CANONICAL_NAN
from .sim_arith import _arith, _cvt, _logic, _selp, _setp, _shift
from .sim_async import _cp_async, _deliver_tma, _fence, _mbar_report, _mbar_try_wait, _mbarrier
from .sim_memops import _cvta, _ld, _mov, _st
from .sim_memory import _MASK, _U64, PARAM_BASE, SHARED_BASE, Memory, SimError, _arange
from .sim_memory import GENERIC_SHARED as GENERIC_SHARED
from .sim_memory import GLOBAL_BASE as GLOBAL_BASE
from .sim_parse import Instr, KernelCode, Operand, Program, _program
from .sim_values import _FROM_BITS, _imm_bits, _misaligned, _to_bits
from .sim_warp import _ldmatrix, _mma_sync, _shfl
from .sim_wgmma import _setmaxnreg, _wgmma

__all__ = ["SimError", "Memory", "Program", "LaunchStats", "launch"]

# --------------------------------------------------------------------------- one CTA


@dataclass
class LaunchStats:
    """What a launch executed: CTAs, warp-instructions, released barriers, completed cp.async."""

    ctas: int = 0
    warp_instructions: int = 0
    barriers: int = 0
    async_copies: int = 0


class _Cta:
    def __init__(
        self,
        k: KernelCode,
        mem: Memory,
        params: dict,
        ctaid,
        nctaid,
        block,
        stats,
        max_steps,
        dyn_shared=0,
        pspace=None,
    ):
        self.k, self.mem, self.params, self.stats, self.max_steps = k, mem, params, stats, max_steps
        self.pspace = pspace or {}  # param-space address -> (name, bytes) of array parameters
        nx, ny, nz = block
        n = nx * ny * nz
        self.n = n
        lin = np.arange(n, dtype=np.int64)
        self.sregs = {
            "%tid.x": lin % nx,
            "%tid.y": (lin // nx) % ny,
            "%tid.z": lin // (nx * ny),
            "%laneid": lin % 32,
            "%warpid": lin // 32,
        }
        for ax, i in zip("xyz", range(3), strict=True):
            self.sregs[f"%ntid.{ax}"] = np.full(n, block[i], np.int64)
            self.sregs[f"%ctaid.{ax}"] = np.full(n, ctaid[i], np.int64)
            self.sregs[f"%nctaid.{ax}"] = np.full(n, nctaid[i], np.int64)
        self.sregs_u64 = {name: v.astype(_U64) for name, v in self.sregs.items()}
        for v in self.sregs_u64.values():
            v.flags.writeable = False
        self.lane, self.warp = lin % 32, lin // 32
        self.nwarps = -(-n // 32)
        self._pad = self.nwarps * 32 - n  # threads to add so that warps reshape as rows of 32
        self.ones = np.ones(n, bool)  # the mask of every thread; `exe is self.ones` is a fast path
        self.ones.flags.writeable = False
        self.tids = _arange(n)  # the indices of every thread (np.flatnonzero(self.ones))
        self._wv: dict[int, np.ndarray] = {}
        self.regs: dict[str, np.ndarray] = {}
        self.defined: dict[str, np.ndarray] = {}
        # registers holding addresses: their state-space code, or codes per thread (sim_rules.set_spaces)
        self.space: dict[str, np.ndarray | int] = {}
        self.full_def: set[str] = set()  # registers defined in every thread (their reads need no check)
        self.shared = dict(k.shared)
        self.shared_end = k.shared_end
        for name, align in k.extern.items():  # dynamic shared memory: aligned as declared, no more
            base = -(-self.shared_end // 1024) * 1024 + (align if align < 1024 else 0)
            self.shared[name] = (base, dyn_shared)
            self.shared_end = base + dyn_shared
        if dyn_shared and not k.extern:
            raise SimError(f"{k.name}: {dyn_shared} bytes of dynamic shared memory but no .extern .shared array")
        self.smem = np.zeros(self.shared_end, np.uint8)
        size = self.shared_end
        self.w_warp = np.full(size, -1, np.int64)
        self.w_epoch = np.full(size, -1, np.int64)
        self.r_warp = np.full(size, -1, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)
        self.pending = np.zeros(size, np.int32)
        self.epoch = 0
        self.committed = np.zeros(n, np.int64)
        self.copies: list[dict] = []
        self.ctaid = ctaid
        # Hopper state: mbarriers, bulk tensor copies in flight, wgmma groups, proxy fences
        self.mbar: dict[int, dict] = {}
        self.mb_wait = np.full(n, -1, np.int64)  # mbarrier a thread is parked on (try_wait), -1: none
        self.tma: list[dict] = []
        self.async_reads = np.zeros(size, np.int32)  # bytes read by wgmma operations not yet waited for
        self.proxy_dirty = np.zeros(size, bool)  # generic writes not yet ordered by fence.proxy.async
        self.track = any(i.op == "wgmma" for i in k.code)
        self.step = 0
        self.cur_ins: Instr | None = None
        self.fence_step = np.full(n, -1, np.int64)
        self.gen_write: dict[str, np.ndarray] = {}
        # per accumulator register: wgmma operations not yet retired that write it, per thread (a
        # count: groups may chain on the same accumulators, each retiring at its own wait_group)
        self.inflight: dict[str, np.ndarray] = {}
        self.wg_open: dict[int, list] = {}
        self.wg_groups: dict[int, list] = {}

    # -- errors ------------------------------------------------------------------------------
    def fail(self, ins: Instr, msg: str, threads=None) -> None:
        who = ""
        if threads is not None:
            tids = np.flatnonzero(threads)[:4].tolist()
            who = f" (threads {tids}{'...' if np.count_nonzero(threads) > 4 else ''})"
        raise SimError(f"{self.k.name}: line {ins.line}: `{ins.text}`: {msg}; CTA {self.ctaid}{who}")

    # -- registers ---------------------------------------------------------------------------
    def raw(self, ins: Instr, o: Operand, t: str, exe: np.ndarray) -> np.ndarray:
        """Raw bits (uint64, one per thread) of a source operand."""
        if o.kind == "reg":
            if self.inflight and o.name in self.inflight and (self.inflight[o.name][exe] > 0).any():
                self.fail(ins, f"reads {o.name}, an accumulator of a wgmma not yet waited for (wgmma.wait_group)", exe)
            if o.name in self.full_def:
                return self.regs[o.name]
            r = self.regs.get(o.name)
            d = self.defined.get(o.name)
            if r is None or not d[exe].all():
                bad = exe if d is None else exe & ~d
                self.fail(ins, f"reads {o.name} before it is written", bad)
            return r
        if o.kind == "imm":
            v = o.bits.get((t, self.n))
            if v is None:
                v = o.bits[(t, self.n)] = _imm_bits(o, t, self.n)
            return v
        if o.kind == "sreg":
            return self.sregs_u64[o.name]
        if o.kind == "sym":
            if o.name in self.shared:
                return np.full(self.n, self.shared[o.name][0], _U64)
            if o.name in self.k.param_offset:  # its address in the .param state space (not generic)
                return np.full(self.n, self.k.param_offset[o.name], _U64)
            self.fail(ins, f"unknown symbol {o.name}")
        self.fail(ins, f"operand kind {o.kind} cannot be read as a value")
        raise AssertionError  # unreachable

    def get(self, ins: Instr, o: Operand, t: str, exe: np.ndarray) -> np.ndarray:
        return _FROM_BITS[t](self.raw(ins, o, t, exe))

    def put(self, name: str, value, t: str, exe: np.ndarray) -> None:
        """Write typed ``value`` (a float for float types: use :meth:`put_raw` for bit patterns)."""
        self.put_raw(name, _to_bits(value, t, self.n), exe)

    def put_raw(self, name: str, bits: np.ndarray, exe: np.ndarray) -> None:
        """Write raw register bits (uint64) in the threads of ``exe``."""
        if self.track:
            if name in self.inflight and (self.inflight[name][exe] > 0).any():
                self.fail(self.cur_ins, f"writes {name}, an accumulator of a wgmma not yet waited for", exe)
            g = self.gen_write.get(name)
            self.gen_write[name] = np.where(exe, self.step, -1 if g is None else g)
        if exe is self.ones:  # every thread writes: the bits themselves (registers are never changed in place)
            if bits.strides != (8,):
                bits = bits.copy()
            bits.flags.writeable = False
            self.regs[name] = bits
            self.defined[name] = self.ones
            self.full_def.add(name)
            return
        old = self.regs.get(name)
        if old is None:
            self.regs[name] = np.where(exe, bits, _U64(0))
            self.defined[name] = exe.copy()
        else:
            self.regs[name] = np.where(exe, bits, old)
            if name not in self.full_def:
                self.defined[name] = self.defined[name] | exe
                if np.count_nonzero(self.defined[name]) == self.n:
                    self.full_def.add(name)

    # -- shared memory -----------------------------------------------------------------------
    def _smem_index(self, ins, addrs: np.ndarray, width: int, threads: np.ndarray, rule="access-align") -> np.ndarray:
        a = addrs.astype(np.int64)
        bad = (a < SHARED_BASE) | (a + width > self.shared_end)
        if np.count_nonzero(bad):
            self.fail(
                ins,
                f"shared access of {width} bytes at {int(a[bad][0])} is outside the .shared arrays "
                f"[{SHARED_BASE}, {self.shared_end})",
                self._mask(threads[bad]),
            )
        mis = _misaligned(a, width)
        if np.count_nonzero(mis):
            self.fail(
                ins,
                R.message(rule, f"misaligned shared access of {width} bytes at {int(a[mis != 0][0])}"),
                self._mask(threads[mis != 0]),
            )
        return a[:, None] + _arange(width)

    def _warps_of(self, threads: np.ndarray, width: int) -> np.ndarray:
        """The warp of each byte (``width`` per thread) that ``threads`` access."""
        if threads is self.tids:  # every thread: cached
            wv = self._wv.get(width)
            if wv is None:
                wv = self._wv[width] = np.repeat(self.warp, width)
                wv.flags.writeable = False
            return wv
        return np.repeat(self.warp[threads], width)

    def in_flight(self) -> bool:
        """Are cp.async or bulk tensor copies in flight (else no shared byte is pending)?"""
        return bool(self.copies) or bool(self.tma)

    def _mask(self, tids: np.ndarray) -> np.ndarray:
        m = np.zeros(self.n, bool)
        m[tids] = True
        return m

    def smem_read(self, ins, addrs, width, threads, rule="access-align") -> np.ndarray:
        """Bytes (n, width) of shared memory; checks pending async copies and races (``rule``:
        the alignment rule the access follows)."""
        idx = self._smem_index(ins, addrs, width, threads, rule)
        flat, wv = idx.reshape(-1), self._warps_of(threads, width)
        if self.in_flight() and np.count_nonzero(self.pending[flat] > 0):
            self.fail(
                ins, "reads shared memory that a cp.async has not completed (missing wait_group?)", self._mask(threads)
            )
        race = (self.w_epoch[flat] == self.epoch) & (self.w_warp[flat] != wv)
        if np.count_nonzero(race):
            j = int(np.flatnonzero(race)[0])
            self.fail(
                ins,
                f"race: warp {wv[j]} reads shared byte {flat[j]} that warp {self.w_warp[flat[j]]} "
                "wrote with no bar.sync in between",
            )
        fresh = self.r_epoch[flat] != self.epoch
        self.r_warp[flat[fresh]] = wv[fresh]
        self.r_epoch[flat] = self.epoch
        multi = self.r_warp[flat] != wv
        self.r_warp[flat[multi]] = -2
        return self.smem[idx]

    def _check_write(self, ins, flat, wv, what="writes"):
        same = self.epoch
        raw_ = (self.w_epoch[flat] == same) & (self.w_warp[flat] != wv)
        war = (self.r_epoch[flat] == same) & (self.r_warp[flat] != wv)
        if np.count_nonzero(raw_ | war):
            j = int(np.flatnonzero(raw_ | war)[0])
            other = self.w_warp[flat[j]] if raw_[j] else self.r_warp[flat[j]]
            kind = "wrote" if raw_[j] else "read"
            other = "several warps" if other == -2 else f"warp {other}"
            self.fail(
                ins, f"race: warp {wv[j]} {what} shared byte {flat[j]} that {other} {kind} with no bar.sync in between"
            )

    def smem_write(self, ins, addrs, data: np.ndarray, threads) -> None:
        width = data.shape[1]
        idx = self._smem_index(ins, addrs, width, threads)
        flat, wv = idx.reshape(-1), self._warps_of(threads, width)
        if self.in_flight() and np.count_nonzero(self.pending[flat] > 0):
            self.fail(ins, "writes shared memory that a cp.async has not completed", self._mask(threads))
        self._check_write(ins, flat, wv)
        self.proxy_dirty[flat] = True
        self.w_warp[flat] = wv
        self.w_epoch[flat] = self.epoch
        if np.count_nonzero(self.w_warp[flat] != wv):
            self.fail(ins, "race: two warps write the same shared byte in one instruction")
        self.smem[idx] = data

    # -- run ---------------------------------------------------------------------------------
    def run(self) -> None:
        code = self.k.code
        ncode = len(code)
        n = self.n
        pc = np.zeros(n, np.int64)
        alive = np.ones(n, bool)
        waiting = np.zeros(n, bool)
        wait_id = np.full(n, -1, np.int64)
        wait_cnt = np.full(n, -1, np.int64)  # thread count of a named barrier, -1: the whole CTA
        steps = 0
        # The threads to run, `act`, are the runnable ones at the lowest pc `p`. They stay the same
        # while p < nxt (the lowest pc of the other runnable threads) and no thread exits, waits or
        # parks: then the loop only advances p, and their entries in `pc` are stale (p holds them).
        act = None
        p = nxt = nact = warps = 0
        while True:
            if act is None or p >= nxt:
                if act is not None:
                    pc[act] = p
                    act = None
                runnable = alive & ~waiting & (self.mb_wait < 0)
                if not runnable.any():
                    if self._unblock(pc, alive, waiting, wait_id, wait_cnt):
                        continue
                    return
                p = int(pc[runnable].min())
                if p >= ncode:
                    self.fail(code[-1], "ran past the end of the kernel without ret/exit", runnable & (pc == p))
                act = runnable & (pc == p)
                rest = runnable & ~act
                nxt = min(int(pc[rest].min()), ncode) if np.count_nonzero(rest) else ncode
                nact = np.count_nonzero(act)
                if nact == n:
                    act = self.ones
                warps = self.warps_in(act)
            ins = code[p]
            self.cur_ins = ins
            steps += 1
            self.step = steps
            self.stats.warp_instructions += warps
            if steps > self.max_steps:
                self.fail(ins, f"no end after {self.max_steps} instructions (an endless loop?)")
            exe, nexe = act, nact
            if ins.guard is not None:
                g = self.get(ins, ins.guard_op, "pred", act)
                exe = act & (~g if ins.negate else g)
                nexe = np.count_nonzero(exe)
                if nexe == nact:
                    exe = act  # the guard holds in every thread of act
            op = ins.op
            if nexe == 0:  # nothing executes: every thread of act steps on
                p += 1
                continue
            if op == "bra":
                if exe is act:
                    p = self.k.labels[ins.ops[0].name]
                else:
                    pc[exe] = self.k.labels[ins.ops[0].name]
                    pc[act & ~exe] = p + 1
                    act = None
                continue
            if op in ("ret", "exit", "bar") or (op == "mbarrier" and ins.mods[0] == "try_wait"):
                pc[act] = p  # these change which threads can run: the set is computed again
                act, cur = None, act
            else:
                handler = _HANDLERS.get(op)
                if handler is None:
                    self.fail(ins, f"instruction {op} is not supported by the simulator")
                tracked = ins.names_space or (self.space and not self.space.keys().isdisjoint(ins.space_regs))
                upd = R.source_spaces(self, ins) if tracked else None
                handler(self, ins, exe)
                if upd is not None:  # the state spaces of the addresses it wrote
                    R.set_spaces(self, *upd, exe)
                p += 1
                if op == "mbarrier":  # a completed phase releases parked threads
                    pc[act] = p
                    act = None
                continue
            if op in ("ret", "exit"):
                alive[exe] = False
                pc[cur & ~exe] += 1
                continue
            if op == "bar":
                pc[cur & ~exe] += 1
                self._bar_sync(ins, exe, pc, waiting, wait_id, wait_cnt)
                continue
            # mbarrier.try_wait
            parked = _mbar_try_wait(self, ins, exe)
            pc[cur & ~parked] += 1  # parked threads run try_wait again when the phase completes

    def _unblock(self, pc, alive, waiting, wait_id, wait_cnt) -> bool:
        """No thread can run: deliver bulk copies, or release the CTA-wide barrier every live thread
        waits at (True: go on), or finish (False: every thread exited); anything else is a deadlock."""
        code = self.k.code
        if self.tma:  # the copy engine delivers while every thread waits
            _deliver_tma(self)
            return True
        if not alive.any():
            if self.tma or any(self.wg_groups.values()) or any(self.wg_open.values()):
                self.fail(code[-1], "the CTA exits with bulk copies or wgmma operations in flight")
            return False
        ins = code[int(pc[alive][0])]
        if (alive & (self.mb_wait >= 0)).any():
            self.fail(ins, "deadlock: " + _mbar_report(self, alive))
        ids = np.unique(wait_id[alive])
        if ids.size != 1 or (wait_cnt[alive] != -1).any():
            self.fail(ins, f"threads wait at different or incomplete barriers {ids.tolist()}: deadlock")
        waiting[:] = False
        pc[alive] += 1
        self.epoch += 1
        self.stats.barriers += 1
        return True

    def _bar_sync(self, ins: Instr, exe, pc, waiting, wait_id, wait_cnt) -> None:
        """bar.sync by the threads ``exe``: they wait; a named barrier of fewer threads than the CTA
        is released here once its count has arrived (the CTA-wide one in :meth:`_unblock`)."""
        n = self.n
        bids = self.get(ins, ins.ops[0], "u32", exe)
        counts = self.get(ins, ins.ops[1], "u32", exe) if len(ins.ops) > 1 else np.full(n, n)
        ids = _distinct(bids[exe])
        for bid in ids:
            here = exe if len(ids) == 1 else exe & (bids == bid)
            cs = _distinct(counts[here])
            if len(cs) != 1 or cs[0] <= 0 or cs[0] % 32:
                self.fail(ins, f"bar.sync {bid}: thread count {cs} is not one positive multiple of 32")
            count = -1 if cs[0] == n else cs[0]
            waiting[here] = True
            wait_id[here] = bid
            wait_cnt[here] = count
            if count < 0:
                continue  # the whole CTA: released when every live thread waits
            # a named barrier of `count` threads: released once they have all arrived
            arrived = waiting & (wait_id == bid)
            if (wait_cnt[arrived] != count).any():
                self.fail(ins, f"barrier {bid} is used with different thread counts", arrived)
            k = int(arrived.sum())
            if k > count:
                self.fail(ins, f"{k} threads arrive at barrier {bid} of {count}", arrived)
            if k == count:
                if np.unique(self.warp[arrived]).size > 1:
                    self.fail(ins, "named barriers across several warps are not supported by the simulator")
                waiting[arrived] = False
                wait_cnt[arrived] = -1
                pc[arrived] += 1
                self.stats.barriers += 1

    def warps_in(self, threads: np.ndarray) -> int:
        """Number of warps with at least one thread in the boolean mask ``threads``."""
        if threads is self.ones:
            return self.nwarps
        if self._pad:
            threads = np.concatenate([threads, np.zeros(self._pad, bool)])
        return int(np.count_nonzero(threads.reshape(self.nwarps, 32).any(axis=1)))

    # -- warp-collective checks --------------------------------------------------------------
    def whole_warps(self, ins: Instr, exe: np.ndarray) -> np.ndarray:
        """Warp indices executing ``ins``; every thread of those warps must execute it."""
        if exe is self.ones:  # the whole CTA: every warp, none in part
            warps = np.arange(self.nwarps)
        else:
            warps = np.unique(self.warp[exe])
            part = np.isin(self.warp, warps) & ~exe
            if part.any():
                self.fail(ins, ".sync.aligned instruction executed by part of a warp", part)
        if self.n % 32:
            self.fail(ins, "warp-collective instruction in a CTA that is not a whole number of warps")
        return warps


def _distinct(v: np.ndarray) -> list[int]:
    """The distinct values of the non-empty integer array ``v``, ascending (np.unique, as ints)."""
    first = int(v[0])
    return [first] if not np.count_nonzero(v != first) else np.unique(v).tolist()


# --------------------------------------------------------------------------- instruction handlers


_HANDLERS = {
    "mov": _mov,
    "ld": _ld,
    "st": _st,
    "cvta": _cvta,
    "add": _arith,
    "sub": _arith,
    "mul": _arith,
    "mad": _arith,
    "fma": _arith,
    "div": _arith,
    "min": _arith,
    "max": _arith,
    "and": _logic,
    "or": _logic,
    "xor": _logic,
    "not": _logic,
    "shl": _shift,
    "shr": _shift,
    "setp": _setp,
    "selp": _selp,
    "cvt": _cvt,
    "shfl": _shfl,
    "cp": _cp_async,
    "ldmatrix": _ldmatrix,
    "mma": _mma_sync,
    "mbarrier": lambda c, ins, exe: _mbarrier(c, ins, exe),
    "fence": lambda c, ins, exe: _fence(c, ins, exe),
    "wgmma": lambda c, ins, exe: _wgmma(c, ins, exe),
    "setmaxnreg": lambda c, ins, exe: _setmaxnreg(c, ins, exe),
}


# --------------------------------------------------------------------------- launch


def _dim3(x, what: str) -> tuple[int, int, int]:
    t = tuple(x) if isinstance(x, tuple | list) else (x,)
    if not 1 <= len(t) <= 3 or not all(isinstance(v, int | np.integer) and v >= 1 for v in t):
        raise ValueError(f"{what} must be 1-3 positive ints, got {x!r}")
    return tuple(int(v) for v in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


def launch(
    ptx_text: str | Program,
    kernel: str,
    grid,
    block,
    args,
    memory: Memory,
    *,
    max_steps: int = 2_000_000,
    ctas=None,
    shared_bytes: int = 0,
) -> LaunchStats:
    """Run ``kernel`` of the module over ``grid`` x ``block`` threads on ``memory``.

    ``args`` are the kernel parameters in order: ints (device addresses or integers, stored
    with the parameter's width) or floats for .f32/.f64 parameters; array parameters (tensor maps,
    ``.param .align 64 .b8 t[128]``) take ``bytes`` of their size. ``shared_bytes``: dynamic shared
    memory (the ``.extern .shared`` array). ``ctas`` optionally limits
    the run to some CTA indices (tuples), e.g. the corners of a large grid. CTAs run one after
    another, in grid order.
    """
    prog = ptx_text if isinstance(ptx_text, Program) else _program(ptx_text)
    if kernel not in prog.kernels:
        raise SimError(f"kernel {kernel!r} not in module (has {', '.join(prog.kernels)})")
    k = prog.kernels[kernel]
    g, b = _dim3(grid, "grid"), _dim3(block, "block")
    if k.reqntid is not None and np.prod(k.reqntid) != np.prod(b):
        raise SimError(f"{kernel}: block {b} does not match .reqntid {k.reqntid}")
    if len(args) != len(k.params):
        raise SimError(
            f"{kernel} takes {len(k.params)} parameters ({', '.join(n for _, n in k.params)}), got {len(args)}"
        )
    params = {}
    pspace = {}
    if not isinstance(shared_bytes, int) or shared_bytes < 0:
        raise SimError(f"shared_bytes must be an int >= 0, got {shared_bytes!r}")
    for (t, name), v in zip(k.params, args, strict=True):
        if name in k.param_bytes:
            nb = k.param_bytes[name]
            if not isinstance(v, bytes | bytearray) or len(v) != nb:
                raise SimError(
                    f"parameter {name} is {nb} bytes (a tensor map): pass bytes of that length, got {v!r:.60}"
                )
            a = PARAM_BASE + k.param_offset[name]  # its generic address (cvta.param)
            pspace[a] = (name, bytes(v))
            params[name] = ("u64", a)
            continue
        if T.is_float(t):
            bits = int(_to_bits(np.asarray([float(v)]), t, 1)[0])
        else:
            if not isinstance(v, int | np.integer) or isinstance(v, bool):
                raise SimError(f"parameter {name} (.{t}) needs an int, got {v!r}")
            w = T.bits(t)
            if not -(2 ** (w - 1)) <= int(v) < 2**w:
                raise SimError(f"parameter {name} (.{t}): {v} does not fit in {w} bits")
            bits = int(v) & _MASK[T.bits(t)]
        params[name] = (t, bits)
    stats = LaunchStats()
    order = ctas if ctas is not None else [(x, y, z) for z in range(g[2]) for y in range(g[1]) for x in range(g[0])]
    for cta in order:
        _Cta(k, memory, params, tuple(cta), g, b, stats, max_steps, shared_bytes, pspace).run()
        stats.ctas += 1
    return stats
