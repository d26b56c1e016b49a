"""The state-space and alignment rules :mod:`ptx.sim` enforces, written down once, and the
state space of every address the simulator computes.

A simulator stands in for the chip only if it refuses at least what the chip refuses. The H200
run of issue 34 faulted (CUDA_ERROR_MISALIGNED_ADDRESS) on a ``cp.async.bulk.tensor`` whose
tensor-map operand came from ``mov.u64 %rd, tmap`` (the parameter's address *in the .param state
space*, an offset) where the PTX ISA wants a generic address; the simulator had accepted it. So
the simulator now tracks where each address came from and checks every address operand against
the table :data:`RULES` (rule name, instruction, operand, state space, alignment, PTX ISA
citation). A violation raises ``SimError`` with the rule named: ``[rule tensormap-generic] ...``.

State spaces of values (per register and thread, :data:`SPACES`):

- ``param``: an address in the kernel-parameter state space; ``mov`` of a ``.param`` symbol gives
  it (its offset there). Only ``ld.param``/``cvta.param`` take it; it is *not* a generic address.
- ``shared::cta``: a shared-window address (``mov`` of a ``.shared`` symbol, ``cvta.to.shared``).
- ``shared::cluster``: ``cvta.to.shared::cluster`` (a shared::cta address is also a valid
  shared::cluster address of the executing CTA, not the reverse).
- ``global``: ``cvta.to.global``.
- ``generic``: ``cvta.<space>`` of an address of that space.
- none: an integer of unknown origin (``ld.param`` of a pointer, a loaded value, arithmetic):
  accepted wherever its *value* is a valid address (the simulator's address windows are disjoint:
  shared addresses are small, global allocations start at 2^40, the generic windows of the kernel
  parameters and of shared memory at 2^47 and 2^48).

Address arithmetic keeps the space: ``add``/``sub`` of an address and a non-address, ``mad`` with
an address addend, ``and`` with an immediate (aligning), integer ``cvt`` (the ISA's way to
truncate or zero-extend addresses), ``mov`` and ``selp`` of addresses of one space. Any other
result is not an address.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["RULES", "SPACES", "Rule", "message"]

#: state-space codes of tracked values (0: not an address of a known space)
NONE, PARAM, SHARED_CTA, SHARED_CLUSTER, GLOBAL, GENERIC = range(6)
SPACES = {PARAM: "param", SHARED_CTA: "shared::cta", SHARED_CLUSTER: "shared::cluster", GLOBAL: "global",
          GENERIC: "generic"}  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """One rule: what ``instruction``'s ``operand`` must be (state ``space``, ``align``), and where
    the PTX ISA (or the CUDA driver API) says so. ``align_bytes``: the alignment in bytes where it
    is one number (0: given by the access or by the swizzle, see ``align``)."""

    name: str
    instruction: str
    operand: str
    space: str
    align: str
    align_bytes: int
    cite: str


_ISA = "PTX ISA (docs.nvidia.com/cuda/parallel-thread-execution)"
_TMA_GUIDE = "CUDA C++ Programming Guide, TMA alignment requirements"
#: every rule the simulator checks, by name (see :func:`message`)
RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule(
            "tensormap-generic",
            "cp.async.bulk.tensor",
            "tensorMap",
            "generic (the generic address of a tensor map in .param, .const or .global; the .param "
            "address mov gives is not one: cvta.param converts it)",
            "64 bytes",
            64,
            f"{_ISA}, 'cp.async.bulk.tensor': 'The operand tensorMap is the generic address of the opaque "
            "tensor-map object which resides in .param space or .const space or .global space'; 'mov': "
            "'mov places the non-generic address of the variable'; 'cvta' (.param: PTX 7.7, sm_70); CUDA "
            "driver API cuTensorMapEncodeTiled: a CUtensorMap is 64-byte aligned",
        ),
        Rule(
            "tma-dst-align",
            "cp.async.bulk.tensor",
            "dstMem",
            "shared::cluster (a shared::cta address of the executing CTA is one)",
            "128 bytes",
            128,
            f"{_TMA_GUIDE} ('Shared memory address: must be 128 byte aligned'); {_ISA}, 'cp.async.bulk.tensor'",
        ),
        Rule(
            "tma-dst-swizzle",
            "cp.async.bulk.tensor",
            "dstMem",
            "shared::cluster",
            "the swizzle pattern's repeat: 1024 / 512 / 256 bytes under the 128 / 64 / 32-byte swizzle",
            0,
            f"{_ISA}, 'Matrix Descriptor Format' (the repeating pattern of the 128 / 64 / 32-byte swizzle "
            "starts on a 1024 / 512 / 256-byte boundary); the swizzle XORs shared address bits [4, 7) with "
            "bits [7, 10), so a box written from another start is read back permuted",
        ),
        Rule(
            "mbarrier-object",
            "mbarrier.*, cp.async.bulk.tensor [mbar]",
            "mbarrier address",
            "shared::cta",
            "8 bytes",
            8,
            f"{_ISA} 9.7.13.15.1 'Size and alignment of mbarrier object' (.b64, alignment 8 bytes, "
            f".shared); {_TMA_GUIDE} ('Shared memory barrier address: must be 8 byte aligned')",
        ),
        Rule(
            "wgmma-desc-start",
            "wgmma.mma_async",
            "matrix descriptor (start address, LBO, SBO)",
            "shared::cta (every byte the descriptor names inside the CTA's shared arrays)",
            "16 bytes (the encoding drops the low 4 bits)",
            16,
            f"{_ISA}, 'Matrix Descriptor Format' ('matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4'; "
            "start address, LBO and SBO 16-byte aligned)",
        ),
        Rule(
            "wgmma-desc-row",
            "wgmma.mma_async",
            "swizzled matrix descriptor",
            "shared::cta",
            "under a swizzle of span S, the bytes of one row of the canonical layout lie in one S-byte "
            "row of the swizzle atom: K-major start % S + 32 <= S, MN-major start % S == 0",
            0,
            f"{_ISA}, 'Shared Memory Matrix Layout' (canonical layouts: K-major swizzled "
            "((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)); the swizzle "
            "atom is 8 rows of S bytes)",
        ),
        Rule(
            "access-align",
            "ld, st",
            "address",
            "the instruction's state space",
            "the access size (element size x vector length)",
            0,
            f"{_ISA}, 'Addresses as Operands' ('The address must be naturally aligned to a multiple of "
            "the access size ... the instruction may fault')",
        ),
        Rule(
            "ldmatrix-row",
            "ldmatrix",
            "row address",
            "shared::cta",
            "16 bytes",
            16,
            f"{_ISA}, 'ldmatrix' (rows of 16 bytes from .shared, addressed as in 'Addresses as Operands')",
        ),
        Rule(
            "cp-async-size",
            "cp.async",
            "dst, src",
            "dst shared::cta, src global",
            "cp-size (4, 8 or 16 bytes)",
            0,
            f"{_ISA}, 'cp.async' (alignment 'as described in Addresses as Operands', access size cp-size)",
        ),
        Rule(
            "state-space",
            "every instruction with an address operand",
            "address",
            "the instruction's state space: .shared takes a shared-window address, .global a global one, "
            "generic addressing a generic one, and a .param address only ld.param / cvta.param",
            "-",
            0,
            f"{_ISA}, 'State Spaces', 'Generic Addressing', 'mov', 'cvta' ('the resulting address is "
            "undefined in cases where the generic address does not fall within the address window of the "
            "specified state space')",
        ),
    )
}


def message(rule: str, detail: str) -> str:
    """The text of a violation of ``rule``: what happened, then the rule and its source."""
    r = RULES[rule]
    return f"{detail} [rule {r.name}: {r.instruction} {r.operand} must be {r.space}, aligned to {r.align}; {r.cite}]"


# --------------------------------------------------------------------------- where addresses come from


def _int(t: str) -> bool:
    return t[0] in "bsu" and t not in ("b128",)


def source_spaces(c, ins) -> tuple[list[str], list[np.ndarray | int]] | None:
    """Before ``ins`` runs: the registers it writes and, per register, the state space of the
    value it will hold (a code array per thread, or a code for every thread); None when no
    tracked state changes (no source or destination is a tracked address)."""
    ops = ins.ops
    if not ops:
        return None
    d = ops[0]
    op = ins.op
    if op in ("st", "cp", "bar", "bra", "ret", "exit", "fence", "setmaxnreg", "mbarrier"):
        if op == "mbarrier" and d.kind == "reg":  # mbarrier.arrive's state: not an address
            return ([d.name], [NONE]) if d.name in c.space else None
        return None
    if d.kind == "vec":
        names = [r.name for r in d.items if r.kind == "reg"]
        hit = [n for n in names if n in c.space]
        return (hit, [NONE] * len(hit)) if hit else None
    if d.kind != "reg":
        return None
    srcs = ops[1:]
    space = NONE
    if op == "mov" and len(srcs) == 1:
        space = space_of(c, srcs[0])
    elif op == "cvta":
        return [d.name], [_cvta_space(ins)]
    elif op in ("add", "sub") and _int(ins.mods[-1]) and len(srcs) == 2:
        a, b = space_of(c, srcs[0]), space_of(c, srcs[1])
        if type(a) is int and type(b) is int:  # one space for every thread: the same rule on ints
            if a != NONE and b == NONE:
                space = a
            elif op == "add" and b != NONE and a == NONE:
                space = b
        elif op == "sub":  # address - offset is an address; address - address is a distance
            space = _where(_nz(a) & ~_nz(b), a, NONE)
        else:
            space = _where(_nz(a) & ~_nz(b), a, _where(_nz(b) & ~_nz(a), b, NONE))
    elif op == "mad" and len(srcs) == 3:  # a * b + address
        a, b, cc = (space_of(c, s) for s in srcs)
        if type(a) is int and type(b) is int and type(cc) is int:  # the same rule on ints
            space = cc if a == NONE and b == NONE else NONE
        else:
            space = _where(_nz(cc) & ~_nz(a) & ~_nz(b), cc, NONE)
    elif op == "and" and len(srcs) == 2 and srcs[1].kind == "imm":  # aligning an address
        space = space_of(c, srcs[0])
    elif op == "cvt" and len(ins.mods) >= 2 and _int(ins.mods[-1]) and _int(ins.mods[-2]):
        space = space_of(c, srcs[0])
    elif op == "selp" and len(srcs) == 3:
        a, b = space_of(c, srcs[0]), space_of(c, srcs[1])
        space = _where(np.equal(a, b), a, NONE)
    if d.name not in c.space and not (space != NONE if type(space) is int else np.count_nonzero(space)):
        return None
    return [d.name], [space]


def _nz(x) -> np.ndarray:
    return np.not_equal(x, NONE)


def _where(cond, a, b):
    out = np.where(cond, a, b)
    return int(out) if out.ndim == 0 else out.astype(np.int8)


def _cvta_space(ins) -> int:
    if ins.mods[0] != "to":
        return GENERIC
    space = ins.mods[1]
    if space.startswith("shared"):
        return SHARED_CLUSTER if space == "shared::cluster" else SHARED_CTA
    return {"global": GLOBAL, "param": PARAM}.get(space.split("::")[0], NONE)


def space_of(c, o) -> np.ndarray | int:
    """State-space code(s) of the value of operand ``o``: a per-thread array or one code."""
    if o.kind == "reg":
        return c.space.get(o.name, NONE)
    if o.kind == "sym":
        if o.name in c.shared:
            return SHARED_CTA
        if o.name in c.k.param_offset:
            return PARAM
    return NONE


def set_spaces(c, names: list[str], spaces: list, exe: np.ndarray) -> None:
    """After the instruction: record the state spaces of the registers it wrote (threads ``exe``).
    A register whose space is the same in every thread holds it as an int code, else a read-only
    int8 array per thread; an untracked register (NONE in every thread) has no entry."""
    for name, space in zip(names, spaces, strict=True):
        if exe is c.ones and type(space) is int:  # every thread: the one code
            if space == NONE:
                c.space.pop(name, None)
            else:
                c.space[name] = space
            continue
        old = c.space.get(name)
        if type(space) is int and (space == old if type(old) is int else old is None and space == NONE):
            continue  # every thread already holds this code (or none): nothing changes
        if exe is c.ones or old is None:
            new = np.broadcast_to(np.asarray(space, np.int8), (c.n,))
            new = np.where(exe, new, np.int8(NONE)) if exe is not c.ones else new.copy()
        else:
            new = np.where(exe, np.asarray(space, np.int8), old).astype(np.int8, copy=False)
        first = int(new[0])
        if not np.count_nonzero(new != first):  # one code in every thread
            if first == NONE:
                c.space.pop(name, None)
            else:
                c.space[name] = first
        else:
            new.flags.writeable = False
            c.space[name] = new


def name(code: int) -> str:
    """The state space a code stands for ("an integer" for none)."""
    return SPACES.get(int(code), "an integer of no known state space")


@functools.cache
def _allowed(want: tuple[int, ...]) -> np.ndarray:
    """A table over the space codes: True for untracked (NONE) and for the codes in ``want``."""
    ok = np.zeros(len(SPACES) + 1, bool)
    ok[[NONE, *want]] = True
    ok.flags.writeable = False  # cached and shared by every caller, in any thread
    return ok


def check_space(c, ins, o, want: tuple[int, ...], exe: np.ndarray, what: str, rule: str = "state-space") -> None:
    """Fail (``c.fail``, naming ``rule``) unless every executing thread's value of address operand
    ``o`` (an ``addr`` operand's base, or a register) is untracked or in one of the spaces ``want``."""
    base = o.items[0] if o.kind == "addr" else o
    sp = space_of(c, base)
    if type(sp) is int:  # one space for every thread
        if sp == NONE or sp in want:
            return
        arr = np.full(c.n, sp, np.int8)
    else:
        arr = sp
    bad = exe & ~_allowed(want)[arr]
    if np.count_nonzero(bad):
        got = name(arr[bad][0])
        want_s = " or ".join(SPACES[w] for w in want) or "no tracked space"
        hint = ""
        if int(arr[bad][0]) == PARAM:
            hint = " (mov of a kernel parameter gives its .param-space address; cvta.param makes it generic)"
        elif got.startswith("shared") and GENERIC in want:
            hint = " (cvta.shared makes it generic)"
        elif GENERIC == int(arr[bad][0]):
            hint = " (cvta.to.<space> converts a generic address)"
        c.fail(ins, message(rule, f"{what} {base.name} holds a {got} address, not {want_s}{hint}"), bad)
