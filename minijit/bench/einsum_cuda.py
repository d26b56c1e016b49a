"""GPU rows for ``minijit bench einsum --target cuda``: `CudaEinsumPlan` next to ``torch.einsum``.

The real expressions of the CPU einsum suite (`minijit.bench.einsum.cases`) at sizes that fill a GPU
(`cases`), in fp16 and fp32 inputs (fp32 runs as tf32 in minijit; torch gets
``torch.backends.cuda.matmul.allow_tf32 = True``). Both sides read the same torch device tensors;
minijit writes an fp32 result into a preallocated device tensor (``plan(*ops, out=c, sync=False)``),
torch returns the input type.

Timing: `minijit.bench.cuda`'s (warm-up, then ``torch.cuda.Event`` around ``iters`` calls, mean).
TFLOPS = the flops of minijit's plan / time for both columns, so ``minijit/torch`` is torch's time
over minijit's. Each row is checked once against torch in fp32 with tf32 off (``max rel err`` =
max |C - ref| / max |ref|, tolerance `minijit.bench.cuda.TOL`).
"""

from __future__ import annotations

import math
import time
from typing import Any

from minijit.bench import report
from minijit.bench.cuda import TOL, _timed, environment

__all__ = ["DTYPES", "cases", "bench", "measure"]

DTYPES = ("fp16", "fp32")
_PLAN_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
TIMING = "3 warm-up calls, then torch.cuda.Event around iters calls (mean); TFLOPS = plan flops / time"


