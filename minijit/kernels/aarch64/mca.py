"""Static estimate of AArch64 microkernels with llvm-mca: cycles per K-loop iteration vs the FMA bound.

The body is the generator's innermost K-loop iteration (`brgemm.NeonBrgemm.program`)
plus its loop counter and backward branch. The FMA-bound minimum is read from
llvm-mca's own "Resource pressure by instruction" table: the busiest resource
unit counting only the ``fmla`` rows, i.e. FMAs / (FMA pipes of the model)
(neoverse-v1/v2: 4 units V0-V3; apple-m4, which LLVM 19 models as Cyclone: 3
vector units for fp32, 2 for fp64 FMLA). 100 % means the model's FMA pipes
never idle.
Next to it, ``hw_efficiency`` uses the pipe counts of the real cores
(`HW_FMA_PIPES`): LLVM 19 has no Apple M4 model of its own (``apple-m4`` uses
the Cyclone model, 3 vector units), while the M4 has 4 FMA pipes.

Any generated loop can be estimated from a kernel's listing: `loop_body`
cuts out the loop at a label (through its branch back), `estimate_loop` gives
the FMA-bound figures for a BRGEMM K loop and `copy_estimate` the cycles per
vector of a copy loop against llvm-mca's own resource bound (Block
RThroughput). The packed GEMM path (bench/aarch64_mca.py) uses them on the
kernels that `TensorOperation` generates.

SVE code is vector-length agnostic, llvm-mca's figures are per instruction: `sve_lanes` gives the
elements per SVE vector at the length of the core each model describes (`SVE_VL_BITS`: 128 bits
for neoverse-v2, 256 for neoverse-v1).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from asm import llvm
from minijit.kernels.aarch64.brgemm import NeonBrgemm, SveBrgemm
from minijit.kernels.aarch64.common import dtype_info

__all__ = [
    "HW_FMA_PIPES",
    "MCPUS",
    "SVE_VL_BITS",
    "CopyEstimate",
    "Estimate",
    "copy_estimate",
    "copy_table",
    "estimate",
    "estimate_loop",
    "estimates",
    "fma_bound",
    "llvm_version",
    "loop_body",
    "sve_lanes",
    "table",
]

MCPUS = ("neoverse-v2", "neoverse-v1", "apple-m4")
#: SVE vector length (bits) of the cores behind LLVM's SVE-capable models: llvm-mca counts SVE
#: instructions, not lanes, and its neoverse-v1 model has V1's two 256-bit SVE pipes, neoverse-v2
#: V2's four 128-bit ones; lanes per SVE instruction are taken at these lengths (`sve_lanes`)
SVE_VL_BITS = {"neoverse-v2": 128, "neoverse-v1": 256}
# 128-bit FMA pipes per core: Arm Neoverse V2 / V1 Software Optimization Guides (ASIMD FMLA
# on V0-V3); Apple M4 P-core: 4 (the published mini_jit
# lab figures: 4 pipes x 4 lanes x 2 flops x 4.4 GHz = 141 GFLOPS fp32 peak per core).
HW_FMA_PIPES = {"neoverse-v2": 4, "neoverse-v1": 4, "apple-m4": 4}


@dataclass(frozen=True)
class Estimate:
    """One llvm-mca run over a K-loop body."""

    kind: str
    isa: str
    shape: str  # "m x n x k, br, dtype, block"
    mcpu: str
    cycles: float  # per iteration of the K loop
    fmas: int  # fmla instructions per iteration
    fma_bound: float  # cycles per iteration if the model's FMA pipes were the only limit
    flops: int  # per iteration

    @property
    def model_pipes(self) -> float:
        """FMAs per cycle the model allows (its FMA pipes)."""
        return self.fmas / self.fma_bound

    @property
    def efficiency(self) -> float:
        """FMA-bound minimum over llvm-mca's cycles, in percent."""
        return 100.0 * self.fma_bound / self.cycles

    @property
    def hw_efficiency(self) -> float:
        """Like `efficiency` but against the real core's FMA pipes (`HW_FMA_PIPES`)."""
        return 100.0 * self.fmas / HW_FMA_PIPES.get(self.mcpu, self.model_pipes) / self.cycles

    @property
    def flops_per_cycle(self) -> float:
        return self.flops / self.cycles


