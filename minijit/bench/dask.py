"""``minijit bench einsum --dask``: `minijit.dask.einsum` against `dask.array.einsum` on one cluster.

A `distributed.LocalCluster` of worker processes (one thread each, a memory limit per worker that
the operands of every expression exceed together). Per expression the operands are generated on
the workers in the chunks `minijit.dask.block_sizes` picks and kept there (persisted); both sides
then contract those same arrays (minijit with ``chunks="input"``): `dask.array.einsum` as it comes
(``optimize=False``: numpy's own einsum loop per block) and with ``optimize=True`` (numpy's
tensordot, BLAS, per block). Each output block is reduced on its worker to its sum, so nothing
large travels to the client; the sums of the two sides are compared. GFLOPS are per worker.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Any

import numpy as np

from minijit.bench import UserError, report

__all__ = ["CASES", "bench"]

#: (name, subscripts, shapes, what it is); float32; default sizes (--quick: every dim scaled by QUICK)
CASES = [
    ("tall-skinny", "ij,jk->ik", [(16384, 16384), (16384, 256)], "a 1 GiB matrix times 256 columns"),
    ("batched", "bij,bjk->bik", [(528, 512, 512), (528, 512, 512)], "528 GEMMs of 512^3"),
    ("attention-pv", "bhqk,bhkd->bhqd", [(1, 66, 2048, 2048), (1, 66, 2048, 64)], "probabilities times values"),
]
#: each worker's memory limit (the operands of every default case exceed it together); block size
MEMORY_LIMIT = "1GiB"
CHUNK_SIZE = "32MiB"
WORKERS = 2
#: seconds after which a side is not timed again
LONG_RUN_S = 20.0


def _missing() -> str | None:
    try:
        import dask.array  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        return f"needs dask.array and distributed ({e}): pip install minijit[dask]"
    return None


def _quick_shapes(subscripts: str, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """--quick: the shapes with the expression's largest index a quarter as large (operands under the limit)."""
    ins = subscripts.split("->")[0].split(",")
    sizes = {c: n for sub, s in zip(ins, shapes, strict=True) for c, n in zip(sub, s, strict=True)}
    first = max(sizes, key=sizes.__getitem__)
    return [
        tuple(n // 4 if c == first else n for c, n in zip(sub, s, strict=True))
        for sub, s in zip(ins, shapes, strict=True)
    ]


def _flops(subscripts: str, shapes: list[tuple[int, ...]]) -> int:
    sizes: dict[str, int] = {}
    for sub, s in zip(subscripts.split("->")[0].split(","), shapes, strict=True):
        sizes.update(zip(sub, s, strict=True))
    return 2 * math.prod(sizes.values())


def _block_sums(x: Any) -> Any:
    """Each block of ``x`` as its sum (a dask array of one element per block)."""
    return x.map_blocks(
        lambda b: np.full((1,) * b.ndim, b.sum(dtype=np.float64)), chunks=(1,) * x.ndim, dtype=np.float64
    )


def _run(client: Any, fn: Any, subs: str, ops: list[Any], **kwargs: Any) -> tuple[float, np.ndarray]:
    """Wall time (s) of one computation of ``fn(subs, *ops, **kwargs)`` on the cluster (graph
    construction included), and its block sums."""
    t0 = time.perf_counter()
    sums = client.compute(_block_sums(fn(subs, *ops, **kwargs))).result()
    return time.perf_counter() - t0, sums


def _time_sides(client: Any, reps: int, sides: dict[str, tuple], subs: str, ops: list[Any]) -> dict[str, tuple]:
    """``{side: (best time, block sums)}`` over ``reps`` rounds that run the sides in turn (a busy
    host slows all alike); a side whose run took over `LONG_RUN_S` runs no more."""
    best: dict[str, tuple] = {}
    for _ in range(reps):
        for side, (fn, kwargs) in sides.items():
            if side in best and best[side][0] > LONG_RUN_S:
                continue
            t, sums = _run(client, fn, subs, ops, **kwargs)
            if side not in best or t < best[side][0]:
                best[side] = (t, sums)
    return best


def _workers(client: Any) -> tuple[int, int]:
    """(workers, the smallest worker memory limit in bytes) of the cluster behind ``client``."""
    info = client.scheduler_info()["workers"].values()
    return len(info), min(w["memory_limit"] for w in info)


def _case(client: Any, case: tuple, quick: bool, reps: int, progress: report.Progress) -> dict[str, Any]:
    """One expression on the cluster: operands persisted in the model's chunks, then every side timed."""
    import dask.array as da
    import distributed

    import minijit.dask as md

    name, subs, shapes, what = case
    shapes = _quick_shapes(subs, shapes) if quick else shapes
    workers, limit = _workers(client)
    nbytes = sum(math.prod(s) * 4 for s in shapes)
    progress(f"{name}: {subs} {shapes} ({nbytes / 2**20:.0f} MiB of operands)")
    blocks = md.block_sizes(subs, *shapes, itemsize=4, threads=sum(client.nthreads().values()))
    ins = subs.split("->")[0].split(",")
    ops = [
        da.random.default_rng(k).random(s, dtype=np.float32, chunks=tuple(blocks[c] for c in sub))
        for k, (sub, s) in enumerate(zip(ins, shapes, strict=True))
    ]
    ops = client.persist(ops)
    distributed.wait(ops)
    pids = set(client.run(os.getpid).values())
    _run(client, md.einsum, subs, ops, chunks="input")  # every worker JITs its plans
    sides = {
        "minijit.dask": (md.einsum, {"chunks": "input"}),
        "dask.array.einsum(optimize=True)": (da.einsum, {"optimize": True}),
        "dask.array.einsum": (da.einsum, {}),
    }
    got = _time_sides(client, reps, sides, subs, ops)
    progress("    " + ", ".join(f"{side} {t:.2f} s" for side, (t, _) in got.items()))
    (t_mj, s_mj), (t_opt, s_opt), (t_da, s_da) = got.values()
    restarts = len(pids - set(client.run(os.getpid).values()))  # workers lost (e.g. over their memory limit)
    scale = np.abs(s_da).max() + 1.0
    err = max(float(np.abs(s_mj - s_da).max()), float(np.abs(s_mj - s_opt).max())) / scale
    flops = _flops(subs, shapes)
    return {
        "config": name,
        "subscripts": subs,
        "shapes": [list(s) for s in shapes],
        "description": what,
        "operand_mib": round(nbytes / 2**20, 1),
        "exceeds_limit": nbytes > limit,
        "blocks": blocks,
        "flops": flops,
        "minijit_s": t_mj,
        "dask_s": t_da,
        "dask_optimize_s": t_opt,
        "gflops_per_worker": flops / t_mj / 1e9 / workers,
        "dask_gflops_per_worker": flops / t_da / 1e9 / workers,
        "dask_optimize_gflops_per_worker": flops / t_opt / 1e9 / workers,
        "ratio": t_da / t_mj,
        "ratio_optimize": t_opt / t_mj,
        "check": {"ok": err < 1e-4, "max_rel_err_block_sums": err},
        "worker_restarts": restarts,
    }


def bench(
    quick: bool,
    reps: int,
    command: str,
    progress: report.Progress = report.quiet,
    *,
    cases: list[tuple] | None = None,
    client: Any = None,
) -> report.Report:
    """Every case (default `CASES`) on ``client``'s cluster, else on a fresh `LocalCluster` of
    `WORKERS` processes (one thread, `MEMORY_LIMIT` each, spilling off): times, GFLOPS per
    worker, ratios."""
    why = _missing()
    if why:
        raise UserError(f"bench einsum --dask: {why}")
    import dask
    import distributed

    from minijit.bench.einsum import _load

    cases = CASES if cases is None else cases
    started, load_start = time.perf_counter(), _load()
    with contextlib.ExitStack() as stack:
        if client is None:
            config = {f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause")}
            stack.enter_context(dask.config.set({**config, "array.chunk-size": CHUNK_SIZE}))
            cluster = stack.enter_context(
                distributed.LocalCluster(
                    n_workers=WORKERS,
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=MEMORY_LIMIT,
                    dashboard_address=None,
                )  # fmt: skip
            )
            client = stack.enter_context(distributed.Client(cluster))
        workers, limit_bytes = _workers(client)
        threads = sum(client.nthreads().values())
        chunk_size = dask.config.get("array.chunk-size")
        rows = []
        for i, case in enumerate(cases):
            progress(f"[{i + 1}/{len(cases)}] ...")
            rows.append(_case(client, case, quick, reps, progress))
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    geo_opt = math.exp(sum(math.log(r["ratio_optimize"]) for r in rows) / len(rows))
    head = ["expression", "operands", "MiB", "blocks", "minijit s", "GFLOPS/worker", "dask s", "GFLOPS/worker",
            "ratio", "dask opt s", "GFLOPS/worker", "ratio", "check"]  # fmt: skip
    table = report.markdown_table(
        head,
        [
            [
                f"{r['config']} `{r['subscripts']}`",
                " ".join("x".join(map(str, s)) for s in r["shapes"]),
                f"{r['operand_mib']:.0f}" + ("" if r["exceeds_limit"] else " (under the limit)"),
                ",".join(f"{c}{n}" for c, n in r["blocks"].items()),
                f"{r['minijit_s']:.2f}",
                f"{r['gflops_per_worker']:.1f}",
                f"{r['dask_s']:.2f}",
                f"{r['dask_gflops_per_worker']:.1f}",
                f"{r['ratio']:.2f}x",
                f"{r['dask_optimize_s']:.2f}",
                f"{r['dask_optimize_gflops_per_worker']:.1f}",
                f"{r['ratio_optimize']:.2f}x",
                ("ok" if r["check"]["ok"] else f"ERR {r['check']['max_rel_err_block_sums']:.2g}")
                + (f", {r['worker_restarts']} worker(s) lost: times distorted" if r["worker_restarts"] else ""),
            ]
            for r in rows
        ],
    )
    lines = [
        table,
        "",
        f"geomean minijit.dask / dask.array.einsum: {geo:.2f}x (lowest {min(r['ratio'] for r in rows):.2f}x);"
        f" / dask.array.einsum(optimize=True): {geo_opt:.2f}x (lowest {min(r['ratio_optimize'] for r in rows):.2f}x)",
        f"cluster: {workers} worker processes, {threads} threads in all, memory_limit"
        f" {limit_bytes / 2**20:.0f} MiB per worker, blocks of at most {chunk_size}; operands persisted in the"
        " chunks of minijit.dask.block_sizes, the same arrays for every side; times: best of the runs (only one of"
        f" a side whose run takes over {LONG_RUN_S:.0f} s), each output block reduced to its sum on its worker",
    ]
    hw = report.hardware()
    result = {
        **report.meta(command),
        "hardware": hw,
        "versions": {**report.versions(), "dask": dask.__version__, "distributed": distributed.__version__},
        "settings": {"reps": reps, "quick": quick, "workers": workers, "threads": threads, "memory_limit": limit_bytes},
        "summary": {"geomean_ratio": geo, "geomean_ratio_optimize": geo_opt},
        "wall_s": round(time.perf_counter() - started, 1),
        "results": rows,
    }
    header = [f"# minijit bench einsum --dask: {hw['cpu'] or hw['isa']}, {workers} workers, {threads} threads, fp32"]
    facts = [
        f"date: {result['date']}",
        f"command: `{command}`",
        f"CPU: {report.describe_cpu(hw)}, {hw['cores']} cores, ISA {hw['isa']} ({', '.join(hw['flags'])}),"
        f" target {hw['native_target']}",
        f"versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}",
        f"wall time: {result['wall_s']} s",
        f"1-min load average at start / end: {load_start} / {_load()}",
    ]
    ok = all(r["check"]["ok"] for r in rows)
    return report.Report(
        header, lines, result, ok, f"dask_{result['date'][:10]}.md", "minijit bench einsum --dask", facts
    )
