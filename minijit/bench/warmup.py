"""``minijit bench warmup``: what a program pays before minijit runs at speed, next to numpy in the same run.

Four parts, every row with numpy's figure beside minijit's:

(a) ``loop``: ``shapes`` fp32 matmuls ``minijit.einsum("ij,jk->ik", a, b)`` whose M, K and N are
    drawn uniformly from 16..128 (seed `SEED`), the whole loop timed twice: the first pass builds a
    plan per shape, the second finds them cached; ``np.einsum`` (numpy's default, optimize=False)
    and ``np.matmul`` run the same loop on the same arrays after minijit in each pass. Each pass
    gives the total and the median call (a total on a busy host is at the mercy of a few slow
    calls, numpy's BLAS threads waking among them).
(b) ``new shape``: the first and the second call of ``minijit.einsum`` on ``new_shapes`` shapes
    not seen before in the process (median over the shapes, ms), next to numpy's calls on the
    same arrays.
(c) ``fresh process``: a new interpreter (an argument list, no shell) imports numpy, times its
    first ``np.einsum`` and ``np.matmul`` of two 64x64 fp32 matrices, imports minijit and times
    its first ``minijit.einsum`` of them; with a cold code cache (``MINIJIT_CACHE_DIR`` a new
    empty directory) and then warm (the same directory again), ``processes`` times each (median);
    each reports the code cache's counts (`COUNTS`: whether it loaded or generated the generic
    kernel, hashed the generators' source or read the version record).
(d) ``import``: the wall time of fresh processes running ``import numpy`` and
    ``import numpy, minijit``, ``imports`` of each, alternating (median; both include the
    interpreter's start).

Before (a) and (b) the process runs one einsum of a shape outside the loop's (`PRIME_SHAPE`), so
they measure what a new shape costs, not the imports and one-time setup (the thread team):
those are (c) and (d), and the priming call's time is reported beside them.
Every minijit result is checked against ``np.matmul`` (a wrong one: exit status 1).

    from minijit.bench import warmup
    rep = warmup.bench(shapes=20, new_shapes=5, processes=1, imports=2, command="test")
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from minijit.bench import UserError
from minijit.bench import report as reports

__all__ = ["DEFAULTS", "QUICK", "SEED", "bench", "fresh_process", "import_times", "loop", "new_shapes"]

#: the seed of the loop's shapes and operands; the new shapes of (b) use ``SEED + 1``
SEED = 55
#: the sizes M, K, N are drawn from (inclusive)
LOW, HIGH = 16, 128
#: the priming einsum's (M, K, N): outside 16..128, so no shape of (a) or (b) meets it
PRIME_SHAPE = (8, 8, 8)
#: (shapes, new_shapes, processes, imports): the default and ``--quick``
DEFAULTS = (200, 20, 3, 10)
QUICK = (50, 10, 2, 5)
#: the tolerance of a result against np.matmul, relative to sqrt(K) * max |ref|
TOL = 1e-5
#: a fresh process gives up after this many seconds
CHILD_TIMEOUT_S = 300

SUBSCRIPTS = "ij,jk->ik"

#: the code cache's counts a fresh process of (c) reports: kernels loaded (hits) and generated
#: (misses), and how it found the generator version (hashed from the sources, or read from the
#: version record a process before it wrote)
COUNTS = ("hits", "misses", "source_hashes", "version_records")
#: the fresh process of (c): prints one JSON line (milliseconds, the check and `COUNTS`)
FRESH_CODE = """
import json, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
rng = np.random.default_rng(%(seed)d)
a = rng.standard_normal((64, 64), dtype=np.float32)
b = rng.standard_normal((64, 64), dtype=np.float32)
t2 = time.perf_counter()
e = np.einsum("ij,jk->ik", a, b)
t3 = time.perf_counter()
m = np.matmul(a, b)
t4 = time.perf_counter()
import minijit
t5 = time.perf_counter()
c = minijit.einsum("ij,jk->ik", a, b)
t6 = time.perf_counter()
ok = bool(np.max(np.abs(c - m)) <= %(tol)r * 8 * max(1.0, float(np.max(np.abs(m)))))
ms = lambda x, y: (y - x) * 1e3
from minijit.runtime import codecache
state = codecache.info()
print(json.dumps({
    "import_numpy_ms": ms(t0, t1), "numpy_einsum_ms": ms(t2, t3), "numpy_matmul_ms": ms(t3, t4),
    "import_minijit_ms": ms(t4, t5), "minijit_ms": ms(t5, t6), "ok": ok,
    **{k: state[k] for k in COUNTS},
}))
"""


def _operands(shapes: list[tuple[int, int, int]], rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32))
        for m, k, n in shapes
    ]


def _close(got: np.ndarray, ref: np.ndarray, k: int) -> bool:
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    return bool(got.shape == ref.shape and np.max(np.abs(got - ref), initial=0.0) <= TOL * np.sqrt(k) * scale)


def draw_shapes(count: int, seed: int, avoid: set[tuple[int, int, int]] = frozenset()) -> list[tuple[int, int, int]]:
    """``count`` (M, K, N) drawn uniformly from ``LOW..HIGH`` with ``seed``; none in ``avoid``
    (repeats within the list are kept: the loop of (a) is random draws, as a program's would be)."""
    rng = np.random.default_rng(seed)
    out: list[tuple[int, int, int]] = []
    while len(out) < count:
        shape = tuple(int(x) for x in rng.integers(LOW, HIGH + 1, 3))
        if shape not in avoid:
            out.append(shape)  # type: ignore[arg-type]
    return out


def _timed(fn, *args) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def prime() -> float:
    """One einsum of `PRIME_SHAPE` (imports the JIT, starts the thread team); its seconds."""
    import minijit  # noqa: PLC0415

    m, k, n = PRIME_SHAPE
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    # ``minijit.einsum`` is looked up inside the timing: the lookup imports the JIT (PEP 562)
    seconds, _ = _timed(lambda: minijit.einsum(SUBSCRIPTS, a, b))
    return seconds


def loop(shapes: list[tuple[int, int, int]], progress: reports.Progress = reports.quiet) -> dict[str, Any]:
    """(a): two passes of the loop over ``shapes`` (milliseconds per pass and per call for minijit,
    np.einsum and np.matmul; each pass runs minijit first) and whether every minijit result was right."""
    import minijit  # noqa: PLC0415

    pairs = _operands(shapes, np.random.default_rng(SEED))
    sides = {
        "minijit": lambda a, b: minijit.einsum(SUBSCRIPTS, a, b),
        "np.einsum": lambda a, b: np.einsum(SUBSCRIPTS, a, b),
        "np.matmul": np.matmul,
    }
    passes: list[dict[str, float]] = []
    calls: list[dict[str, list[float]]] = []
    ok = True
    for p in (1, 2):
        progress(f"warmup (a): pass {p} of {len(shapes)} matmuls")
        times: dict[str, float] = {}
        per_call: dict[str, list[float]] = {}
        for name, fn in sides.items():
            ms, outs = [], []
            for a, b in pairs:
                seconds, out = _timed(fn, a, b)
                ms.append(seconds * 1e3)
                outs.append(out)
            times[name] = sum(ms)
            per_call[name] = ms
            if name == "minijit":
                got = outs
            elif name == "np.matmul":
                ok = ok and all(_close(g, r, a.shape[1]) for g, r, (a, _) in zip(got, outs, pairs, strict=True))
        passes.append(times)
        calls.append(per_call)
    return {"shapes": [list(s) for s in shapes], "passes": passes, "calls_ms": calls, "ok": ok}


def new_shapes(shapes: list[tuple[int, int, int]], progress: reports.Progress = reports.quiet) -> dict[str, Any]:
    """(b): per shape, minijit's first and second call and numpy's calls on the same arrays (ms)."""
    import minijit  # noqa: PLC0415

    progress(f"warmup (b): first calls on {len(shapes)} new shapes")
    per_shape = []
    ok = True
    for (a, b), shape in zip(_operands(shapes, np.random.default_rng(SEED + 1)), shapes, strict=True):
        first, got = _timed(minijit.einsum, SUBSCRIPTS, a, b)
        second, _ = _timed(minijit.einsum, SUBSCRIPTS, a, b)
        t_einsum, _ = _timed(np.einsum, SUBSCRIPTS, a, b)
        t_matmul, ref = _timed(np.matmul, a, b)
        ok = ok and _close(got, ref, a.shape[1])
        per_shape.append(
            {
                "shape": list(shape),
                "minijit_first_ms": first * 1e3,
                "minijit_second_ms": second * 1e3,
                "np.einsum_ms": t_einsum * 1e3,
                "np.matmul_ms": t_matmul * 1e3,
            }
        )
    return {"per_shape": per_shape, "ok": ok}


def _child_env(cache_dir: str | None = None) -> dict[str, str]:
    """This environment with the source tree of the running minijit first on PYTHONPATH (a fresh
    process imports the same minijit) and, when given, ``MINIJIT_CACHE_DIR``."""
    env = dict(os.environ)
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    if cache_dir is not None:
        env["MINIJIT_CACHE_DIR"] = cache_dir
    return env


def _run_child(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and stdout of ``python args...``; UserError when it fails."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"bench warmup: a fresh process ran over {CHILD_TIMEOUT_S} s") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"bench warmup: a fresh python {' '.join(args[:1])} failed: {tail}")
    return wall, proc.stdout


def fresh_process(processes: int, progress: reports.Progress = reports.quiet) -> dict[str, Any]:
    """(c): ``processes`` pairs of fresh processes, each pair on a new empty ``MINIJIT_CACHE_DIR``:
    the first cold, the second warm (the same directory again). Each run's `FRESH_CODE` figures."""
    code = FRESH_CODE.replace("COUNTS", repr(COUNTS)) % {"seed": SEED, "tol": TOL}
    runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    for i in range(processes):
        progress(f"warmup (c): fresh processes, cold and warm code cache ({i + 1}/{processes})")
        with tempfile.TemporaryDirectory(prefix="minijit-warmup-") as cache_dir:
            for state in ("cold", "warm"):
                wall, out = _run_child(["-c", code], _child_env(cache_dir))
                runs[state].append({**json.loads(out.strip().splitlines()[-1]), "wall_ms": wall * 1e3})
    ok = all(r["ok"] for rs in runs.values() for r in rs)
    return {"runs": runs, "ok": ok}


def import_times(imports: int, progress: reports.Progress = reports.quiet) -> dict[str, Any]:
    """(d): wall milliseconds of ``imports`` fresh ``python -c "import numpy"`` and as many
    ``python -c "import numpy, minijit"``, alternating."""
    progress(f"warmup (d): {imports} fresh processes each of import numpy / import numpy, minijit")
    env = _child_env()
    walls: dict[str, list[float]] = {"numpy": [], "numpy, minijit": []}
    for _ in range(imports):
        for what in walls:
            wall, _ = _run_child(["-c", f"import {what}"], env)
            walls[what].append(wall * 1e3)
    return walls


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _row(part: str, case: str, minijit_ms: float, numpy: dict[str, float]) -> dict[str, Any]:
    first = next(iter(numpy.values()))
    return {
        "part": part,
        "case": case,
        "minijit_ms": minijit_ms,
        "numpy": [{"name": k, "ms": v} for k, v in numpy.items()],
        "ratio": minijit_ms / first if first > 0 else None,
    }


def rows_of(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any], d: dict[str, list[float]]) -> list[dict]:
    """The table's rows: each part's minijit figure (ms) with numpy's beside it."""
    n = len(a["shapes"])
    rows = []
    for p, times in enumerate(a["passes"], 1):
        rows.append(
            _row(
                "a",
                f"loop of {n} matmuls {LOW}..{HIGH}, pass {p} (total)",
                times["minijit"],
                {"np.einsum": times["np.einsum"], "np.matmul": times["np.matmul"]},
            )
        )
    for p, calls in enumerate(a["calls_ms"], 1):  # a total is at the mercy of a few slow calls on a busy host
        rows.append(
            _row(
                "a",
                f"loop of {n} matmuls {LOW}..{HIGH}, pass {p} (median call)",
                _median(calls["minijit"]),
                {"np.einsum": _median(calls["np.einsum"]), "np.matmul": _median(calls["np.matmul"])},
            )
        )
    per = b["per_shape"]
    for which in ("first", "second"):
        rows.append(
            _row(
                "b",
                f"{which} call on a new shape (median of {len(per)})",
                _median([s[f"minijit_{which}_ms"] for s in per]),
                {
                    "np.einsum": _median([s["np.einsum_ms"] for s in per]),
                    "np.matmul": _median([s["np.matmul_ms"] for s in per]),
                },
            )
        )
    for state, runs in c["runs"].items():
        k = len(runs)
        rows.append(
            _row(
                "c",
                f"fresh process, {state} cache: first 64x64 einsum (median of {k})",
                _median([r["minijit_ms"] for r in runs]),
                {
                    "np.einsum": _median([r["numpy_einsum_ms"] for r in runs]),
                    "np.matmul": _median([r["numpy_matmul_ms"] for r in runs]),
                },
            )
        )
        rows.append(
            _row(
                "c",
                f"fresh process, {state} cache: import + first 64x64 einsum",
                _median([r["import_minijit_ms"] + r["minijit_ms"] for r in runs]),
                {"np.einsum": _median([r["import_numpy_ms"] + r["numpy_einsum_ms"] for r in runs])},
            )
        )
    k = len(d["numpy"])
    rows.append(
        _row(
            "d",
            f"fresh process: import numpy, minijit vs import numpy (wall, median of {k})",
            _median(d["numpy, minijit"]),
            {"import numpy": _median(d["numpy"])},
        )
    )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table: minijit's ms, then each numpy figure, and minijit over the first."""
    head = ["part", "case", "minijit ms", "numpy ms", "minijit/numpy"]
    cells = []
    for r in rows:
        peers = ", ".join(f"{p['name']} {p['ms']:.3f}" for p in r["numpy"])
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        cells.append([r["part"], r["case"], f"{r['minijit_ms']:.3f}", peers, ratio])
    return reports.markdown_table(head, cells)


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def bench(
    shapes: int = DEFAULTS[0],
    new_shapes_count: int = DEFAULTS[1],
    processes: int = DEFAULTS[2],
    imports: int = DEFAULTS[3],
    command: str = "minijit bench warmup",
    progress: reports.Progress = reports.quiet,
) -> reports.Report:
    """``minijit bench warmup``: parts (a) to (d) (see the module docstring) as a report."""
    import minijit  # noqa: PLC0415

    started = time.perf_counter()
    load_start = _load()
    loop_shapes = draw_shapes(shapes, SEED)
    fresh_shapes = draw_shapes(new_shapes_count, SEED + 1, set(loop_shapes))
    prime_s = prime()
    a = loop(loop_shapes, progress)
    b = new_shapes(fresh_shapes, progress)
    c = fresh_process(processes, progress)
    d = import_times(imports, progress)
    rows = rows_of(a, b, c, d)
    hw = reports.hardware()
    ok = a["ok"] and b["ok"] and c["ok"]
    beyond = _median([m - n for m, n in zip(d["numpy, minijit"], d["numpy"], strict=True)])
    cold = c["runs"]["cold"]
    cache_dir = "MINIJIT_CACHE_DIR: a new empty directory per cold process, the same one again for warm"
    body = [
        table(rows),
        "",
        f"import minijit beyond numpy: {beyond:.1f} ms (median of the {len(d['numpy'])} pairs' differences);"
        f" in a fresh process after numpy: {_median([r['import_minijit_ms'] for r in cold]):.1f} ms",
        f"this process's first einsum ({'x'.join(map(str, PRIME_SHAPE))}, before (a) and (b): the JIT's"
        f" imports and the thread team): {prime_s * 1e3:.1f} ms",
        f"(a) {shapes} shapes drawn from {LOW}..{HIGH} (seed {SEED}), {len(set(loop_shapes))} distinct; np.einsum"
        " is numpy's default (optimize=False); (c) " + cache_dir,
        *(_counts_line(state, runs) for state, runs in c["runs"].items()),
    ]
    load_end = _load()
    body.append(
        f"1-min load average at start / end: {load_start} / {load_end} (other processes on the host slow numpy's"
        " BLAS threads most: compare the median calls)"
    )
    if not ok:
        body.append("WRONG RESULT: a minijit einsum differs from np.matmul")
    threads = _default_threads()
    header = [
        f"# minijit bench warmup: {reports.describe_cpu(hw)}, {hw['cores']} cores, fp32,"
        f" threads {threads} (the default), minijit {minijit.__version__}"
    ]
    result = {
        **reports.meta(command),
        "hardware": hw,
        "versions": reports.versions(),
        "settings": {
            "shapes": shapes,
            "new_shapes": new_shapes_count,
            "processes": processes,
            "imports": imports,
            "seed": SEED,
            "sizes": [LOW, HIGH],
            "dtype": "fp32",
            "threads": threads,
            "prime_shape": list(PRIME_SHAPE),
        },
        "summary": {"import_beyond_numpy_ms": beyond, "prime_ms": prime_s * 1e3},
        "results": rows,
        "details": {"loop": a, "new_shapes": b, "fresh_process": c, "imports_ms": d},
        "load_average": [load_start, load_end],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    return reports.Report(header, body, result, ok)


def _counts_line(state: str, runs: list[dict[str, Any]]) -> str:
    """What the code cache did in the ``state`` processes of (c), from their counts."""
    k = len(runs)

    def n(name: str) -> int:
        return sum(1 for r in runs if r.get(name, 0) > 0)

    return (
        f"(c) {state} cache, the code cache's counts: the generic kernel loaded in {n('hits')} of {k} processes,"
        f" generated in {n('misses')}; the generator version hashed from the sources in {n('source_hashes')},"
        f" read from the version record in {n('version_records')}"
    )


def _default_threads() -> int:
    from minijit import parallel  # noqa: PLC0415

    return parallel.default_threads()