def _pressure_table(text: str) -> tuple[list[str], list[tuple[list[float], str]]]:
    """Columns and rows (pressures, instruction) of llvm-mca's per-instruction resource table."""
    part = text.split("Resource pressure by instruction:", 1)[1].strip().splitlines()
    cols = re.findall(r"\[[0-9.]+\]", part[0])
    rows = []
    for line in part[1:]:
        tokens = line.split()
        if len(tokens) <= len(cols):
            break
        values = [0.0 if tok == "-" else float(tok) for tok in tokens[: len(cols)]]
        rows.append((values, " ".join(tokens[len(cols) :])))
    return cols, rows


def fma_bound(report: llvm.McaReport) -> float:
    """Cycles per iteration that the ``fmla`` rows alone put on the busiest resource unit."""
    cols, rows = _pressure_table(report.text)
    load = [0.0] * len(cols)
    for values, inst in rows:
        if inst.startswith("fmla"):
            load = [x + v for x, v in zip(load, values, strict=True)]
    if not any(load):
        raise ValueError("no fmla in the llvm-mca report")
    fmas = sum(inst.startswith("fmla") for _, inst in rows)
    pipes = max(1, round(fmas / max(load)))  # the table prints 0.33/0.34 shares: snap to whole pipes
    return fmas / pipes


def loop_body(listing: str, name: str, occurrence: int = 0) -> str:
    """The instructions of the loop at label ``.L<name>_<n>`` (its ``occurrence``-th such label in
    ``listing``) through the branch back to it, every label operand replaced by a numeric offset
    (llvm-mca takes the text as a straight block). ValueError when there is no such loop."""
    lines = listing.splitlines()
    labels = [i for i, s in enumerate(lines) if re.fullmatch(rf"\.L{re.escape(name)}_\d+:", s.strip())]
    if len(labels) <= occurrence:
        raise ValueError(f"name: no loop labelled .L{name}_<n> (occurrence {occurrence}) in the listing")
    start = labels[occurrence]
    label = lines[start].strip()[:-1]
    body = []
    for s in lines[start + 1 :]:
        text = s.strip()
        if text.endswith(":"):  # a label inside the loop (e.g. a forward target) is not an instruction
            continue
        body.append("    " + re.sub(r"\.L\w+", "#-4", text))
        if re.match(r"b(\.\w+)?\s", text) and text.split()[-1] == label:
            return "\n".join(body)
    raise ValueError(f"name: loop {label} has no branch back to its label")


def sve_lanes(mcpu: str, dtype: str = "fp32") -> int:
    """Elements per SVE vector of ``dtype`` at the vector length of ``mcpu`` (`SVE_VL_BITS`)."""
    if mcpu not in SVE_VL_BITS:
        raise ValueError(f"mcpu must be one of {', '.join(SVE_VL_BITS)} (SVE), got {mcpu!r}")
    return SVE_VL_BITS[mcpu] // (8 * dtype_info(dtype).size)


def _flops(body: str) -> tuple[int, int]:
    """fmla instructions and flops in ``body`` (2 per lane: .4s -> 8, .2d/.2s -> 4, scalar/SVE -> 2)."""
    fmas = [s.strip() for s in body.splitlines() if s.strip().startswith("fmla")]
    flops = 0
    for s in fmas:
        lanes = re.match(r"fmla\s+v\d+\.(\d+)[sd]", s)
        flops += 2 * (int(lanes.group(1)) if lanes else 1)
    return len(fmas), flops


def estimate_loop(body: str, isa: str, shape: str, mcpu: str, kind: str = "brgemm", iterations: int = 300) -> Estimate:
    """llvm-mca's cycles per iteration of a K-loop ``body`` (e.g. from `loop_body`) and its FMA bound."""
    report = llvm.mca(body, mcpu, iterations=iterations)
    fmas, flops = _flops(body)
    return Estimate(kind, isa, shape, mcpu, report.cycles_per_iteration, fmas, fma_bound(report), flops)


@dataclass(frozen=True)
class CopyEstimate:
    """One llvm-mca run over a copy loop: cycles per iteration against the model's resource bound."""

    isa: str
    shape: str
    mcpu: str
    cycles: float  # per iteration
    bound: float  # llvm-mca's Block RThroughput: the busiest resource's cycles per iteration
    vectors: int  # 128-bit (NEON) or SVE vectors stored per iteration

    @property
    def efficiency(self) -> float:
        """Resource bound over llvm-mca's cycles, in percent."""
        return 100.0 * self.bound / self.cycles

    @property
    def cycles_per_vector(self) -> float:
        return self.cycles / self.vectors


