"""Write bench/results/aarch64_mca_<date>.md: llvm-mca estimates of the NEON and SVE BRGEMM K loops
and of the packed GEMM path (the K loop on the packed A, the copy kernel that packs it), and the
NEON and SVE GEMV kernels' inner loops against the BRGEMM with n = 1.

.venv/bin/python bench/aarch64_mca.py          # from the repository root
.venv/bin/python bench/aarch64_mca.py --gemv   # only the GEMV rows: bench/results/aarch64_gemv_mca_<date>.md
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minijit import optimizer, packing, targets  # noqa: E402
from minijit.kernels.aarch64 import mca  # noqa: E402
from minijit.kernels.aarch64.brgemm import NeonBrgemm as neon_brgemm  # noqa: E402
from minijit.kernels.aarch64.brgemm import SveBrgemm as sve_brgemm  # noqa: E402
from minijit.kernels.aarch64.gemv import NeonGemv as neon_gemv  # noqa: E402
from minijit.kernels.aarch64.gemv import SveGemv as sve_gemv  # noqa: E402
from minijit.tensor_operation import TensorOperation  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / f"aarch64_mca_{mca.today()}.md"
GEMV_OUT = Path(__file__).resolve().parent / "results" / f"aarch64_gemv_mca_{mca.today()}.md"
COMMAND = ".venv/bin/python bench/aarch64_mca.py"
GEMV_SIZE = 4096  # M = K of the GEMV rows (square fp32 matrix-vector product, br 1)
PACKED_SIZE = 512  # square GEMM of the packed-path rows: lda 512 is the power of two that packing fixes
SVE_MCPUS = ("neoverse-v2", "neoverse-v1")  # apple-m4 has no SVE
COPY_LOOP = {  # label of the copy kernel's innermost loop: (isa, transposed) -> name
    ("neon", False): "rows",
    ("neon", True): "m",
    ("sve", False): "row",
    ("sve", True): "tiles",
}


def generation_ms(repeats: int = 20) -> float:
    """Best-of wall time of `neon_brgemm.program` for 32x32x32 fp32 (code generation only)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        neon_brgemm.program(32, 32, 32, 1)
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def _gemm(target: str, dtype: str, a_order: str, pack: bool) -> TensorOperation:
    """C = A·B (size PACKED_SIZE, B and C column-major; A in ``a_order``) set up as a numpy user does."""
    n = PACKED_SIZE
    sa = (1, n) if a_order == "F" else (n, 1)
    op = TensorOperation(target, num_threads=1, pack=pack)
    op.setup(dtype, "none", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [n] * 3, [sa[0], 0, sa[1]],
             [0, n, 1], [1, n, 0])  # fmt: skip
    return op


def packed_path() -> tuple[str, list[mca.Estimate], list[mca.CopyEstimate]]:
    """Rows for the packed GEMM path on NEON and SVE, fp32 and fp64: the BRGEMM K loop as it runs
    on the packed A, the K loop of the unpacked transposed A (what packing replaces), and the
    inner loop of the copy kernel for an F-order (plain copy) and a C-order (transposing) A."""
    l1, l2 = packing.cache_geometries()
    notes = [
        f"- Cache model input (this host): L1 {l1.size // 1024} KiB {l1.ways}-way, "
        f"L2 {l2.size // 1024} KiB {l2.ways}-way"
    ]
    kloops, copies = [], []
    for target in ("aarch64-neon", "aarch64-sve"):
        isa = targets.get(target).isa
        mcpus = mca.MCPUS if isa == "neon" else SVE_MCPUS
        for dtype in ("fp32", "fp64"):
            for a_order in ("F", "C"):
                op = _gemm(target, dtype, a_order, pack=True)
                plan = op.pack_plan
                if plan is None:
                    notes.append(f"- {target} {dtype} {a_order}-order A: not packed (the model found no conflict)")
                    continue
                main = op.primitives["main"]
                lda = plan.main.dims[plan.main.prim.k].stride_in0  # the padded panel column
                copy_op = TensorOperation(target, num_threads=1, pack=False)
                copy_op.setup_config(optimizer.optimize(plan.copy, thread_target=1))
                copy = copy_op.primitives["main"]
                transposed = copy.name.endswith(("_t", f"_t_{dtype}"))
                notes.append(
                    f"- {target} {dtype} {a_order}-order A: `{main.name}` reads the packed A with lda = {lda} "
                    f"(column of {PACKED_SIZE} padded); `{copy.name}` packs it. {plan.reason}."
                )
                if a_order == "F":  # both orders pack into the same layout: one K-loop row
                    body = mca.loop_body(main.listing, "k")
                    shape = f"{main.name}, packed A (lda {lda})"
                    kloops += [mca.estimate_loop(body, isa, shape, c) for c in mcpus]
                else:  # the K loop packing replaces: the unpacked kernel on the transposed A
                    plain = _gemm(target, dtype, a_order, pack=False).primitives["main"]
                    body = mca.loop_body(plain.listing, "k")
                    shape = f"{plain.name}, unpacked transposed A (lda {PACKED_SIZE})"
                    kloops += [mca.estimate_loop(body, isa, shape, c) for c in mcpus]
                body = mca.loop_body(copy.listing, COPY_LOOP[isa, transposed])
                shape = f"{copy.name} ({a_order}-order A {'transposed' if transposed else 'copied'} into the panel)"
                copies += [mca.copy_estimate(body, isa, shape, c) for c in mcpus]
    return "\n".join(notes), kloops, copies


