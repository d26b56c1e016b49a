"""The fit behind `minijit.sparseauto.prune`'s per-path statement costs (VECTOR_NS, STRIDED_NS,
SCALAR_NS), in one process:

    python bench/sparse_path_costs.py [--write]

For TTMc, the TTM chain, MTTKRP and the fused SDDMM-SpMM on small random tensors (4 shapes each),
every frontier schedule, the first stage-1 schedules and the linear one run on one thread
(`SparseContraction.execute`, best of 60 calls). Each schedule's statement executions are
counted per code path (`complexity.statement_counts`: vectors of 4 fp64 lanes, strided elements,
scalar statements) and a non-negative least-squares fit, weighted by 1/time, gives nanoseconds
per path plus a per-call intercept. The ratios choose; the host's nanoseconds only scale them.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minijit.bench import report  # noqa: E402
from minijit.sparseauto.complexity import statement_counts  # noqa: E402
from minijit.sparseauto.execute import SparseContraction  # noqa: E402
from minijit.sparseauto.plan import sparse_plan  # noqa: E402
from minijit.sparseauto.prune import environment  # noqa: E402
from minijit.sparseauto.tensor import SparseTensor  # noqa: E402

EXPRESSIONS = (("ijk,jl,km->ilm", 3), ("ijk,kl,lm->ijm", 3), ("ijk,jl,kl->il", 3), ("ij,ik,jk,jl->il", 2))
SHAPES = (((40, 30, 20), 0.1, 16), ((60, 50, 40), 0.05, 8), ((30, 30, 30), 0.2, 16), ((80, 60, 50), 0.03, 12))


def best_ns(fn, calls: int = 60) -> float:
    """The fastest of ``calls`` calls of ``fn``, in ns."""
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e9


def random_case(sub: str, nd: int, shape: tuple[int, ...], density: float, width: int, rng: np.random.Generator):
    """``(operands, extents)`` of ``sub``: a random sparse first operand of ``shape[:nd]`` (CSF, or
    CSR for a matrix) at ``density``, dense operands with every other index of extent ``width``."""
    shp = shape[:nd]
    dense = np.where(rng.random(shp) < density, rng.standard_normal(shp), 0)
    t = SparseTensor.from_dense(dense, None if nd == 3 else ("dense", "compressed"))
    terms = sub.split("->")[0].split(",")
    ext = dict(zip(terms[0], shp, strict=True))
    for term in terms[1:]:
        for i in term:
            ext.setdefault(i, width)
    return [t] + [rng.standard_normal(tuple(ext[i] for i in term)) for term in terms[1:]], ext


def header(title: str, script: str) -> tuple[list[str], datetime.datetime]:
    """A results file's title, hardware, date and command lines, and the date."""
    hw = report.hardware()
    date = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"# {title}", ""]
    lines.append(f"- CPU: {report.describe_cpu(hw)}, ISA {hw['isa']} ({', '.join(hw['flags'])}); 1 thread; float64")
    lines += [
        f"- date: {date.isoformat(timespec='seconds')}",
        f"- command: `python bench/{script} {' '.join(sys.argv[1:])}`",
        "",
    ]
    return lines, date


def finish(lines: list[str], write: bool, name: str, date: datetime.datetime) -> None:
    """Print the results; with ``write``, also to bench/results/x86_64_<name>_<date>.md."""
    out = "\n".join(lines) + "\n"
    print(out)
    if write:
        path = Path(__file__).resolve().parent / "results" / f"x86_64_{name}_{date.date().isoformat()}.md"
        path.write_text(out)
        print(f"wrote {path}", file=sys.stderr)


def measure(rng: np.random.Generator) -> list[tuple[float, float, float, float, str]]:
    """(vectors of 4 lanes, strided elements, scalar statements, ns, subscripts) per schedule."""
    rows = []
    for sub, nd in EXPRESSIONS:
        for shape, density, width in SHAPES:
            ops, ext = random_case(sub, nd, shape, density, width, rng)
            plan = sparse_plan(sub, *ops, lanes=None)
            env = environment(plan.operands, plan.sizes, plan.nnz)
            pool = [c.nest for c in (*plan.frontier_candidates(), *plan.stage1[:6])] + [plan.default_linear()]
            for nest in {id(n): n for n in pool}.values():
                sc = SparseContraction(nest, ext, threads=1)
                sc.execute(*ops)
                ns = best_ns(lambda sc=sc, ops=ops: sc.execute(*ops))
                count = {"vector": 0.0, "strided": 0.0, "scalar": 0.0}
                for m, path in statement_counts(nest):
                    count[path] += m.evaluate(env)
                rows.append((count["vector"] / 4, count["strided"], count["scalar"], ns, sub))
    return rows


def main() -> None:
    from scipy.optimize import nnls

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write bench/results/x86_64_sparse_path_costs_<date>.md")
    args = ap.parse_args()
    rows = measure(np.random.default_rng(0))
    a = np.array([[r[0], r[1], r[2], 1.0] for r in rows])
    y = np.array([r[3] for r in rows])
    coef, _ = nnls(a / y[:, None], np.ones_like(y))
    pred = a @ coef
    lines, date = header("Statement costs per code path (sparse nests), fitted", "sparse_path_costs.py")
    lines += [
        f"- fit (ns): vector of 4 lanes {coef[0]:.3f}, strided element {coef[1]:.3f}, scalar statement "
        f"{coef[2]:.3f}, per call {coef[3]:.0f}; median |error| {np.median(np.abs(pred / y - 1)) * 100:.0f} %",
        "",
        "| expression | vectors | strided | scalar | measured us | fitted us |",
        "|---|---|---|---|---|---|",
    ]
    for r, p in zip(rows, pred, strict=True):
        lines.append(f"| {r[4]} | {r[0]:.0f} | {r[1]:.0f} | {r[2]:.0f} | {r[3] / 1e3:.1f} | {p / 1e3:.1f} |")
    finish(lines, args.write, "sparse_path_costs", date)


if __name__ == "__main__":
    main()