def _stored_vectors(body: str) -> int:
    """Vectors stored by ``body``: st1w/st1d (SVE), q-register str/stp (NEON)."""
    count = 0
    for s in body.splitlines():
        op, _, rest = s.strip().partition(" ")
        if op in ("st1w", "st1d"):
            count += 1
        elif op in ("str", "stp") and rest.startswith("q"):
            count += 2 if op == "stp" else 1
    return count


def copy_estimate(body: str, isa: str, shape: str, mcpu: str, iterations: int = 300) -> CopyEstimate:
    """llvm-mca's cycles per iteration of a copy loop ``body`` and its resource bound."""
    vectors = _stored_vectors(body)
    if not vectors:
        raise ValueError("body: the copy loop stores no vector")
    report = llvm.mca(body, mcpu, iterations=iterations)
    return CopyEstimate(isa, shape, mcpu, report.cycles_per_iteration, report.block_rthroughput, vectors)


def copy_table(rows: list[CopyEstimate]) -> str:
    """Markdown table of copy-loop estimates."""
    head = (
        "| copy loop | mcpu | cycles/iter | vectors stored/iter | cycles/vector | resource bound (cycles) "
        "| efficiency (model) |\n|---|---|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r.isa} {r.shape} | {r.mcpu} | {r.cycles:.2f} | {r.vectors} | {r.cycles_per_vector:.2f} | "
        f"{r.bound:.2f} | {r.efficiency:.1f} % |\n"
        for r in rows
    )
    return head + body


def _body(kind: str, isa: str, m: int, n: int, k: int, br_size: int, dtype: str, block) -> str:
    if kind != "brgemm":
        raise ValueError(f"kind must be 'brgemm', got {kind!r}")
    if isa == "neon":
        _, body = NeonBrgemm.program(m, n, k, br_size, dtype=dtype, block=block)
    elif isa == "sve":
        body = SveBrgemm.kloop_body(dtype)
    else:
        raise ValueError(f"isa must be 'neon' or 'sve', got {isa!r}")
    return f"{body}\n    subs x11, x11, #1\n    b.ne #-4"  # loop counter and backward branch


def estimate(
    kind: str = "brgemm",
    isa: str = "neon",
    m: int = 32,
    n: int = 32,
    k: int = 32,
    br_size: int = 1,
    dtype: str = "fp32",
    mcpu: str = "neoverse-v2",
    block: tuple[int, int] | None = None,
    iterations: int = 300,
) -> Estimate:
    """llvm-mca's cycles per K-loop iteration of the generated kernel on ``mcpu``."""
    body = _body(kind, isa, m, n, k, br_size, dtype, block)
    blk = block or NeonBrgemm.BLOCK[dtype]
    shape = f"{m}x{n}x{k} br={br_size} {dtype} block {blk[0]}x{blk[1]}" if isa == "neon" else f"{dtype} (SVE)"
    return estimate_loop(body, isa, shape, mcpu, kind, iterations)


def estimates(mcpus: tuple[str, ...] = MCPUS, **kwargs) -> list[Estimate]:
    """`estimate` for every CPU in ``mcpus``."""
    return [estimate(mcpu=c, **kwargs) for c in mcpus]


def llvm_version() -> str:
    """``llvm-mca --version`` (the LLVM version line)."""
    import subprocess

    out = subprocess.run([llvm.find_tool("llvm-mca"), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"LLVM version ([0-9.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[0]


def table(rows: list[Estimate]) -> str:
    """Markdown table of estimates."""
    head = (
        "| kernel | mcpu | cycles/iter | FMAs/iter | model FMA pipes | FMA-bound cycles | efficiency (model) "
        "| efficiency (4 HW pipes) | flops/cycle |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r.isa} {r.kind} {r.shape} | {r.mcpu} | {r.cycles:.2f} | {r.fmas} | {r.model_pipes:.1f} | "
        f"{r.fma_bound:.2f} | {r.efficiency:.1f} % | {r.hw_efficiency:.1f} % | {r.flops_per_cycle:.1f} |\n"
        for r in rows
    )
    return head + body


def today() -> str:
    """ISO date for result files."""
    return datetime.date.today().isoformat()