def _gemv_table(isa: str, forms: list[tuple], mcpus: tuple[str, ...]) -> str:
    """Markdown table of ``forms`` ((kernel, loop label, listing, index of the BRGEMM row it is
    compared with or None)) on ``mcpus``: llvm-mca's cycles per iteration of the loop, in elements
    of A per cycle (one FMA lane per element of A in both kernels; SVE at the mcpu's vector length)."""
    n = GEMV_SIZE
    head = (
        f"| kernel (fp32, {n} x 1 x {n}) | loop | mcpu | cycles/iter | A elements/iter | A elements/cycle "
        "| vs BRGEMM n = 1 |\n|---|---|---|---:|---:|---:|---:|\n"
    )
    out = []
    for cpu in mcpus:
        rows = [mca.estimate_loop(mca.loop_body(listing, loop), isa, name, cpu) for name, loop, listing, _ in forms]
        elements = [r.fmas * mca.sve_lanes(cpu) if isa == "sve" else r.flops // 2 for r in rows]
        label = f"{cpu} ({mca.SVE_VL_BITS[cpu]}-bit SVE)" if isa == "sve" else cpu
        for (name, loop, _, ref), r, el in zip(forms, rows, elements, strict=True):
            per_cycle = el / r.cycles
            vs = "" if ref is None else f"{per_cycle / (elements[ref] / rows[ref].cycles):.2f}x"
            out.append(f"| {name} | `{loop}` | {label} | {r.cycles:.2f} | {el} | {per_cycle:.2f} | {vs} |\n")
    return head + "".join(out)


def gemv_rows() -> str:
    """Markdown table: llvm-mca's cycles per iteration of the innermost loop of the NEON GEMV
    kernel (column form: its rows loop; row form, trans_a: its K loop) and of the NEON BRGEMM with
    n = 1 (its K loop: the 16 x 1 block, and the 4 x 1 block of 4 x 4 tile transposes with
    trans_a), fp32, in elements of A per cycle (one FMA lane per element of A in both kernels)."""
    n = GEMV_SIZE
    forms = [  # (kernel, loop label, the listing, the BRGEMM row it is compared with)
        ("neon_gemv, A column-major", "rows", neon_gemv.program(n, n)[0].listing(), 2),
        ("neon_gemv, trans_a (A row-major)", "k", neon_gemv.program(n, n, trans_a=True)[0].listing(), 3),
        ("neon_brgemm n = 1, A column-major (16 x 1 block)", "k", neon_brgemm.program(n, 1, n)[0].listing(), None),
        ("neon_brgemm n = 1, trans_a (4 x 4 tile transposes)", "k",
         neon_brgemm.program(n, 1, n, trans_a=True)[0].listing(), None),
    ]  # fmt: skip
    return _gemv_table("neon", forms, mca.MCPUS)


def sve_gemv_rows() -> str:
    """The SVE GEMV kernel's inner loops (column form: rows; row form: K) against the SVE BRGEMM
    with n = 1 (its K loop: the 4-vector x 1-column block, A gathered with trans_a), fp32, on the
    SVE-capable mcpus."""
    n = GEMV_SIZE
    forms = [
        ("sve_gemv, A column-major", "rows", sve_gemv.program(n, n)[0].listing(), 2),
        ("sve_gemv, trans_a (A row-major)", "k", sve_gemv.program(n, n, trans_a=True)[0].listing(), 3),
        ("sve_brgemm n = 1, A column-major (4 vectors x 1)", "k", sve_brgemm.program(n, 1, n).listing(), None),
        ("sve_brgemm n = 1, trans_a (A gathered)", "k", sve_brgemm.program(n, 1, n, trans_a=True).listing(), None),
    ]
    return _gemv_table("sve", forms, SVE_MCPUS)


def gemv_text() -> str:
    """The GEMV sections: what was estimated, and the tables (NEON, SVE)."""
    return f"""## NEON GEMV vs the NEON BRGEMM with n = 1 (llvm-mca static estimate)

- Date: {mca.today()}; LLVM {mca.llvm_version()} (`llvm-mca -mtriple=aarch64 -mcpu=<cpu> -iterations=300`)
- Command: `{COMMAND} --gemv` (the same table is a section of the full run)
- Body: one iteration of each kernel's innermost loop, cut from its listing at its label
  (`mca.loop_body`) with its counter and backward branch. GEMV column form: 8 columns of A x 12 q
  registers of y (96 fmla by element, 48 ldp of A and y, 6 stp); row form: 8 rows x 2 q
  accumulators (16 fmla of vectors, 9 ldp). BRGEMM n = 1: the 16 x 1 register block, K unrolled by
  4 (16 fmla by element, 4 chains); with trans_a the 4 x 1 block that loads 4 rows of A and
  transposes 4 x 4 tiles (4 fmla).
- apple-m4 is LLVM's Cyclone model: it issues fmla of vectors on 2 units and fmla by element on 3,
  so the row form (x differs per lane: vectors) is capped there at 8 elements per cycle.
- A elements/cycle: elements of A consumed per cycle (a GEMV does one FMA lane per element of A);
  "vs BRGEMM n = 1" compares each GEMV form with the BRGEMM of the same A layout on the same CPU.
- Static estimate only: no cache misses (the GEMV streams A from memory on real hardware), no
  loop over blocks, no reduction. Emulation is never timed.

{gemv_rows()}
## SVE GEMV vs the SVE BRGEMM with n = 1 (llvm-mca static estimate)

- Same date, LLVM and command as above; SVE-capable mcpus only (apple-m4 has no SVE).
- Vector length: the code is vector-length agnostic, llvm-mca counts instructions. Its
  neoverse-v2 model has V2's four 128-bit SVE pipes and neoverse-v1 V1's two 256-bit ones, so the
  elements per instruction are taken at those cores' lengths: **neoverse-v2 128 bits (4 fp32
  lanes), neoverse-v1 256 bits (8 fp32 lanes)**. At other lengths the cycles per iteration stay
  the model's, the elements scale with the lanes.
- Body: as above. GEMV column form (`sve_gemv.program(4096, 4096)`): 8 columns of A x 8 vectors of
  y (64 predicated fmla, 64 ld1w of A, 8 ld1w and 8 st1w of y, 9 addvl); row form (trans_a): 8
  rows x 2 vector accumulators (16 fmla, 18 ld1w, 9 addvl). BRGEMM n = 1
  (`sve_brgemm.program(4096, 1, 4096)`): the 4-vector x 1-column block, K unrolled by 4 (16 fmla,
  4 chains); with trans_a the same block with each A vector gathered (`ld1w` with vector offsets).
- The SVE GEMV loops are load-bound (one load per fmla; SVE has no ldp), so at 128 bits its column
  form stays below the NEON GEMV's ldp stream on neoverse-v2. The BRGEMM's K loop is bound by its
  4 chains of 4 dependent fmla (16 cycles at V1's latency); on neoverse-v1 the model hides the
  gathers of its trans_a form inside that latency, on neoverse-v2 they are the bound.
- Static estimate only, as above.

{sve_gemv_rows()}"""


def main() -> None:
    seed = mca.estimates(m=32, n=32, k=32, br_size=1) + mca.estimates(m=32, n=32, k=32, br_size=8)
    blocks = []
    for block in [(16, 4), (8, 8), (12, 6)]:
        blocks += mca.estimates(m=48, n=48, k=32, block=block)
    fp64 = mca.estimates(m=32, n=32, k=32, dtype="fp64")
    sve = [
        mca.estimate(isa="sve", m=32, n=32, k=32, dtype=dt, mcpu=cpu)
        for dt in ("fp32", "fp64")
        for cpu in ("neoverse-v1", "neoverse-v2")
    ]
    packed_notes, kloops, copies = packed_path()
    text = f"""# AArch64 NEON and SVE BRGEMM, packed GEMM path: llvm-mca static estimate

- Date: {mca.today()}; LLVM {mca.llvm_version()} (`llvm-mca -mtriple=aarch64 -mcpu=<cpu> -iterations=300`)
- Host that ran the estimate: {platform.machine()} {platform.system()}, Python {platform.python_version()}
- Command: `{COMMAND}`
- Body: one iteration of the generated kernel's innermost K loop (`neon_brgemm.program(...)[1]`:
  K unrolled by 4 (fp32) / 2 (fp64), B loads, A loads interleaved with the FMAs) plus `subs` and `b.ne`.
- FMA-bound minimum: the busiest llvm-mca resource unit counting only the `fmla` rows of its
  "Resource pressure by instruction" table. That gives 4 FMA pipes for neoverse-v2/-v1 (V0-V3) and,
  for `apple-m4`, which LLVM 19 schedules with its Cyclone model, 3 vector units for fp32 FMLA
  and 2 for fp64. The real M4 P-core has 4 FMA pipes (141 GFLOPS fp32 peak at 4.4 GHz), so the column
  "efficiency (4 HW pipes)" is the bound against real hardware: on M4 the model, not the kernel,
  caps it at 75 % (fp32) and 50 % (fp64).
- Static estimate only: no cache misses, no C load/store, no loop over blocks. Emulation is never timed.
- Code generation (`neon_brgemm.program(32, 32, 32)`, fp32, best of 20): {generation_ms():.2f} ms.

## Seed 004 shapes (fp32, default 16x4 block)

{mca.table(seed)}
## Block shapes (fp32, 48x48x32; 16x4 is the default)

16x4: 16 accumulators, 4 B + 2x4 A registers, 64 FMAs per 20 loads per iteration.
8x8 and 12x6 issue 4 FMAs per load; all three reach the FMA bound in the model, so the default stays
16x4 (M = 32 splits into whole blocks, fewer B column pointers).

{mca.table(blocks)}
## fp64 (default 8x4 block)

{mca.table(fp64)}
## SVE BRGEMM (vector-length agnostic; 4 vectors of M x 6 columns, K unrolled by 4)

The body is `sve_brgemm.kloop_body`: ld1w/ld1d of 4 A vectors, ld1rw/ld1rd broadcasts of B, 24
predicated fmla per K step. llvm-mca's resource table gives 2 pipes for SVE fmla on neoverse-v1
(which has two 256-bit SVE pipes, so the "4 HW pipes" column does not apply there) and 4 on
neoverse-v2. "flops/cycle" counts 2 per fmla instruction, whatever the vector length.

{mca.table(sve)}
## Packed GEMM path ({PACKED_SIZE}^3, `TensorOperation` with exec types `undefined`, one thread)

`minijit.packing` packs A (in0) into a panel-ordered buffer once per `execute` with a JIT'd unary
copy `TensorOperation`, then the BRGEMM kernel reads the packed A with lda = the padded panel
column (M rounded up to an odd number of cache lines). The kernels below are the ones
`TensorOperation(target).setup(...)` generated on this host (its cache model chose the packing);
their loops are cut from the kernels' listings at their labels (`mca.loop_body`).

{packed_notes}

### BRGEMM K loop on the packed A (and, for a C-order A, the unpacked transposed kernel it replaces)

The packed K loop is the instruction stream of the column-major kernel: lda is a register, so
packing changes addresses (cache sets, pages), which llvm-mca does not model, not the loop. The
unpacked C-order A runs the transposed-A form: NEON loads rows and transposes 4 x 4 tiles
(`trn1`/`trn2`), SVE gathers each A vector (`ld1w`/`ld1d` with vector offsets).

{mca.table(kloops)}
### Copy kernel inner loop (the pack)

"resource bound": llvm-mca's Block RThroughput, the cycles per iteration its busiest resource
needs; "vectors stored/iter": q registers (NEON) or SVE vectors (VL-agnostic; 128 bits on
neoverse-v2, 256 on neoverse-v1).

{mca.copy_table(copies)}
{gemv_text()}"""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text)


def main_gemv() -> None:
    """Only the GEMV rows, into GEMV_OUT."""
    text = f"# AArch64 NEON and SVE GEMV inner loops: llvm-mca static estimate\n\n{gemv_text()}"
    GEMV_OUT.parent.mkdir(parents=True, exist_ok=True)
    GEMV_OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main_gemv() if "--gemv" in sys.argv[1:] else main()
