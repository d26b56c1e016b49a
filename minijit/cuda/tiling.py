"""CTA tiles and split-K factors for the mma.sync GEMM family from a wave and data-movement model (seed 001).

The GPU analog of `minijit.blocking`. A GEMM of ``M x N x K`` (times ``reduce`` BRGEMM blocks,
times ``batch`` independent entries) in CTA tiles ``BM x BN x BK`` with split-K factor ``S``
runs ``tiles = ceil(M/BM) * ceil(N/BN) * batch`` output tiles as ``tiles * S`` CTAs, each over
``ceil(seq / S)`` of the ``seq = reduce * ceil(K/BK)`` K tiles. The model prices a candidate by:

- **waves**: ``slots = SMs * CTAs_per_SM`` (CTAs per SM bounded by threads, registers and shared
  memory), ``waves = ceil(tiles * S / slots)``, tail-wave efficiency ``tiles * S / (waves *
  slots)``. A wave takes as long as its busiest SM: ``c`` resident CTAs advance one K tile in
  ``max(c * flops / (mma rate * warp utilization), c * shared bytes / shared bandwidth)`` clocks
  (an SM needs `GpuModel.warps_for_peak` warps in flight to keep its tensor cores busy), plus a
  fixed latency per wave (pipeline fill, epilogue);
- **bytes moved** (seed 001's transfer count per level): L2 -> shared memory, A is read once per
  N tile and B once per M tile: ``tiles * (BM + BN) * BK * seq`` elements; DRAM -> L2: the CTAs
  of a wave stream K in step, so a panel several of them read comes from DRAM once per wave
  (``waves * (distinct A panels + distinct B panels of a wave)``), and once in all (compulsory)
  when all of A and B fit the L2 share `L2_SHARE`; C written (and read for a first touch
  load/relu) once;
- **split-K's price**: ``S`` fp32 partial planes written and read back (through L2 when the
  workspace fits half of it, else DRAM) and the reduction kernel's launch.

The main kernel takes ``max(compute, DRAM bytes / DRAM bandwidth, L2 bytes / L2 bandwidth)``;
the cheapest candidate (ties: no split, larger tiles) wins. :func:`rank` lists every candidate
with its figures; :func:`choose` returns the best as a :class:`TilePlan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from minijit.cuda import gemm, splitk

#: split-K factors the model proposes
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
#: CTA tile edges (elements) and BK per input element size (bytes)
TILE_EDGES = (32, 64, 128)
BKS = {2: (32, 64), 4: (16, 32)}
#: tiles (element bytes, BM, BN, BK) left out: ptxas 13.0 for sm_90 spills the f16/bf16 64x128x64
#: kernel (16 bytes at 128 registers)
EXCLUDED = frozenset({(2, 64, 128, 64)})
#: fraction of the L2 the model lets one wave's operand panels (or the workspace) occupy
L2_SHARE = 0.5
#: each split-K part gets at least this many K tiles (a shorter part cannot fill the pipeline)
MIN_PART_TILES = 2


@dataclass(frozen=True)
class GpuModel:
    """What the model needs of a device. Sizes in bytes, bandwidths in bytes per second, rates
    per SM per clock; ``mma_per_clk`` counts f16/bf16 ``mma.sync`` flops (tf32: half)."""

    name: str
    sms: int
    l2_bytes: int
    smem_per_sm: int
    dram_bw: float
    l2_bw: float
    clock_hz: float
    mma_per_clk: float
    smem_per_clk: float = 128.0
    regs_per_sm: int = 65536
    threads_per_sm: int = 2048
    ctas_per_sm: int = 32
    smem_reserved: int = 1024  # per CTA, taken by the driver
    launch_s: float = 3e-6  # a dependent kernel launch (the split-K reduction)
    wave_s: float = 1e-6  # per wave: pipeline fill, epilogue
    warps_for_peak: int = 8

    def __post_init__(self) -> None:
        for name in ("sms", "l2_bytes", "smem_per_sm", "regs_per_sm", "threads_per_sm", "ctas_per_sm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GpuModel.{name} must be a positive int, got {v!r}")
        for name in ("dram_bw", "l2_bw", "clock_hz", "mma_per_clk", "smem_per_clk", "warps_for_peak"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"GpuModel.{name} must be a positive number, got {v!r}")
        for name in ("smem_reserved", "launch_s", "wave_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError(f"GpuModel.{name} must be a non-negative number, got {v!r}")

    @classmethod
    def for_arch(cls, arch: str) -> GpuModel:
        """The default model for ``arch`` ("sm_90", "sm_80", ...): H100 SXM for 9.x and newer,
        A100 SXM for 8.0, an A100 with consumer-class tensor rates for other 8.x."""
        digits = arch.removeprefix("sm_").rstrip("a")
        cc = int(digits) if digits.isdigit() else 90
        if cc >= 90:
            return H100_SXM
        if cc == 80:
            return A100_SXM
        return replace(A100_SXM, name=f"sm_{cc} (A100 model, half the tensor rate)", mma_per_clk=1024.0)

    @classmethod
    def from_attributes(cls, attrs: Mapping[str, int], name: str = "", base: GpuModel | None = None) -> GpuModel:
        """A model from ``CU_DEVICE_ATTRIBUTE_*`` values (keys without the prefix, e.g.
        ``MULTIPROCESSOR_COUNT``; `ATTRIBUTES` lists those read). Missing or non-positive
        values keep ``base``'s (default: `for_arch` of the compute capability); DRAM bandwidth is
        ``2 * MEMORY_CLOCK_RATE (kHz) * GLOBAL_MEMORY_BUS_WIDTH (bits) / 8``, the L2 bandwidth
        ``base``'s scaled by SMs and clock."""

        def get(key):
            v = attrs.get(key)
            return int(v) if v is not None and int(v) > 0 else None

        major, minor = get("COMPUTE_CAPABILITY_MAJOR"), get("COMPUTE_CAPABILITY_MINOR") or 0
        if base is None:
            base = cls.for_arch(f"sm_{major}{minor}") if major else H100_SXM
        changes: dict = {"name": name or base.name}
        for field, key in (
            ("sms", "MULTIPROCESSOR_COUNT"),
            ("l2_bytes", "L2_CACHE_SIZE"),
            ("smem_per_sm", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            ("regs_per_sm", "MAX_REGISTERS_PER_MULTIPROCESSOR"),
            ("threads_per_sm", "MAX_THREADS_PER_MULTIPROCESSOR"),
            ("ctas_per_sm", "MAX_BLOCKS_PER_MULTIPROCESSOR"),
        ):
            if get(key):
                changes[field] = get(key)
        if get("CLOCK_RATE"):
            changes["clock_hz"] = get("CLOCK_RATE") * 1e3
        if get("MEMORY_CLOCK_RATE") and get("GLOBAL_MEMORY_BUS_WIDTH"):
            changes["dram_bw"] = 2.0 * get("MEMORY_CLOCK_RATE") * 1e3 * get("GLOBAL_MEMORY_BUS_WIDTH") / 8
        model = replace(base, **changes)
        scale = (model.sms * model.clock_hz) / (base.sms * base.clock_hz)
        return replace(model, l2_bw=base.l2_bw * scale)

    @classmethod
    def from_device(cls, dev) -> GpuModel:
        """The model of a `ptx.driver.Device` (its attributes through ``dev.attribute``); a device
        without them (the simulator's) gets `for_arch` of its arch, an attribute the driver (or
        its bindings) refuses keeps that default's value."""
        base = cls.for_arch(getattr(dev, "arch", "sm_90"))
        query = getattr(dev, "attribute", None)
        if query is None:
            return base
        attrs = {}
        for key in ATTRIBUTES:
            try:
                attrs[key] = int(query(key))
            except Exception:  # noqa: BLE001, S112 - not known to this driver or its bindings
                continue
        if not attrs:
            return base
        return cls.from_attributes(attrs, name=str(getattr(dev, "name", "")), base=base)


#: CU_DEVICE_ATTRIBUTE_* names `GpuModel.from_attributes` reads
ATTRIBUTES = (
    "COMPUTE_CAPABILITY_MAJOR",
    "COMPUTE_CAPABILITY_MINOR",
    "MULTIPROCESSOR_COUNT",
    "L2_CACHE_SIZE",
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "MAX_THREADS_PER_MULTIPROCESSOR",
    "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "CLOCK_RATE",
    "MEMORY_CLOCK_RATE",
    "GLOBAL_MEMORY_BUS_WIDTH",
)

#: H100 SXM5: 132 SMs, 50 MB L2, 228 KB shared memory per SM, HBM3 3.35 TB/s; mma.sync reaches
#: about two thirds of the wgmma rate (4096 f16 flops per SM per clock)
H100_SXM = GpuModel("H100 SXM (model)", 132, 50 * 2**20, 228 * 1024, 3.35e12, 7.0e12, 1.755e9, 2730.0)
#: A100 SXM4 80 GB: 108 SMs, 40 MB L2, 164 KB shared memory per SM, HBM2e 2.04 TB/s, 312 TFLOPS f16
A100_SXM = GpuModel("A100 SXM (model)", 108, 40 * 2**20, 164 * 1024, 2.039e12, 4.8e12, 1.41e9, 2048.0)


@dataclass(frozen=True)
class TilePlan:
    """A CTA tile (``bm x bn x bk`` elements, ``warps_m x warps_n`` warps, ``stages`` shared
    buffers) and split-K factor for one GEMM, with the model's ``figures`` ((name, value) pairs:
    times in seconds, traffic in bytes) and a ``reason`` in words."""

    dtype: str
    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int
    split_k: int
    reason: str = ""
    figures: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.dtype not in gemm.ESIZE:
            raise ValueError(f"TilePlan.dtype must be one of {sorted(gemm.ESIZE)}, got {self.dtype!r}")
        for name in ("bm", "bn", "bk", "warps_m", "warps_n", "stages", "split_k"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TilePlan.{name} must be a positive int, got {v!r}")
        if self.split_k > gemm.MAX_SPLIT:
            raise ValueError(f"TilePlan.split_k must be at most {gemm.MAX_SPLIT}, got {self.split_k}")
        if not all(isinstance(k, str) and isinstance(v, int | float) for k, v in self.figures):
            raise ValueError("TilePlan.figures must be (name, number) pairs")

    def figure(self, name: str) -> float:
        """One of the model's figures by name (KeyError naming the known ones)."""
        for key, value in self.figures:
            if key == name:
                return value
        raise KeyError(f"{name!r}; figures: {[k for k, _ in self.figures]}")

    def spec(self, first: str = "zero", last: str = "none", **changes) -> gemm.GemmSpec:
        """The GEMM kernel's spec (copy widths 16 bytes, narrowed by `GemmSpec.aligned`). With
        split-K the kernel writes raw partials (first "zero", last "none"): ``first``/``last``
        then belong to :meth:`reduce_spec`."""
        if self.split_k > 1:
            first, last = "zero", "none"
        s = gemm.GemmSpec(
            self.dtype, self.bm, self.bn, self.bk, self.warps_m, self.warps_n, self.stages, 16, 16, first, last
        )
        s = replace(s, split_k=self.split_k, **changes)
        return s.aligned(changes.get("vec_a", 16), changes.get("vec_b", 16))

    def reduce_spec(self, first: str = "zero", last: str = "none") -> splitk.ReduceSpec | None:
        """The split-K reduction's spec (None without split-K)."""
        return splitk.ReduceSpec(self.split_k, first, last) if self.split_k > 1 else None


def tiles(dtype: str) -> list[gemm.GemmSpec]:
    """Candidate tiles: BM, BN in `TILE_EDGES`, BK in `BKS`, warps ``max(1, BM/64) x max(1,
    BN/32)``, the deepest pipeline (4, 3 or 2 stages) that fits 48 KB of static shared memory;
    only specs that validate, none of `EXCLUDED`."""
    es = gemm.ESIZE[dtype]
    out = []
    for bm in TILE_EDGES:
        for bn in TILE_EDGES:
            for bk in BKS[es]:
                if (es, bm, bn, bk) in EXCLUDED:
                    continue
                for stages in (4, 3, 2):
                    s = gemm.GemmSpec(dtype, bm, bn, bk, max(1, bm // 64), max(1, bn // 32), stages)
                    try:
                        out.append(s.aligned(16, 16).validate())
                    except ValueError:
                        continue
                    break
    return out


#: registers per thread of the candidate tiles, (element bytes, BM, BN, BK) -> count: ptxas 13.0's
#: for sm_80 and sm_90, the most over first/last touches and split-K (test_tiling re-measures them)
REGISTERS = {
    (2, 32, 32, 32): 104, (2, 32, 32, 64): 156, (2, 32, 64, 32): 95, (2, 32, 64, 64): 142,
    (2, 32, 128, 32): 95, (2, 32, 128, 64): 124, (2, 64, 32, 32): 162, (2, 64, 32, 64): 222,
    (2, 64, 64, 32): 151, (2, 64, 64, 64): 182, (2, 64, 128, 32): 141,
    (2, 128, 32, 32): 158, (2, 128, 32, 64): 218, (2, 128, 64, 32): 141, (2, 128, 64, 64): 160,
    (2, 128, 128, 32): 128,
    (4, 32, 32, 16): 114, (4, 32, 32, 32): 162, (4, 32, 64, 16): 100, (4, 32, 64, 32): 150,
    (4, 32, 128, 16): 94, (4, 32, 128, 32): 128, (4, 64, 32, 16): 168, (4, 64, 32, 32): 247,
    (4, 64, 64, 16): 148, (4, 64, 64, 32): 198, (4, 64, 128, 16): 132, (4, 64, 128, 32): 162,
    (4, 128, 32, 16): 162, (4, 128, 32, 32): 220, (4, 128, 64, 16): 136, (4, 128, 64, 32): 162,
    (4, 128, 128, 16): 124,
}  # fmt: skip


def registers(spec: gemm.GemmSpec) -> int:
    """Registers per thread, rounded up to the allocation unit of 8: `REGISTERS` for the candidate
    tiles; for others a rough bound (most of the count is per-copy addressing, ~5 per
    global->shared copy a thread issues per K tile, then fragments and accumulators); at most 255."""
    count = REGISTERS.get((spec.es, spec.bm, spec.bn, spec.bk))
    if count is None:
        frags = 4 * spec.mt + 2 * spec.nt
        count = 5 * (spec.copies("a") + spec.copies("b")) + 5 * frags + spec.mt * spec.nt + 40
    return min(255, -(-count // 8) * 8)


def ctas_per_sm(spec: gemm.GemmSpec, gpu: GpuModel) -> int:
    """Resident CTAs per SM: the least of the CTA, thread, register and shared memory limits."""
    return max(
        1,
        min(
            gpu.ctas_per_sm,
            gpu.threads_per_sm // spec.threads,
            gpu.regs_per_sm // (registers(spec) * spec.threads),
            gpu.smem_per_sm // (spec.smem_bytes + gpu.smem_reserved),
        ),
    )


def evaluate(
    spec: gemm.GemmSpec,
    split: int,
    m: int,
    n: int,
    k: int,
    *,
    batch: int = 1,
    reduce: int = 1,
    gpu: GpuModel | None = None,
    first: str = "zero",
) -> dict[str, float]:
    """The model's figures for ``spec``'s tile with split-K factor ``split`` (module docstring):
    counts, seconds (``time_s`` the total) and bytes."""
    gpu = gpu or H100_SXM
    es = spec.es
    tm, tn = -(-m // spec.bm), -(-n // spec.bn)
    n_tiles = tm * tn * batch
    ctas = n_tiles * split
    seq = reduce * -(-k // spec.bk)
    part = -(-seq // split)  # K tiles of the longest part
    per_sm = ctas_per_sm(spec, gpu)
    slots = gpu.sms * per_sm
    waves = -(-ctas // slots)
    tail = ctas / (waves * slots)

    # compute: per wave, its busiest SM advances all its resident CTAs one K tile at a time
    rate = gpu.mma_per_clk * (0.5 if es == 4 else 1.0)
    flops_tile = 2.0 * spec.bm * spec.bn * spec.bk
    smem_tile = (spec.warps_n * spec.bm + spec.warps_m * spec.bn) * spec.bk * es + spec.stage_bytes

    def wave_time(resident: int) -> float:
        util = min(1.0, resident * spec.warps / gpu.warps_for_peak)
        clocks = max(resident * flops_tile / (rate * util), resident * smem_tile / gpu.smem_per_clk)
        return part * clocks / gpu.clock_hz + gpu.wave_s

    full, rest = divmod(ctas, slots)
    compute = full * wave_time(per_sm) + (wave_time(-(-rest // gpu.sms)) if rest else 0.0)

    # bytes: L2 -> shared (A once per N tile, B once per M tile), DRAM -> L2
    kspan = seq * spec.bk
    l2_ab = float(n_tiles * (spec.bm + spec.bn) * kspan * es)
    compulsory = float(batch * reduce * (m * k + k * n) * es)
    in_wave = min(ctas, slots)
    wm_tiles = min(tm, in_wave)
    wn_tiles = min(tn, -(-in_wave // tm))
    wave_set = (wm_tiles * spec.bm + wn_tiles * spec.bn) * (kspan / split) * es
    budget = L2_SHARE * gpu.l2_bytes
    dram_ab = compulsory if compulsory <= budget else min(l2_ab, max(compulsory, waves * wave_set))
    c_bytes = float(batch * m * n * 4)
    c_io = c_bytes * (2 if first != "zero" else 1)
    ws_bytes = float(splitk.workspace_bytes(split, m, n, batch)) if split > 1 else 0.0
    ws_in_l2 = ws_bytes <= budget
    if split > 1:
        dram_main = dram_ab + (0.0 if ws_in_l2 else ws_bytes)
        l2_main = l2_ab + ws_bytes
        red_bytes = ws_bytes + c_io
        red_bw = gpu.l2_bw if ws_in_l2 else gpu.dram_bw
        reduction = gpu.launch_s + red_bytes / red_bw + gpu.wave_s
    else:
        dram_main = dram_ab + c_io
        l2_main = l2_ab + c_io
        reduction = 0.0
    dram_s, l2_s = dram_main / gpu.dram_bw, l2_main / gpu.l2_bw
    main = max(compute, dram_s, l2_s)
    flops = 2.0 * batch * reduce * m * n * k
    return {
        "ctas": float(ctas),
        "ctas_per_sm": float(per_sm),
        "waves": float(waves),
        "tail_efficiency": tail,
        "compute_s": compute,
        "dram_bytes": dram_main,
        "l2_smem_bytes": l2_main,
        "dram_s": dram_s,
        "l2_s": l2_s,
        "workspace_bytes": ws_bytes,
        "reduction_s": reduction,
        "time_s": main + reduction,
        "flops_per_dram_byte": flops / max(1.0, dram_main + (ws_bytes if split > 1 and not ws_in_l2 else 0.0)),
    }


def _check_problem(m: int, n: int, k: int, batch: int, reduce: int) -> None:
    for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch), ("reduce", reduce)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def rank(
    m: int,
    n: int,
    k: int,
    *,
    batch: int = 1,
    reduce: int = 1,
    dtype: str = "f16",
    gpu: GpuModel | None = None,
    first: str = "zero",
) -> list[TilePlan]:
    """Every candidate (tile x split-K factor) for an ``M x N x K`` GEMM (elements; ``reduce``
    BRGEMM blocks accumulated, ``batch`` independent ones), cheapest first. Split-K factors leave
    every part `MIN_PART_TILES` K tiles and ``batch * split`` within grid z."""
    _check_problem(m, n, k, batch, reduce)
    gpu = gpu or H100_SXM
    plans = []
    for spec in tiles(dtype):
        seq = reduce * -(-k // spec.bk)
        for split in SPLITS:
            if split > 1 and (seq < MIN_PART_TILES * split or batch * split > 65535 or -(-n // 8) > 65535):
                continue
            f = evaluate(spec, split, m, n, k, batch=batch, reduce=reduce, gpu=gpu, first=first)
            reason = (
                f"{spec.bm}x{spec.bn}x{spec.bk} tiles, split-K {split} on {gpu.name}: {f['ctas']:.0f} CTAs"
                f" ({f['ctas_per_sm']:.0f}/SM) in {f['waves']:.0f} wave(s), tail {f['tail_efficiency']:.0%};"
                f" modelled compute {f['compute_s'] * 1e6:.3g} us, DRAM {f['dram_bytes']:.3g} B"
                f" ({f['dram_s'] * 1e6:.3g} us), L2->SMEM {f['l2_smem_bytes']:.3g} B ({f['l2_s'] * 1e6:.3g} us),"
                f" reduction {f['reduction_s'] * 1e6:.3g} us; total {f['time_s'] * 1e6:.3g} us"
            )
            plans.append(
                TilePlan(
                    dtype,
                    spec.bm,
                    spec.bn,
                    spec.bk,
                    spec.warps_m,
                    spec.warps_n,
                    spec.stages,
                    split,
                    reason,
                    tuple(f.items()),
                )
            )
    plans.sort(key=lambda p: (p.figure("time_s"), p.split_k, -p.bm * p.bn, -p.bk))
    return plans


def choose(
    m: int,
    n: int,
    k: int,
    *,
    batch: int = 1,
    reduce: int = 1,
    dtype: str = "f16",
    gpu: GpuModel | None = None,
    first: str = "zero",
) -> TilePlan:
    """The cheapest plan of :func:`rank`."""
    return rank(m, n, k, batch=batch, reduce=reduce, dtype=dtype, gpu=gpu, first=first)[0]


__all__ = [
    "A100_SXM",
    "ATTRIBUTES",
    "H100_SXM",
    "GpuModel",
    "TilePlan",
    "choose",
    "ctas_per_sm",
    "evaluate",
    "rank",
    "registers",
    "tiles",
]
