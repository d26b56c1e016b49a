"""Attention's IO-cost model, printed: seed 001 ("FlashAttention on a Napkin") for
O = softmax(Q K^T * scale) V, per (batch, head) with Q: L x E, K: S x E, V: S x Ev, O: L x Ev.

A planning layer only: it chooses tiles and a thread split and says why; no kernel is generated
or run. `plan` models the host CPU (or a pinned profile, `minijit.runtime.features.pinned`),
`hopper_plan` / `hopper_derivation` an H100 SM with the seed's own parameters.

The algorithm (seed §3.2: softmax-contraction is streamable, so attention is; Appendix A.3.2,
Table 4: FlashAttention-2's unscaled online softmax). Query tiles of g_q rows; each tile streams
the key axis in blocks of s_x keys and keeps, per row, the running max mu, the rescale delta and
the running sum z (the three auxiliaries of §5.6 Table 1), and the unscaled output:

    for each key block b:  S = Q_t K_b^T            (g_q x s_x scores)
                           mu' = max(mu, rowmax(S) * scale)
                           P = exp(S * scale - mu');  delta = exp(mu - mu');  z = delta z + rowsum(P)
                           O_t = delta O_t + P V_b;   mu = mu'
    tail:                  O_t = O_t / z

Causal attention is torch's (`minijit.attention.api`): row i sees keys j <= i, so a tile or group
ending at row r sees v = min(S, r) keys, in n = ceil(v / s_x) blocks; otherwise v = S.

**Memory and transfers per level** (values; §4.3 quantization: bytes = values x q for q-byte
elements, a level of C bytes holds C / q values). A level that keeps the Q rows, O rows and softmax
state of a group of g query rows while K and V stream through it in blocks of s keys has, by §3.2
(Figure 21: M >= 2 g d + 2 s d, H = 2 q d + 2 x q d / g, hence g <= M / 2d and
H >= 2 q d + 4 x q d^2 / M):

    M_l = g (E + Ev) + 3 g + s (E + Ev)                 (+ g_q s_x where the score tile lives)
    H_l = L (E + Ev) + sum over groups of v_G (E + Ev)  = L (E + Ev) + ceil(L / g) S (E + Ev)

Q enters and O leaves once; K and V once per group. Per level:

- registers: the two products' register blocks of mr rows x nb columns, §3.1's matrix
  multiplication count (H = a b c (1/g_a + 1/g_c) + the output) with the contractions over E and
  over s_x split into subloops (§5.2). Score tile in L1:
  ``H_reg = sum_t rows_t v_t (E + Ev) (1/nb + 1/mr) + 2 sum_t n_t rows_t Ev + 4 sum_t rows_t v_t``
  (O in and out once per key block, where delta rescales it; the scores stored by Q K^T, loaded for
  the max, loaded and stored as P). Score tile in registers (Q K^T's register block is the whole
  g_q x s_x tile and P feeds P V from registers):
  ``H_reg = sum_t (n_t rows_t + v_t) E + v_t Ev + 2 n_t rows_t Ev``.
- L1: the tile (g = g_q) when its rows, its K/V block and the score tile fit and no larger L2 group
  interleaves tiles; else the K/V block stays for every tile of the L2 group and the tile's rows
  pass once per key block (§3.2 with the roles of the axes exchanged: the key block is the group):
  ``H_L1 = sum_G v_G (E + Ev) + sum_t n_t rows_t (E + 2 Ev)``; where not even the K/V block fits
  next to the score tile, K and V come in once per register block of rows.
- L2: the L2 group of g_2 rows, a multiple of g_q: the largest that fits (the seed's g <= M / 2d),
  or g_q itself; the loop nest is: for each L2 group, for each key block, for each tile of the group.
- L3: the thread's slice of the shared cache, with the L2 group's count.
- any level that holds every key and value of the head (or of a key chunk) next to its rows keeps
  them for all its groups (the seed's intermediate caching, §4.4 and A.2.1): its group is the
  whole query axis, ``H = L (E + Ev) + S (E + Ev)``.
- Hopper: registers hold S, the next S, P, O and the auxiliaries (FlashAttention-3, §6.1; the tensor
  cores read Q, K, V from shared memory); shared memory holds Q and two K/V blocks (loaded
  asynchronously, so doubled: §5.6 Table 1) with the §3.2 count at g = g_q; L2 caches K/V for the
  tiles of a wave (A.2.1, Theorem 2: its effective memory is N_SM M_SM, its group N_SM g_q).

**Time** (§4.2 equation 2: H* = sum_l H_l / Hdot_l, plus compute). CPU, in cycles of the busiest
thread, everything added (one core issues its loads, FMAs and softmax from one instruction stream,
as `minijit.blocking` adds its fills): each level's bytes at its fill bandwidth (registers from L1
at the core's FMA operand rate, ``uarch.CoreModel.fma_rate``: one vector load per FMA pipe per
cycle; L1 from L2 at `minijit.blocking.L1_FILL`; L2 from L3 at ``uarch.CoreModel.llc_stream`` (the
host-specific L3 -> L2 rate; `minijit.blocking.L2_FILL` is the generic one); L3 from memory at
`minijit.schedule.MEM_FILL`), plus the two products' multiply-adds at ``fma_rate`` bytes of
operands per cycle, plus the softmax's vector instructions issued on the FMA pipes: per vector of
scores `EXP_OPS` for the exp (the polynomial exp primitive's sequence) and one each for
scale-and-subtract, max and sum; per row and key block an exp for delta, the z and mu updates and
delta times the O row; horizontal reductions where vectors run along the keys. Hopper, in SM
cycles (§5.7 Table 3's rates, §6.1's intra-warpgroup schedule): one key block takes
max(max(Q K^T, softmax) + P V, its K/V load), where the softmax (exp on the MUFU, then the O
rescale) overlaps only the next block's Q K^T; the SMs take the tiles longest-first, and HBM bounds
from below. Section 6's split of the time between the products and the softmax comes with each
result (`AttentionModel.time`).

**The choice** minimizes the modelled time over: g_q a multiple of the register block's rows (x86-64:
the BRGEMM's ``panel_column_bytes / q`` rows; a shorter query axis is one partial tile), s_x a
multiple of the vector length, the score tile in registers (at most `REG_SCORE_SHARE` of the
register file) or in L1 next to the K block it is computed from (in L2 only where neither can hold
one: very wide heads; its four passes then come into L1 from L2), the tile's working set within
L2, the L2 group, and the thread split:
batch x heads, a head's L2 groups dealt round-robin to several threads when heads are few, or, for
decode (L = 1), the key axis split into chunks whose partial (max, sum, output) triples one thread
merges. Hopper: g_q a multiple of the 128-row warpgroup tile (§5.4), s_x a multiple of 32 (§5.6
Table 1), both within shared memory and the register file.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

__all__ = [
    "AttentionModel",
    "AttentionTiling",
    "GpuSm",
    "H100_SEED",
    "Level",
    "TimeSplit",
    "hopper_derivation",
    "hopper_plan",
    "kernel_g",
    "kernel_s_x",
    "plan",
]

KiB, MiB = 1024, 1024 * 1024

#: element bytes of the dtypes the CPU model takes (the CPU targets' dtypes)
CPU_DTYPES = {"fp32": 4, "fp64": 8}
#: element bytes of the dtypes the Hopper model takes (fp8 runs both products in fp8, as
#: FlashAttention-3's fp8 path does)
GPU_DTYPES = {"fp16": 2, "bf16": 2, "fp8": 1}
#: vector instructions of one exp, per vector, as (FP-class, shuffle): the sequence of
#: `minijit.kernels.x86_64.vexp.emit_exp` with its first constants pinned in registers. fp32: clamp 2,
#: range reduction 6, floor(n/2) 2, degree-6 Horner 6, the 2^n split 3, building 2^n_a 2 vaddpd +
#: 3 shuffles, two multiplies; fp64: the same with a degree-11 Horner (11) and 2 vaddpd + 3
#: shuffle/zeroing ops. Its three register-to-register moves are left out (move elimination at
#: rename). (Issue 50 estimated 12 FMA-class + 6 integer ops before the primitive existed.)
EXP_OPS = {"fp32": (21, 3), "fp64": (25, 3)}
#: the same for the x86-64 kernel, which runs the exp's form for x <= 0 (`emit_exp`'s
#: ``nonpositive``: the softmax's arguments s - m are never positive): fp32 clamp 1, range
#: reduction 4, Horner 6, 2^n an add, one multiply, and one integer shift (vpslld); fp64 the same
#: with Horner 11 (vpsllq). Its delta exps run on vectors of rows, and its row sums stay vectors
#: until the end (one horizontal sum a row, not one a key block).
EXP_OPS_X86 = {"fp32": (13, 1), "fp64": (18, 1)}
#: the ISAs whose kernel is the x86-64 one
X86_ISAS = ("avx2", "avx512")
#: vector instructions per vector of scores besides the exp: scale-and-subtract the max (one FMA),
#: the max, the sum
SCORE_OPS = 3
#: vector instructions per row vector and key block besides delta's exp: z = delta z + sum, mu = mu'
ROW_BLOCK_OPS = 2
#: architectural vector registers per ISA (x86-64: 16 ymm with AVX2, 32 zmm with AVX-512;
#: AArch64: 32 V / Z registers)
VECTOR_REGISTERS = {"avx2": 16, "avx512": 32, "neon": 32, "sve": 32, "sme": 32}  # sme: its vector code is NEON
#: the share of the register file a register-resident score tile may take (an assumption: the rest
#: holds Q's and V's operand vectors and a column block of O's accumulators)
REG_SCORE_SHARE = 0.5
#: where the CPU model may keep the g_q x s_x score tile: registers or L1, as the model decides; L2
#: only where neither holds one next to its K block (very wide heads), or when asked for
SCORE_LEVELS = ("L1", "registers", "L2")
#: the largest query tile (rows) the CPU model proposes: a larger tile only moves work the L2 group
#: does into L1, where the score tile then crowds out the K/V block
MAX_TILE_ROWS = 512
#: the largest key block the CPU model proposes
MAX_KEY_BLOCK = 1024
#: thread splits of a head (prefill) or of its key axis (decode) the model weighs at most
MAX_SPLIT = 64


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _fmt(n: float) -> str:
    """A count, three significant digits."""
    return f"{n:.3g}" if n >= 1000 or n != int(n) else f"{int(n)}"


# -- results --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Level:
    """One memory level of the model: ``capacity`` bytes per core / SM (None for the top),
    ``fill`` bytes per cycle from the level above (None where nothing is charged), ``group`` the
    query rows whose Q/O it keeps (the seed's g at this level; L: the whole axis), ``stream`` the
    keys it holds at once (the seed's s), ``holds`` what it keeps in words, ``m_values`` /
    ``m_bytes`` its memory use M_l per core / SM, ``h_values`` / ``h_bytes`` the transfers H_l into
    it over the whole problem, ``cycles`` those of the busiest core / SM at ``fill``."""

    name: str
    capacity: int | None
    fill: float | None
    fill_source: str
    group: int
    stream: int
    holds: str
    m_values: int
    m_bytes: int
    h_values: float
    h_bytes: float
    cycles: float

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Level.name must be non-empty")
        for name in ("m_values", "m_bytes", "group", "stream"):
            if getattr(self, name) < 0:
                raise ValueError(f"Level.{name} must be non-negative, got {getattr(self, name)!r}")
        if self.capacity is not None and self.m_bytes > self.capacity:
            raise ValueError(f"Level {self.name}: M = {self.m_bytes} B exceeds its {self.capacity} B")

    def line(self) -> str:
        """The level's line of `AttentionModel.explain`."""
        cap = _fmt_bytes(self.capacity) if self.capacity is not None else "-"
        fill = f"{self.fill:.3g} B/cycle ({self.fill_source})" if self.fill else self.fill_source
        return (
            f"  {self.name:<20} {cap:>9}  g = {self.group or '-'}, s = {self.stream}: {self.holds}\n"
            f"  {'':<20} {'':>9}  M = {_fmt(self.m_values)} values ({_fmt_bytes(self.m_bytes)}),"
            f" H = {_fmt(self.h_values)} values ({_fmt_bytes(self.h_bytes)}), fill {fill}"
            + (f": {_fmt(self.cycles)} cycles" if self.fill else "")
        )


@dataclass(frozen=True)
class AttentionTiling:
    """The chosen tiles and thread split. ``g_q`` query rows per tile, ``s_x`` keys per block,
    ``group`` the L2 group (rows; CPU) or the L2's wave group (Hopper), ``score_level`` where the
    g_q x s_x score tile lives, ``tile_level`` the lowest level holding the whole tile (its rows,
    state, K/V block and scores), ``threads`` the cores / SMs, ``query_split`` the threads that
    share one head's query groups, ``key_split`` the key chunks of one head (decode; their partial
    (max, sum, output) triples are merged), ``rounds`` the units each thread runs."""

    g_q: int
    s_x: int
    group: int
    score_level: str
    tile_level: str
    threads: int
    query_split: int = 1
    key_split: int = 1
    rounds: int = 1
    split: str = ""

    def __post_init__(self) -> None:
        for name in ("g_q", "s_x", "group", "threads", "query_split", "key_split", "rounds"):
            _positive_int(f"AttentionTiling.{name}", getattr(self, name))
        if self.score_level not in ("registers", "L1", "L2", "registers (SM)"):
            raise ValueError(f"AttentionTiling.score_level must name registers, L1 or L2, got {self.score_level!r}")

    def describe(self) -> str:
        return (
            f"g_q = {self.g_q}, s_x = {self.s_x}, L2 group {self.group} rows, score tile "
            f"{self.g_q} x {self.s_x} in {self.score_level}, tile in {self.tile_level}; {self.split}"
        )


@dataclass(frozen=True)
class TimeSplit:
    """Modelled time of the busiest core / SM in cycles (``unit``): the two products, the softmax,
    transfers per level, the decode merge, the total; ``limit`` what sets the total in one word
    ("products", "softmax", "tensor cores", or the level whose fills do: "L3", "HBM", ...) and
    ``bound`` the same in a sentence. ``overlapped``: transfers overlap compute (Hopper's
    asynchronous loads) instead of adding to it (a CPU core)."""

    qk: float
    pv: float
    softmax: float
    transfers: tuple[tuple[str, float], ...]
    merge: float
    total: float
    limit: str
    bound: str
    unit: str = "cycles"
    detail: str = ""
    overlapped: bool = False
    busy: float | None = None  # Hopper: the share of each key block the tensor cores work

    def __post_init__(self) -> None:
        for name in ("qk", "pv", "softmax", "merge", "total"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"TimeSplit.{name} must be non-negative, got {getattr(self, name)!r}")

    def shares(self) -> dict[str, float]:
        """Each part's share (§6): of the modelled time where everything adds up (CPU: products,
        softmax, fills per level, merge), of the compute where transfers overlap it (Hopper)."""
        parts = {"Q K^T": self.qk, "P V": self.pv, "softmax": self.softmax, "merge": self.merge}
        if not self.overlapped:
            parts.update({f"fills into {name}": c for name, c in self.transfers})
        whole = sum(parts.values()) or 1.0
        return {k: v / whole for k, v in parts.items() if v > 0}


@dataclass(frozen=True)
class AttentionModel:
    """The model's result for one attention problem: the shape, the machine, the chosen `tiling`,
    the `levels` (M_l, H_l), the `time` split, the runner-up and notes; `explain` prints the
    derivation."""

    batch: int
    heads: int
    L: int
    S: int
    E: int
    Ev: int
    dtype: str
    causal: bool
    item: int
    machine: str
    tiling: AttentionTiling
    levels: tuple[Level, ...]
    time: TimeSplit
    why: str
    runner_up: str = ""
    notes: tuple[str, ...] = field(default=())
    formulas: tuple[str, ...] = field(default=())

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def explain(self) -> str:
        """The printed derivation: the shape, the formulas (seed sections), each level's M_l and
        H_l, the choice and why, the runner-up, the time split and the bound."""
        t = self.tiling
        mask = "causal (row i sees keys j <= i)" if self.causal else "non-causal"
        lines = [
            f"Attention O = softmax(Q K^T * scale) V: B x H = {self.batch} x {self.heads}, L = {self.L}, "
            f"S = {self.S}, E = {self.E}, Ev = {self.Ev}, {self.dtype} ({self.item} B), {mask}",
            f"machine: {self.machine}",
            "model (seed 001): §3.2 a level keeping g query rows while K, V stream in blocks of s keys:",
            "  M_l = g (E + Ev) + 3 g + s (E + Ev) [+ g_q s_x scores],  H_l = L (E + Ev) + ceil(L / g) S (E + Ev)",
            *(f"  {f}" for f in self.formulas),
            "levels (M: per core / SM; H: into the level, whole problem):",
        ]
        lines += [lv.line() for lv in self.levels]
        lines.append(f"choice: {t.describe()}")
        lines.append(f"  why: {self.why}")
        if self.runner_up:
            lines.append(f"  runner-up: {self.runner_up}")
        ts = self.time
        shares = ", ".join(f"{k} {v:.1%}" for k, v in ts.shares().items())
        lines.append(
            f"time ({ts.unit} of the busiest {'SM' if 'SM' in ts.unit else 'thread'}): total {_fmt(ts.total)}; "
            f"Q K^T {_fmt(ts.qk)}, P V {_fmt(ts.pv)}, softmax {_fmt(ts.softmax)}"
        )
        lines.append(f"  split (§6{', of the compute' if ts.overlapped else ''}): {shares}")
        if ts.detail:
            lines.append(f"  {ts.detail}")
        lines.append(f"  bound: {ts.bound}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# -- shared shape helpers -------------------------------------------------------------------------
def _check_shape(batch, heads, L, S, E, Ev) -> int:
    for name, value in (("batch", batch), ("heads", heads), ("L", L), ("S", S), ("E", E)):
        _positive_int(name, value)
    return E if Ev is None else _positive_int("Ev", Ev)


def _visible(end_row: int, S: int, causal: bool) -> int:
    """Keys seen by the rows of a tile or group ending (exclusive) at ``end_row``."""
    return min(S, end_row) if causal else S


# -- the fused kernel's key tile ------------------------------------------------------------------
#: the share of L1 the fused kernel's V block and P tile (s_x keys) may fill: K^T's tile streams
#: through once per query tile, V's block is read once per column block of the output and P's
#: tile once per column block, so V and P are what L1 must keep
KERNEL_L1_SHARE = 1.0
#: the fused kernel's query rows a tile (its register block, `minijit.kernels.x86_64.attention`)
KERNEL_G = 6
#: the vectors of keys of the fused kernel's register block (AVX2 2, AVX-512 4): s_x is a multiple
#: of it (an odd vector on AVX2 runs a half-empty block: 24 keys at E = 128 ran 15 % slower than
#: 16, 32 or 64 in the bench sweep, bench/results/x86_64_attention_bench_2026-11-28.md)
KERNEL_BLOCK_VECTORS = {"avx2": 2, "avx512": 4}
#: the most key vectors of the fused kernel's tile the model proposes (past 8 the per-row,
#: per-tile costs are spread thin and the tiles only crowd L1)
KERNEL_MAX_VECTORS = 8


#: the most register blocks of rows one x86-64 kernel tile runs over each K^T and V tile
KERNEL_MAX_BLOCKS = 4
#: the share of L1 the tile's rows may take (Q^T, the P tile and the output tile, g x (E + s_x +
#: Ev)): the rest keeps the K^T and V vectors the register blocks share
KERNEL_ROWS_L1_SHARE = 0.5


def kernel_g(E: int, Ev: int, s_x: int, dtype: str = "fp32", target=None) -> int:
    """Query rows g of the fused kernel's tile with ``s_x`` keys a tile: on x86-64, `KERNEL_G` rows
    (one register block) times the most blocks, at most `KERNEL_MAX_BLOCKS`, whose rows' state
    (Q^T, P, O: g x (E + s_x + Ev) elements) fits `KERNEL_ROWS_L1_SHARE` of L1: the blocks run
    one after another over each K^T and V vector block while it is in L1, so the L2 -> L1 traffic
    of K and V per multiply-add falls as 1 / g (§3.2, the L1 level's g_q). `KERNEL_G` on the
    other ISAs (one register block). ValueError for non-positive sizes or an unknown dtype."""
    for name, value in (("E", E), ("Ev", Ev), ("s_x", s_x)):
        _positive_int(name, value)
    if dtype not in CPU_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(CPU_DTYPES)}, got {dtype!r}")
    cpu = _host_cpu(dtype, target)
    if cpu.isa not in X86_ISAS:
        return KERNEL_G
    per_row = (E + s_x + Ev) * cpu.item
    blocks = int(KERNEL_ROWS_L1_SHARE * cpu.caps[0] // (KERNEL_G * per_row))
    return KERNEL_G * max(1, min(KERNEL_MAX_BLOCKS, blocks))


def kernel_s_x(E: int, Ev: int, dtype: str = "fp32", target=None) -> int:
    """s_x (keys) of the x86-64 fused kernel's tile (g = `KERNEL_G` rows): the largest multiple of
    the register block's keys (`KERNEL_BLOCK_VECTORS`), at most `KERNEL_MAX_VECTORS` vectors, whose
    V block (s_x x Ev) and P tile (g x s_x) fill at most `KERNEL_L1_SHARE` of L1 (§3.2's M_L1
    with K^T's tile streamed and the rows in registers; the per-row costs of a key tile, alpha's
    exp, two reductions and the output rescale, favour the largest such s_x); one block at least.
    ValueError for non-positive E or Ev or an unknown dtype."""
    _positive_int("E", E)
    _positive_int("Ev", Ev)
    if dtype not in CPU_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(CPU_DTYPES)}, got {dtype!r}")
    cpu = _host_cpu(dtype, target)
    block = KERNEL_BLOCK_VECTORS.get(cpu.isa, 2)
    per_key = (Ev + KERNEL_G) * cpu.item
    fit = int(KERNEL_L1_SHARE * cpu.caps[0] // per_key) // cpu.vl
    return cpu.vl * block * max(1, min(KERNEL_MAX_VECTORS, fit) // block)


# -- the CPU model --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Cpu:
    """What the CPU model reads of the host (`_host_cpu`)."""

    name: str
    isa: str
    item: int
    vl: int
    vector_bytes: int
    regs: int
    mr: int
    nb: int
    fma_rate: float
    exp_ops: int
    caps: tuple[int, int, int]  # L1, L2, L3 slice, bytes
    fills: tuple[float, float, float, float]  # registers, L1, L2, L3: bytes per cycle from above
    fill_sources: tuple[str, str, str, str]

    @property
    def pipes(self) -> float:
        """Vector instructions per cycle (the FMA pipes)."""
        return self.fma_rate / self.vector_bytes


def _host_cpu(dtype: str, target=None) -> _Cpu:
    """The host's (or the pinned profile's) numbers for the model."""
    from minijit import blocking, schedule, targets
    from minijit.runtime import features
    from minijit.targets import uarch

    t = targets.get_cpu(target or "native")
    item = CPU_DTYPES[dtype]
    vbytes = t.vector_bits // 8
    vl = max(1, vbytes // item)
    regs = VECTOR_REGISTERS.get(t.isa, 16)
    mr = max(1, t.panel_column_bytes // item)  # the register block's rows, as `minijit.blocking` reads them
    vecs = max(1, mr // vl)
    nb = max(1, (regs - vecs - 1) // vecs)  # columns of the register block: the accumulators that fit
    core = uarch.core_model()
    fma = float(core.fma_rate(t.isa))
    l1, l2 = features.cache_geometries()
    llc = features.last_level_cache_bytes()
    shared = max(1, features.last_level_cache_sharing())
    llc_slice = max(l2.size, llc // shared)
    name = f"{features.cpu_name() or 'CPU'} ({core.name}), {t.name}: {vl} lanes of {dtype}, {regs} vector registers"
    return _Cpu(
        name=name,
        isa=t.isa,
        item=item,
        vl=vl,
        vector_bytes=vbytes,
        regs=regs,
        mr=mr,
        nb=nb,
        fma_rate=fma,
        exp_ops=sum((EXP_OPS_X86 if t.isa in X86_ISAS else EXP_OPS)[dtype]),
        caps=(l1.size, l2.size, llc_slice),
        fills=(fma, blocking.L1_FILL, float(core.llc_stream), schedule.MEM_FILL),
        fill_sources=(
            "from L1: uarch fma_rate, a vector load per FMA pipe",
            "from L2: blocking.L1_FILL",
            f"from L3: uarch llc_stream ({core.name})",
            "from memory: schedule.MEM_FILL",
        ),
    )


@dataclass
class _Agg:
    """Sums over the tiles of a set of L2 groups (values unless named)."""

    rows: int = 0
    scores: int = 0  # sum rows_t v_t
    kv_groups: int = 0  # sum_G v_G (keys)
    kv_tiles: int = 0  # sum_t v_t (keys)
    kv_regblocks: int = 0  # sum_t ceil(rows_t / mr) v_t
    row_blocks: int = 0  # sum_t n_t rows_t
    vmax: int = 0
    ops: float = 0.0  # softmax vector instructions
    tiles: int = 0

    def add(self, o: _Agg) -> None:
        for name in ("rows", "scores", "kv_groups", "kv_tiles", "kv_regblocks", "row_blocks", "ops", "tiles"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.vmax = max(self.vmax, o.vmax)


def _softmax_ops(rows: int, v: int, n: int, Ev: int, cpu: _Cpu) -> float:
    """Vector instructions of the online softmax of one tile of ``rows`` rows over ``v`` keys in
    ``n`` blocks (see the module docstring)."""
    vl = cpu.vl
    along_rows = rows >= vl  # vectors run along the query rows (no horizontal reductions)
    if along_rows:
        row_vecs = -(-rows // vl)
        score_vecs = row_vecs * v
        o_vecs = row_vecs * Ev
    else:
        row_vecs = rows
        score_vecs = rows * -(-v // vl)
        o_vecs = rows * -(-Ev // vl)
    ops = score_vecs * (cpu.exp_ops + SCORE_OPS)
    x86 = cpu.isa in X86_ISAS and not along_rows  # delta's exps on vectors of rows, sums reduced at the end
    delta_exps = -(-rows // vl) if x86 else row_vecs
    ops += n * (delta_exps * cpu.exp_ops + row_vecs * ROW_BLOCK_OPS)  # delta = exp(mu - mu'), z, mu
    ops += n * o_vecs  # O row *= delta
    if not along_rows:
        steps = max(1, int(math.log2(vl)))
        if x86:  # horizontal max per key block, horizontal sum once: shuffle + op per step
            ops += (n + 1) * rows * 2 * steps
        else:
            ops += n * rows * 4 * steps  # horizontal max and sum: shuffle + op per step
    ops += o_vecs + row_vecs  # tail: 1/z and O *= 1/z
    return ops


def _group_aggs(L: int, S: int, g_q: int, s_x: int, g2: int, causal: bool, Ev: int, cpu: _Cpu) -> list[_Agg]:
    """One `_Agg` per L2 group of one head (prefill)."""
    out = []
    for a in range(0, L, g2):
        b = min(L, a + g2)
        agg = _Agg(vmax=_visible(b, S, causal), tiles=0)
        agg.kv_groups = agg.vmax
        for t0 in range(a, b, g_q):
            rows = min(g_q, b - t0)
            v = _visible(t0 + rows, S, causal)
            n = -(-v // s_x)
            agg.rows += rows
            agg.scores += rows * v
            agg.kv_tiles += v
            agg.kv_regblocks += -(-rows // cpu.mr) * v
            agg.row_blocks += n * rows
            agg.ops += _softmax_ops(rows, v, n, Ev, cpu)
            agg.tiles += 1
        out.append(agg)
    return out


def _chunk_agg(chunk: int, s_x: int, Ev: int, cpu: _Cpu) -> _Agg:
    """The `_Agg` of one decode row over a key chunk of ``chunk`` keys."""
    n = -(-chunk // s_x)
    return _Agg(
        rows=1,
        scores=chunk,
        kv_groups=chunk,
        kv_tiles=chunk,
        kv_regblocks=chunk,
        row_blocks=n,
        vmax=chunk,
        ops=_softmax_ops(1, chunk, n, Ev, cpu),
        tiles=1,
    )


@dataclass(frozen=True)
class _CpuEval:
    """One candidate's levels (per unit) and times (per unit)."""

    levels: tuple[tuple[str, int, float, int, int, str], ...]  # name, M values, H values, group, stream, holds
    fill_cycles: tuple[float, ...]
    qk: float
    pv: float
    softmax: float
    tile_level: str

    @property
    def total(self) -> float:
        return sum(self.fill_cycles) + self.qk + self.pv + self.softmax


def _cpu_eval(agg: _Agg, g_q: int, s_x: int, g2: int, score_at: str, E: int, Ev: int, cpu: _Cpu) -> _CpuEval:
    """Levels and cycles of one unit of work (`_Agg`) under a candidate tiling; ``score_at``: the
    level of the score tile ("registers", "L1", or "L2": too large to stay in L1 next to its K
    block, its four passes come into L1 from L2)."""
    regs_score = score_at == "registers"
    q, W = cpu.item, E + Ev
    c1, c2, c3 = (c // q for c in cpu.caps)  # capacities in values (§4.3)
    rows_g2 = min(g2, agg.rows)
    rows_t = min(g_q, agg.rows)
    score = g_q * s_x
    # registers
    if regs_score:
        h_reg = agg.row_blocks * E + agg.kv_tiles * E + agg.kv_tiles * Ev + 2 * agg.row_blocks * Ev
        m_reg = score + -(-rows_t // cpu.vl) * cpu.vl + cpu.vl
        reg_holds = f"the {rows_t} x {s_x} score tile, a column of O, a broadcast of V"
    else:
        mr = min(cpu.mr, rows_t)
        vecs = max(1, -(-mr // cpu.vl))
        h_reg = agg.scores * W * (1 / cpu.nb + 1 / mr) + 2 * agg.row_blocks * Ev + 4 * agg.scores
        m_reg = (vecs * cpu.nb + vecs + 1) * cpu.vl
        reg_holds = f"register blocks of {mr} x {cpu.nb} (Q K^T and P V accumulators, operand vectors)"
    # L1
    score_l1 = score if score_at == "L1" else 0
    score_l2 = score if score_at == "L2" else 0
    tile_vals = g_q * (W + 3) + s_x * W
    tile_res = g2 == g_q and tile_vals + score_l1 <= c1
    qo_l1 = g_q * (W + 3) if tile_res else 0
    if agg.vmax * W + qo_l1 + score_l1 <= c1:
        kv_l1, m_kv1, kv_holds = agg.vmax, agg.vmax * W, f"all {agg.vmax} keys' K, V"
    elif s_x * W + qo_l1 + score_l1 <= c1:
        kv_l1 = agg.kv_tiles if tile_res else agg.kv_groups
        m_kv1, kv_holds = s_x * W, f"a {s_x}-key K/V block"
    else:
        kv_l1, m_kv1, kv_holds = agg.kv_regblocks, 0, "K, V passing (once per register block of rows)"
    h_l1 = (
        kv_l1 * W + (agg.rows * W if tile_res else agg.row_blocks * (E + 2 * Ev)) + (4 * agg.scores if score_l2 else 0)
    )
    m_l1 = qo_l1 + m_kv1 + score_l1
    l1_holds = (
        (f"the tile's {g_q} rows (Q, O, mu/delta/z), " if tile_res else "rows passing per key block, ")
        + kv_holds
        + (f", the {g_q} x {s_x} score tile" if score_l1 else "")
        + (f", the {g_q} x {s_x} score tile passing (it stays in L2)" if score_l2 else "")
    )
    l1_group = g_q if tile_res else 0  # no rows stay: they pass once per key block

    # L2 and L3: the L2 group's rows stay; K/V per group, or all of them when they fit
    def upper(cap: int, extra: int = 0) -> tuple[int, float, int, int, str]:
        qo = rows_g2 * (W + 3) + extra
        if agg.vmax * W + qo <= cap:
            holds = f"the L2 group's {rows_g2} rows and all {agg.vmax} keys' K, V (for every group: g = the whole axis)"
            return qo + agg.vmax * W, agg.rows * W + agg.vmax * W, agg.rows, agg.vmax, holds
        holds = f"the L2 group's {rows_g2} rows (Q, O, mu/delta/z) and a {s_x}-key K/V block"
        return qo + s_x * W, agg.rows * W + agg.kv_groups * W, rows_g2, s_x, holds

    m2, h2, grp2, st2, hold2 = upper(c2, score_l2)
    if score_l2:
        hold2 += f", the {g_q} x {s_x} score tile"
    m3, h3, grp3, st3, hold3 = upper(c3)
    levels = (
        ("registers", m_reg, h_reg, rows_t if regs_score else min(cpu.mr, rows_t), s_x if regs_score else 1, reg_holds),
        ("L1", m_l1, h_l1, l1_group, agg.vmax if m_kv1 == agg.vmax * W and m_kv1 else s_x, l1_holds),
        ("L2", m2, h2, grp2, st2, hold2),
        ("L3", m3, h3, grp3, st3, hold3),
    )
    fills = tuple(lv[2] * q / bw for lv, bw in zip(levels, cpu.fills, strict=True))
    qk = agg.scores * E * q / cpu.fma_rate
    pv = agg.scores * Ev * q / cpu.fma_rate
    sm = agg.ops / cpu.pipes
    tile_level = "L1" if tile_res else "L2"
    return _CpuEval(levels, fills, qk, pv, sm, tile_level)


def _splits(limit: int, threads: int) -> list[int]:
    """Split factors to weigh: 1 .. min(limit, threads, `MAX_SPLIT`) (all of them up to 8, then
    powers of two and ``threads`` itself)."""
    top = max(1, min(limit, threads, MAX_SPLIT))
    out = {p for p in range(1, min(top, 8) + 1)}
    p = 16
    while p <= top:
        out.add(p)
        p *= 2
    out.add(top)
    return sorted(out)


@dataclass(frozen=True)
class _Candidate:
    total: float
    key: tuple
    g_q: int
    s_x: int
    g2: int
    score_at: str  # the score tile's level
    p: int  # threads per head (prefill) or key chunks per head (decode)
    rounds: int
    unit: _CpuEval
    unit_agg: _Agg
    merge: float
    merge_values: float


def plan(
    batch: int,
    heads: int,
    L: int,
    S: int,
    E: int,
    Ev: int | None = None,
    *,
    dtype: str = "fp32",
    causal: bool = False,
    threads: int | None = None,
    target=None,
    g_q: int | None = None,
    s_x: int | None = None,
    group: int | None = None,
    score_level: str | None = None,
) -> AttentionModel:
    """The model's plan for attention of ``batch`` x ``heads`` problems (L queries, S keys, widths
    E and Ev) on the host CPU (a pinned profile where one is pinned): the tiling that minimizes
    the modelled time (see the module docstring), its levels and time split. ``threads``: the
    threads to split over (default the host's CPUs); ``target``: a CPU target name or object
    (default native). ``g_q``, ``s_x``, ``group`` (the L2 group) and ``score_level`` ("registers", "L1", "L2") pin
    that part of the choice (still checked against the constraints). ValueError naming the
    argument for non-positive sizes, an unknown dtype or a pinned value the constraints reject."""
    Ev = _check_shape(batch, heads, L, S, E, Ev)
    if dtype not in CPU_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(CPU_DTYPES)}, got {dtype!r}")
    if threads is None:
        from minijit.runtime import features

        threads = features.num_cpus()
    threads = _positive_int("threads", threads)
    for name, value in (("g_q", g_q), ("s_x", s_x), ("group", group)):
        if value is not None:
            _positive_int(name, value)
    cpu = _host_cpu(dtype, target)
    q, W = cpu.item, E + Ev
    c1, c2 = cpu.caps[0] // q, cpu.caps[1] // q
    bh = batch * heads
    decode = L == 1
    keys = _visible(1, S, causal) if decode else S  # the keys the decode row sees (torch's causal: 1)

    # candidates
    if L <= cpu.mr:
        gqs = [L]
    else:
        top = min(-(-L // cpu.mr) * cpu.mr, max(cpu.mr, MAX_TILE_ROWS))
        gqs = list(range(cpu.mr, top + 1, cpu.mr))
    s_top = min(-(-S // cpu.vl) * cpu.vl, MAX_KEY_BLOCK)
    sxs = {cpu.vl * k for k in range(1, 17)}  # every multiple of the vector length up to 16 vectors
    s = cpu.vl
    while s <= s_top:  # then powers of two
        sxs.add(s)
        s *= 2
    sxs = sorted(x for x in sxs | {s_top} if x <= s_top)
    if g_q is not None:
        if L > cpu.mr and g_q % cpu.mr:
            raise ValueError(f"g_q must be a multiple of the register block's {cpu.mr} rows, got {g_q}")
        gqs = [min(g_q, L)]
    if s_x is not None:
        if s_x % cpu.vl:
            raise ValueError(f"s_x must be a multiple of the vector length {cpu.vl}, got {s_x}")
        sxs = [s_x]
    if score_level is not None and score_level not in SCORE_LEVELS:
        raise ValueError(f"score_level must be one of {', '.join(SCORE_LEVELS)} or None, got {score_level!r}")
    placements = ["L1", "registers"] if score_level is None else [score_level]
    reg_values = int(REG_SCORE_SHARE * cpu.regs * cpu.vl)

    rejected: list[str] = []

    def search(placements: list[str]) -> list[_Candidate]:
        cands: list[_Candidate] = []
        for gq in gqs:
            for sx in sxs:
                if gq * (W + 3) + sx * W > c2:
                    rejected.append(f"g_q = {gq}, s_x = {sx}: the tile exceeds L2")
                    continue
                g2max = gq
                if not decode:
                    g2max = max(gq, (c2 - sx * W) // (W + 3) // gq * gq)
                    g2max = min(g2max, -(-L // gq) * gq)
                g2s = sorted({gq, g2max}) if group is None else [group]
                for g2 in g2s:
                    if g2 % gq or g2 * (W + 3) + sx * W > c2:
                        if group is not None:
                            raise ValueError(f"group must be a multiple of g_q = {gq} that fits L2, got {group}")
                        continue
                    aggs = None if decode else _group_aggs(L, S, gq, sx, g2, causal, Ev, cpu)
                    for score_at in placements:
                        if score_at == "registers" and gq * sx > reg_values:
                            continue
                        if score_at == "L1" and gq * sx + sx * max(E, Ev) > c1:
                            continue  # the score tile stays in L1 next to the K block it comes from
                        if score_at == "L2" and (
                            gq * sx + sx * max(E, Ev) <= c1 or g2 * (W + 3) + sx * W + gq * sx > c2
                        ):
                            continue  # only where L1 cannot hold it, and with the L2 group in L2
                        if decode:
                            for p in _splits(-(-keys // sx), threads * 2):
                                per = -(-keys // p)
                                chunk = min(keys, -(-per // sx) * sx)  # ceil(keys / p), up to a multiple of s_x
                                if chunk * (p - 1) >= keys:
                                    continue  # a chunk would be empty
                                agg = _chunk_agg(chunk, sx, Ev, cpu)
                                ev = _cpu_eval(agg, 1, sx, 1, score_at, E, Ev, cpu)
                                rounds = -(-bh * p // threads)
                                merge, merge_values = 0.0, 0.0
                                if p > 1:  # one thread per head merges p partial (mu, z, O) triples via L3
                                    merge_values = 2 * p * (Ev + 2)
                                    ops = p * (cpu.exp_ops + ROW_BLOCK_OPS + 2 * -(-Ev // cpu.vl))
                                    merge = -(-bh // threads) * (merge_values * q / cpu.fills[2] + ops / cpu.pipes)
                                total = rounds * ev.total + merge
                                cands.append(
                                    _Candidate(
                                        total, (total, p), 1, sx, 1, score_at, p, rounds, ev, agg, merge, merge_values
                                    )
                                )
                        else:
                            for p in _splits(len(aggs), threads):
                                parts = [_Agg() for _ in range(p)]
                                for i, a in enumerate(aggs):
                                    parts[i % p].add(a)
                                evs = [_cpu_eval(a, gq, sx, g2, score_at, E, Ev, cpu) for a in parts]
                                worst = max(range(p), key=lambda i: evs[i].total)
                                rounds = -(-bh * p // threads)
                                total = rounds * evs[worst].total
                                key = (total, p, -gq, -sx, -g2)
                                cands.append(
                                    _Candidate(
                                        total, key, gq, sx, g2, score_at, p, rounds, evs[worst], parts[worst], 0.0, 0.0
                                    )
                                )
        return cands

    cands = search(placements)
    if not cands and score_level is None:  # neither registers nor L1 holds a score tile next to its K block
        cands = search(["L2"])
    if not cands:
        reason = "; ".join(rejected[:3]) or "no tile fits the caches"
        raise ValueError(f"no tiling fits: {reason} (E = {E}, Ev = {Ev}, {dtype})")
    cands.sort(key=lambda c: c.key)
    best = cands[0]
    return _cpu_result(best, cands, batch, heads, L, S, E, Ev, dtype, causal, threads, cpu)


def _cpu_result(best, cands, batch, heads, L, S, E, Ev, dtype, causal, threads, cpu: _Cpu) -> AttentionModel:
    q = cpu.item
    bh = batch * heads
    decode = L == 1
    ev = best.unit  # the busiest thread's unit
    # whole-problem transfers: every unit of one head (its parts or key chunks), times the heads
    if decode:
        keys = _visible(1, S, causal)
        sizes = [best.unit_agg.vmax] * (best.p - 1) + [keys - best.unit_agg.vmax * (best.p - 1)]
        units = [_chunk_agg(c, best.s_x, Ev, cpu) for c in sizes]
        evs = [_cpu_eval(a, 1, best.s_x, 1, best.score_at, E, Ev, cpu) for a in units]
    else:
        parts = [_Agg() for _ in range(best.p)]
        for i, a in enumerate(_group_aggs(L, S, best.g_q, best.s_x, best.g2, causal, Ev, cpu)):
            parts[i % best.p].add(a)
        evs = [_cpu_eval(a, best.g_q, best.s_x, best.g2, best.score_at, E, Ev, cpu) for a in parts]
    head_h = [sum(e.levels[i][2] for e in evs) for i in range(4)]
    names = ("registers", "L1", "L2", "L3")
    caps = (cpu.regs * cpu.vector_bytes, *cpu.caps)
    levels = []
    for i, name in enumerate(names):
        _, m_vals, _, grp, st, holds = ev.levels[i]
        h_vals = head_h[i] * bh
        if i == 2 and best.merge_values:  # the partial triples reach the merging thread's L2 through L3
            h_vals += best.merge_values * bh
            holds += f"; the {best.p} partial (max, sum, O) triples of each head"
        cap_name = f"{name} (per thread)" if name == "L3" else name
        levels.append(
            Level(
                name=cap_name,
                capacity=caps[i],
                fill=cpu.fills[i],
                fill_source=cpu.fill_sources[i],
                group=grp,
                stream=st,
                holds=holds,
                m_values=int(m_vals),
                m_bytes=int(m_vals * q),
                h_values=h_vals,
                h_bytes=h_vals * q,
                cycles=best.rounds * ev.fill_cycles[i],
            )
        )
    levels.append(
        Level("memory", None, None, "the top level: data already there (§4.2)", L, S, "Q, K, V, O", 0, 0, 0.0, 0.0, 0.0)
    )
    r = best.rounds
    qk, pv, sm = r * ev.qk, r * ev.pv, r * ev.softmax
    fills = tuple((names[i], r * ev.fill_cycles[i]) for i in range(4))
    parts = {"the products' FMAs (Q K^T + P V)": qk + pv, "the softmax": sm}
    parts.update({f"fills into {n}": c for n, c in fills})
    if best.merge:
        parts["the decode merge"] = best.merge
    bound = max(parts, key=parts.get)
    limit = {"the products' FMAs (Q K^T + P V)": "products", "the softmax": "softmax", "the decode merge": "merge"}
    time = TimeSplit(
        qk=qk,
        pv=pv,
        softmax=sm,
        transfers=fills,
        merge=best.merge,
        total=best.total,
        limit=limit.get(bound, bound.removeprefix("fills into ")),
        bound=f"{bound} ({parts[bound] / best.total:.0%} of the modelled time)",
        unit="cycles",
        detail=(
            f"compute: {cpu.fma_rate:.0f} B of FMA operands per cycle, softmax {cpu.exp_ops} ops per exp "
            f"+ {SCORE_OPS} per score vector on {cpu.pipes:.0f} vector pipes"
        ),
    )
    if decode:
        split = (
            f"decode: the key axis of each of the {bh} heads in {best.p} chunk(s) of "
            f"{best.unit_agg.vmax} keys, {bh * best.p} units over {threads} threads ({best.rounds} each)"
            + (", partial (max, sum, O) triples merged per head" if best.p > 1 else "")
        )
    elif best.p > 1:
        split = (
            f"{bh} heads x {best.p} parts (a head's L2 groups dealt round-robin) = {bh * best.p} units "
            f"over {threads} threads ({best.rounds} each)"
        )
    else:
        split = f"batch x heads = {bh} heads over {threads} threads ({best.rounds} each), query tiles in order"
    tiling = AttentionTiling(
        g_q=best.g_q,
        s_x=best.s_x,
        group=best.g2,
        score_level=best.score_at,
        tile_level=ev.tile_level,
        threads=threads,
        query_split=1 if decode else best.p,
        key_split=best.p if decode else 1,
        rounds=best.rounds,
        split=split,
    )
    why = _cpu_why(best, cpu, E, Ev, L)
    runner = ""
    for c in cands[1:]:
        if (c.g_q, c.s_x, c.p) != (best.g_q, best.s_x, best.p):
            runner = (
                f"g_q = {c.g_q}, s_x = {c.s_x}, L2 group {c.g2}, scores in {c.score_at}, "
                f"split {c.p}: {_fmt(c.total)} cycles (+{c.total / best.total - 1:.1%})"
            )
            break
    notes = (
        f"register block {cpu.mr} x {cpu.nb} ({cpu.mr} = panel_column_bytes / {q}); g_q is a multiple of "
        f"{cpu.mr} (or the whole query axis when shorter), s_x of {cpu.vl}",
        "fills, FMAs and softmax add up (no overlap modelled, as in minijit.blocking); every thread streams "
        "from its own L3 slice and memory share",
    )
    machine = (
        f"{cpu.name}; L1 {_fmt_bytes(cpu.caps[0])}, L2 {_fmt_bytes(cpu.caps[1])}, L3 slice {_fmt_bytes(cpu.caps[2])}"
    )
    return AttentionModel(
        batch=batch,
        heads=heads,
        L=L,
        S=S,
        E=E,
        Ev=Ev,
        dtype=dtype,
        causal=causal,
        item=q,
        machine=machine + f"; {threads} threads",
        tiling=tiling,
        levels=tuple(levels),
        time=time,
        why=why,
        runner_up=runner,
        notes=notes,
        formulas=(
            "registers (§3.1, §5.2 subloops): H = sum_t rows v (E + Ev) (1/nb + 1/mr) + 2 n rows Ev + 4 rows v"
            " (scores in L1) or sum_t (n rows + v) E + v Ev + 2 n rows Ev (scores in registers)",
            "L1 with rows passing (the key block as the group): H = sum_G v_G (E + Ev) + sum_t n rows (E + 2 Ev)",
            "§4.3 bytes = values x item; §4.2 time = sum_l H_l item / fill_l + FMAs + softmax (all added)",
        ),
    )


def _cpu_why(best: _Candidate, cpu: _Cpu, E: int, Ev: int, L: int) -> str:
    q, W = cpu.item, E + Ev
    ev = best.unit
    tile_bytes = (best.g_q * (W + 3) + best.s_x * W + (0 if best.score_at == "registers" else best.g_q * best.s_x)) * q
    home = cpu.caps[0] if ev.tile_level == "L1" else cpu.caps[1]
    text = (
        f"the least modelled time among the tiles that fit; the tile (rows, K/V block"
        f"{'' if best.score_at == 'registers' else ', scores'}) takes {_fmt_bytes(tile_bytes)} of {ev.tile_level}'s "
        f"{_fmt_bytes(home)}"
    )
    if L > 1 and best.g2 > best.g_q:
        text += (
            f"; L2 keeps a group of {best.g2} rows (the largest multiple of g_q whose rows and a K/V block fit, "
            f"the seed's g <= M / 2d), so K and V cross L2 once per {best.g2} rows instead of once per tile"
        )
    if best.score_at == "registers":
        text += "; the score tile stays in registers (no round trips through L1)"
    elif best.score_at == "L2":
        text += f"; the {best.g_q} x {best.s_x} score tile cannot stay in L1 next to its K block, so it passes from L2"
    else:
        text += f"; the {best.g_q} x {best.s_x} score tile lives in L1 (beyond {REG_SCORE_SHARE:.0%} of the registers)"
    return text


# -- the Hopper model -----------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuSm:
    """An SM-level GPU model with the seed's parameters. Sizes in bytes, bandwidths in bytes per
    second (whole GPU), rates in ops per clock per SM (an FMA counts 2)."""

    name: str
    sms: int
    smem: int
    regs: int
    hbm_bw: float
    l2_bw: float
    tensor_ops: dict
    mufu_ops: float
    alu16_ops: float
    peak_fp16: float
    warpgroup_rows: int
    key_divisor: int
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("sms", "smem", "regs", "warpgroup_rows", "key_divisor"):
            _positive_int(f"GpuSm.{name}", getattr(self, name))
        for name in ("hbm_bw", "l2_bw", "mufu_ops", "alu16_ops", "peak_fp16"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GpuSm.{name} must be positive, got {getattr(self, name)!r}")

    @property
    def clock(self) -> float:
        """Hz, from the fp16 peak: peak / (SMs x fp16 tensor ops per clock per SM)."""
        return self.peak_fp16 / (self.sms * self.tensor_ops["fp16"])

    def per_sm(self, bw: float) -> float:
        """Bytes per SM clock of a GPU-wide bandwidth."""
        return bw / self.sms / self.clock


#: the H100 SXM5 as seed 001 states it: 132 SMs (§2.2); 227 KiB of shared memory and 256 KiB of
#: registers per SM (§5.6 Table 2, KB = 1024 B); HBM -> L2 at 3352 GB/s and L2 -> shared memory at
#: 12 TB/s (B.1); tensor cores 4096 fp16 / 8192 fp8 ops per clock per SM, the special function unit
#: (MUFU: exp) 16 ops and the fp16 ALU 512 ops per clock per SM (§5.7 Table 3); 989 TFLOPS fp16
#: (§6.1), hence a 1.83 GHz clock; 128-row warpgroup tiles (§5.4) and 32-key blocks (§5.6 Table 1)
H100_SEED = GpuSm(
    name="H100 SXM5 (seed 001's parameters)",
    sms=132,
    smem=227 * KiB,
    regs=256 * KiB,
    hbm_bw=3352e9,
    l2_bw=12e12,
    tensor_ops={"fp16": 4096.0, "bf16": 4096.0, "fp8": 8192.0},
    mufu_ops=16.0,
    alu16_ops=512.0,
    peak_fp16=989e12,
    warpgroup_rows=128,
    key_divisor=32,
    sources=("§2.2", "§5.6 Table 2", "B.1", "§5.7 Table 3", "§6.1", "§5.4", "§5.6 Table 1"),
)
#: the most warpgroup tiles per CTA and 32-key blocks the Hopper model proposes
MAX_GPU_ROWS = 512
MAX_GPU_KEYS = 256


def _gpu_reg_bytes(g: int, s: int, Ev: int, q: int) -> int:
    """Registers of one tile (FlashAttention-3 fp16/fp8, §6.1): O and S, the next S (intra-warpgroup
    overlap) in fp32, P in the input type, mu/delta/z in fp32."""
    return g * Ev * 4 + 2 * g * s * 4 + g * s * q + 3 * g * 4


def _gpu_smem_bytes(g: int, s: int, E: int, Ev: int, q: int) -> int:
    """Shared memory of one tile: Q, and K and V blocks loaded asynchronously (doubled, §5.6 Table 1)."""
    return g * E * q + 2 * s * (E + Ev) * q


def _lpt(times: list[float], workers: int) -> float:
    """Makespan of ``times`` taken longest first by ``workers`` (the SMs)."""
    if len(set(times)) == 1:
        return -(-len(times) // workers) * times[0]
    heap = [0.0] * min(workers, len(times))
    for t in sorted(times, reverse=True):
        heapq.heapreplace(heap, heap[0] + t)
    return max(heap)


def hopper_plan(
    batch: int,
    heads: int,
    L: int,
    S: int,
    E: int,
    Ev: int | None = None,
    *,
    dtype: str = "fp16",
    causal: bool = False,
    softmax_overhead: float = 0.0,
    sm: GpuSm = H100_SEED,
) -> AttentionModel:
    """The model's plan for attention on an H100 with the seed's parameters (`H100_SEED`; see the
    module docstring). ``softmax_overhead``: the softmax's cost beyond its MUFU exps, as a fraction
    of them (§6.3: 0.66 explains FlashAttention-3's 75 % fp16 utilization; default 0, Table 3's
    ideal). ValueError naming the argument for non-positive sizes or an unknown dtype."""
    Ev = _check_shape(batch, heads, L, S, E, Ev)
    if dtype not in GPU_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(GPU_DTYPES)}, got {dtype!r}")
    if isinstance(softmax_overhead, bool) or not isinstance(softmax_overhead, int | float) or softmax_overhead < 0:
        raise ValueError(f"softmax_overhead must be a non-negative number, got {softmax_overhead!r}")
    q, W = GPU_DTYPES[dtype], E + Ev
    tc = sm.tensor_ops[dtype]
    l2_clk, hbm_clk = sm.per_sm(sm.l2_bw), sm.per_sm(sm.hbm_bw)
    bh = batch * heads

    def iteration(g: int, s: int) -> tuple[float, float, float, float, float]:
        t_qk = 2 * g * s * E / tc
        t_pv = 2 * g * s * Ev / tc
        t_exp = g * (s + 1) / sm.mufu_ops * (1 + softmax_overhead)  # s exps + one delta per row (u_x = s_x)
        t_acc = g * 2 * Ev / sm.alu16_ops  # the O rescale (Table 3's accumulate, once per block)
        t_sm = t_exp + t_acc
        t_load = s * W * q / l2_clk
        return t_qk, t_pv, t_sm, t_load, max(max(t_qk, t_sm) + t_pv, t_load)

    cands = []
    rejected = []
    for g in range(sm.warpgroup_rows, MAX_GPU_ROWS + 1, sm.warpgroup_rows):
        for s in range(sm.key_divisor, MAX_GPU_KEYS + 1, sm.key_divisor):
            reg, smem = _gpu_reg_bytes(g, s, Ev, q), _gpu_smem_bytes(g, s, E, Ev, q)
            if reg > sm.regs or smem > sm.smem:
                rejected.append((g, s, reg, smem))
                continue
            t_qk, t_pv, t_sm, t_load, t_it = iteration(g, s)
            edge = (g * E * q + g * Ev * q) / l2_clk  # Q in, O out
            splits = [1] if L > 1 else _splits(-(-S // s), 4 * sm.sms)
            for p in splits:
                cta, iters = [], 0
                if L > 1:
                    for t0 in range(0, L, g):
                        n = -(-_visible(min(L, t0 + g), S, causal) // s)
                        cta.append(n * t_it + edge)
                        iters += n
                    cta *= bh
                    iters *= bh
                else:
                    chunk = -(-S // p)
                    n = -(-chunk // s)
                    cta = [n * t_it + edge] * (bh * p)
                    iters = n * bh * p
                sm_time = _lpt(cta, sm.sms)
                # HBM -> L2: Q, O once; K, V once per wave group of N_SM tiles (A.2.1)
                tiles_per_head = -(-L // g)
                kv_passes = -(-tiles_per_head // sm.sms)
                h_l2 = bh * (L * W + kv_passes * S * W) if L > 1 else bh * (W + S * W + 2 * p * (Ev + 2))
                hbm_time = h_l2 * q / hbm_clk / sm.sms
                total = max(sm_time, hbm_time)
                cands.append((total, p, -g, -s, g, s, iters, sm_time, hbm_time, h_l2))
    if not cands:
        raise ValueError(f"no Hopper tiling fits for E = {E}, Ev = {Ev}, {dtype}")
    cands.sort()
    total, p, _, _, g, s, iters, sm_time, hbm_time, h_l2 = cands[0]
    t_qk, t_pv, t_sm, t_load, t_it = iteration(g, s)
    busy_iters = iters / sm.sms  # iterations per SM (work, not the makespan)
    # levels
    if L > 1:
        tiles = -(-L // g)
        kv_tiles = sum(_visible(min(L, t0 + g), S, causal) for t0 in range(0, L, g))
        h_smem = bh * (L * W + kv_tiles * W)
        h_reg = bh * L * Ev
    else:
        tiles = p
        h_smem = bh * (p * W + S * W)
        h_reg = bh * p * (Ev + 2)
    reg_bytes, smem_bytes = _gpu_reg_bytes(g, s, Ev, q), _gpu_smem_bytes(g, s, E, Ev, q)
    l2_group = min(L, sm.sms * g) if L > 1 else 1
    levels = (
        Level(
            "registers (SM)",
            sm.regs,
            None,
            "tensor cores read Q, K, V from shared memory (wgmma); only O leaves",
            g,
            s,
            f"S and the next S ({g} x {s} fp32), P ({dtype}), O ({g} x {Ev} fp32), mu/delta/z",
            g * Ev + 3 * g * s + 3 * g,
            reg_bytes,
            float(h_reg),
            float(h_reg * q),
            0.0,
        ),
        Level(
            "shared memory (SM)",
            sm.smem,
            l2_clk,
            "from L2: 12 TB/s / 132 SMs (B.1)",
            g,
            s,
            f"Q ({g} x {E}), two {s}-key K/V blocks (asynchronous loads)",
            smem_bytes // q,
            smem_bytes,
            float(h_smem),
            float(h_smem * q),
            h_smem * q / l2_clk / sm.sms,
        ),
        Level(
            "L2",
            sm.sms * sm.smem,
            sm.per_sm(sm.hbm_bw),
            "from HBM: 3352 GB/s / 132 SMs (B.1)",
            l2_group,
            s,
            f"K, V for the tiles of a wave: effective memory N_SM x M_SM (A.2.1), group N_SM g_q = {sm.sms * g}",
            sm.sms * smem_bytes // q,
            sm.sms * smem_bytes,
            float(h_l2),
            float(h_l2 * q),
            hbm_time,
        ),
        Level("HBM", None, None, "the top level: data already there (§4.2)", L, S, "Q, K, V, O", 0, 0, 0.0, 0.0, 0.0),
    )
    qk, pv, smx = busy_iters * t_qk, busy_iters * t_pv, busy_iters * t_sm
    ideal = t_qk + t_pv
    if t_load > max(t_qk, t_sm) + t_pv:
        limit, bound = (
            "L2 -> shared memory",
            "L2 -> shared memory transfers: a K/V block loads slower than its products",
        )
    elif hbm_time > sm_time:
        limit, bound = "HBM", "HBM: the compulsory traffic outlasts the SMs' work"
    elif t_sm > t_qk:
        limit, bound = (
            "softmax",
            (
                f"the softmax (exp on the MUFU): {t_sm:.0f} cycles per block against the {t_qk:.0f} of the next "
                f"Q K^T it overlaps, so the tensor cores wait; they are busy {ideal / t_it:.1%} of each block"
            ),
        )
    else:
        limit = "tensor cores"
        bound = f"the tensor cores: the softmax ({t_sm:.0f} cycles) hides behind the next Q K^T ({t_qk:.0f})"
    # the seed's B.0.1: rows per tile that hide HBM without any L2 reuse
    g_min = (s * W * q / hbm_clk) / (ideal / g)
    detail = (
        f"per {g} x {s} block (§5.7): Q K^T {t_qk:.0f}, P V {t_pv:.0f} tensor-core cycles; softmax {t_sm:.0f} "
        f"(MUFU exp {g * (s + 1) / sm.mufu_ops:.0f} = {g} rows x ({s} + 1 delta) / {sm.mufu_ops:.0f} per clock"
        + (f", x {1 + softmax_overhead:.2f} overhead" if softmax_overhead else "")
        + f", O rescale {g * 2 * Ev / sm.alu16_ops:.0f}); K/V load {t_load:.0f}; block = max(Q K^T, softmax) + P V = "
        f"{t_it:.0f} (FlashAttention-3's intra-warpgroup overlap, §6.1). Without L2 reuse a tile needs "
        f"g_q >= {g_min:.0f} rows to hide HBM (B.0.1: 295)"
    )
    time = TimeSplit(
        qk=qk,
        pv=pv,
        softmax=smx,
        transfers=(("shared memory", busy_iters * t_load), ("L2", hbm_time)),
        merge=0.0,
        total=total,
        limit=limit,
        bound=bound,
        unit="SM cycles",
        detail=detail,
        overlapped=True,
        busy=ideal / t_it,
    )
    ctas = tiles * bh if L > 1 else bh * p
    split = (
        f"{ctas} CTAs (batch x heads x query tiles = {bh} x {tiles}) over {sm.sms} SMs, longest first"
        if L > 1
        else f"decode: {bh} heads x {p} key chunks = {ctas} CTAs over {sm.sms} SMs, triples merged"
    )
    tiling = AttentionTiling(
        g_q=g,
        s_x=s,
        group=l2_group,
        score_level="registers (SM)",
        tile_level="shared memory (SM)",
        threads=sm.sms,
        key_split=p if L == 1 else 1,
        rounds=max(1, -(-ctas // sm.sms)),
        split=split,
    )
    bigger = [f"{rg} x {rs}: registers {_fmt_bytes(rr)}" for rg, rs, rr, rm in rejected if rr > sm.regs][:2]
    why = (
        f"g_q a multiple of the {sm.warpgroup_rows}-row warpgroup tile (§5.4), s_x of {sm.key_divisor} (§5.6 Table 1); "
        f"{g} x {s} holds {_fmt_bytes(reg_bytes)} of the {_fmt_bytes(sm.regs)} register file and "
        f"{_fmt_bytes(smem_bytes)} of {_fmt_bytes(sm.smem)} shared memory; larger tiles do not fit ("
        + "; ".join(bigger)
        + "), smaller ones pay the per-block delta exp and O rescale on fewer keys"
    )
    runner = ""
    for c in cands[1:]:
        if (c[4], c[5], c[1]) != (g, s, p):
            runner = f"g_q = {c[4]}, s_x = {c[5]}: {_fmt(c[0])} SM cycles (+{c[0] / total - 1:.1%})"
            break
    notes = (
        f"clock {sm.clock / 1e9:.2f} GHz = 989 TFLOPS / (132 SMs x 4096 fp16 ops per clock); the exp runs in fp32 on "
        "the MUFU whatever the input type (§5.7)",
        "tensor-core operand reads from shared memory are folded into the tensor rate (the seed models no "
        "separate cost for them)",
    )
    return AttentionModel(
        batch=batch,
        heads=heads,
        L=L,
        S=S,
        E=E,
        Ev=Ev,
        dtype=dtype,
        causal=causal,
        item=q,
        machine=f"{sm.name}: {sm.sms} SMs at {sm.clock / 1e9:.2f} GHz",
        tiling=tiling,
        levels=levels,
        time=time,
        why=why,
        runner_up=runner,
        notes=notes,
        formulas=(
            "shared memory: g = g_q (§3.2); L2: g = N_SM g_q, effective memory N_SM M_SM (A.2.1, B.1)",
            "§5.7 Table 3 per block: Q K^T 2 g s E / TC, P V 2 g s Ev / TC, exp g (s + s/u_x) / MUFU, "
            "O rescale 2 g Ev / ALU16; block = max(max(Q K^T, softmax) + P V, K/V load) (§6.1); "
            "time = max(SMs' makespan, HBM bytes / bandwidth)",
        ),
    )


def hopper_derivation(
    d: int = 128,
    dtype: str = "fp16",
    *,
    seq: int = 4096,
    batch: int = 4,
    heads: int = 16,
    causal: bool = False,
    softmax_overhead: float = 0.0,
) -> AttentionModel:
    """Seed 001's Hopper derivation (§5-6) for head dimension ``d``: `hopper_plan` of ``batch`` x
    ``heads`` heads of ``seq`` queries and keys (default 4 x 16 x 4096, FlashAttention-3's 16k
    tokens with 16 heads of 128). At d = 128, fp16 it gives FlashAttention-3's 128 x 128 tiles and
    finds the softmax (exp on the MUFU) the bound (§6.1, §6.3)."""
    _positive_int("d", d)
    _positive_int("seq", seq)
    return hopper_plan(batch, heads, seq, seq, d, d, dtype=dtype, causal=causal, softmax_overhead=softmax_overhead)