def cases(quick: bool = False) -> list[dict[str, Any]]:
    """The GPU-sized real expressions: name, subscripts (or the lab tree and its sizes), shapes."""
    from minijit.bench.einsum import LAB_SIZES_FULL, LAB_TREE

    q = 2 if quick else 1
    b, h, s, d = 8, 16, 2048 // q, 64
    n = 4096 // q
    rows = [
        ("attention", "bhqd,bhkd->bhqk", [(b, h, s, d), (b, h, s, d)], "attention scores Q K^T"),
        ("attention-av", "bhqk,bhkd->bhqd", [(b, h, s, s), (b, h, s, d)], "attention P V"),
        ("batched-matmul", "bij,bjk->bik", [(64 // q, 512, 512), (64 // q, 512, 512)], f"{64 // q} 512^3 GEMMs"),
        ("matmul", "ij,jk->ik", [(n, n), (n, n)], f"one {n}^3 GEMM"),
        ("tucker", "abc,ai,bj,ck->ijk", [(256 // q,) * 3, (256 // q, 128), (256 // q, 128), (256 // q, 128)],
         "Tucker core from a 3-tensor"),
        ("ao-to-mo", "pqrs,pi,qj,rk,sl->ijkl", [(64,) * 4, (64, 64), (64, 64), (64, 64), (64, 64)],
         "4-index (AO->MO) integral transform"),
        ("matrix-chain", "ij,jk,kl,lm->im", [(n, 512), (512, n), (n, 256), (256, n)], "chain whose order matters"),
    ]  # fmt: skip
    out = [{"name": nm, "subscripts": e, "shapes": sh, "description": desc} for nm, e, sh, desc in rows]
    sizes = LAB_SIZES_FULL if not quick else tuple(max(1, x // 2) if x > 3 else x for x in LAB_SIZES_FULL)
    out.append({"name": "lab-tree", "tree": LAB_TREE, "sizes": sizes,
                "description": f"the lab's einsum tree, sizes {','.join(map(str, sizes))}"})  # fmt: skip
    return out


def _subscripts_and_shapes(case: dict[str, Any]) -> tuple[str, list[tuple[int, ...]]]:
    """An einsum string and operand shapes for ``case`` (a lab tree through the CPU plan's parser)."""
    if "tree" not in case:
        return case["subscripts"], [tuple(s) for s in case["shapes"]]
    from minijit.einsum.parse import tree_subscripts

    return tree_subscripts(case["tree"], case["sizes"])


def _measure(torch, case: dict[str, Any], dtype: str, iters: int) -> dict[str, Any]:
    from minijit.einsum.cuda import CudaEinsumPlan

    subs, shapes = _subscripts_and_shapes(case)
    t0 = time.perf_counter()
    plan = CudaEinsumPlan(subs, *shapes, dtype=_PLAN_DTYPE[dtype])
    setup_s = time.perf_counter() - t0
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(0)
    ops = [(torch.rand(s, device="cuda", generator=gen) * 2 - 1).to(tdt) for s in shapes]
    out = torch.empty(plan.out_shape, device="cuda", dtype=torch.float32)
    plan(*ops, out=out)  # correctness once, against torch in fp32 without tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = torch.einsum(subs, *[o.float() for o in ops])
    scale = ref.abs().max().item()
    err = (out - ref).abs().max().item() / max(scale, 1e-30)
    del ref
    torch.backends.cuda.matmul.allow_tf32 = True
    t_ours = _timed(torch, lambda: plan(*ops, out=out, sync=False), iters)
    t_peer = _timed(torch, lambda: torch.einsum(subs, *ops), iters)
    flops = float(plan.flops)
    return {
        "case": case["name"],
        "dtype": dtype,
        "subscripts": subs,
        "shapes": [list(s) for s in shapes],
        "nodes": len(plan.nodes),
        "setup_s": round(setup_s, 3),
        "flops": flops,
        "time_s": t_ours,
        "tflops": flops / t_ours / 1e12,
        "peer": {"name": "torch.einsum", "time_s": t_peer, "tflops": flops / t_peer / 1e12},
        "ratio": t_peer / t_ours,
        "max_rel_err": err,
        "check": {"max_rel_err": err, "tol": TOL[dtype], "ok": bool(err <= TOL[dtype])},
        "plan": plan.listing(),
    }


def measure(quick: bool, iters: int, progress: report.Progress = report.quiet) -> list[dict[str, Any]]:
    """Every case in every dtype (needs `minijit.bench.cuda.missing()` to be None)."""
    import torch  # type: ignore[import-not-found]

    from ptx import driver

    driver.device()  # the primary context, shared with torch
    old = torch.backends.cuda.matmul.allow_tf32
    todo = [(c, dt) for c in cases(quick) for dt in DTYPES]
    rows: list[dict[str, Any]] = []
    try:
        for i, (case, dt) in enumerate(todo, 1):
            progress(f"[{i}/{len(todo)}] {case['name']} {dt} ...")
            rows.append(_measure(torch, case, dt, iters))
            r = rows[-1]
            bad = "" if r["check"]["ok"] else f"  WRONG RESULT (max rel err {r['max_rel_err']:.3g})"
            progress(
                f"    minijit {r['tflops']:.1f} TFLOPS; torch.einsum {r['peer']['tflops']:.1f} ({r['ratio']:.2f}x){bad}"
            )
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "case",
        "dtype",
        "nodes",
        "time ms",
        "minijit TFLOPS",
        "torch.einsum TFLOPS",
        "minijit/torch",
        "max rel err",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"], r["dtype"], str(r["nodes"]), f"{r['time_s'] * 1e3:.3f}", f"{r['tflops']:.1f}",
                 f"{r['peer']['tflops']:.1f}", f"{r['ratio']:.2f}x", f"{r['max_rel_err']:.2g}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def geomeans(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Geometric mean of ``minijit/torch`` per dtype."""
    out = {}
    for dt in dict.fromkeys(r["dtype"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["dtype"] == dt and r["ratio"] > 0]
        if ratios:
            out[dt] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return out


def bench(quick: bool, iters: int, command: str, progress: report.Progress = report.quiet) -> report.Report:
    """Measure every case and report them (a Markdown table and the geomean per dtype)."""
    started = time.perf_counter()
    rows = measure(quick, iters, progress)
    env = environment()
    gm = geomeans(rows)
    header = [f"# minijit bench einsum --target cuda: {env['device']}, driver {env['driver']}, iters {iters}"]
    meta = report.meta(command)
    result = {**meta, "device": env, "versions": report.versions(),
              "settings": {"quick": quick, "iters": iters, "measurement": TIMING},
              "elapsed_s": round(time.perf_counter() - started, 2), "results": rows, "geomean_ratio": gm}  # fmt: skip
    facts = [f"{k}: {v}" for k, v in env.items()]
    facts += [f"date: {meta['date']}", f"command: `{command}`", f"timing: {TIMING}"]
    facts.append("fp32 rows: minijit tf32 (fp32 results) vs torch.einsum with allow_tf32")
    line = "geomean minijit/torch.einsum: " + ", ".join(f"{dt} {v:.2f}x" for dt, v in gm.items())
    ok = all(r["check"]["ok"] for r in rows)
    title = "CUDA einsum: minijit vs torch.einsum"
    return report.Report(header, [table(rows), "", line], result, ok, f"einsum_cuda_{meta['date'][:10]}.md", title,
                         facts)  # fmt: skip
