"""The weighted run-time choice (`prune.MachineCosts`) against the seed's (iterations) on
measured time, one thread, in one process:

    python bench/sparse_choice_check.py [--write]

Eight expressions (TTM, TTMc, MTTKRP, TTM chain, SpMM, SDDMM, SDDMM-SpMM, a matrix chain) on
random tensors at four sizes: the seed's chosen nest, the weighted one (4 lanes) and the linear
schedule, each compiled by the same generator and timed (best of 15 `execute` calls). A choice
"loses" where it is more than 15 % slower than the linear schedule.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minijit.bench import report  # noqa: E402
from minijit.sparseauto.execute import SparseContraction  # noqa: E402
from minijit.sparseauto.plan import sparse_plan  # noqa: E402
from minijit.sparseauto.tensor import SparseTensor  # noqa: E402

EXPRESSIONS = (
    ("ijk,kl->ijl", 3),
    ("ijk,jl,km->ilm", 3),
    ("ijk,jl,kl->il", 3),
    ("ijk,kl,lm->ijm", 3),
    ("ik,kj->ij", 2),
    ("ij,ik,jk->ij", 2),
    ("ij,ik,jk,jl->il", 2),
    ("ij,jk,kl->il", 2),
)
SIZES = (((30, 25, 20), 0.2, 8), ((60, 50, 40), 0.05, 16), ((100, 80, 60), 0.02, 32), ((200, 150, 100), 0.01, 16))


def best_s(fn, calls: int = 15) -> float:
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write bench/results/x86_64_sparse_choice_<date>.md")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    hw = report.hardware()
    date = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        "# Weighted run-time choice against the seed's, measured (sparse nests)",
        "",
        f"- CPU: {report.describe_cpu(hw)}, ISA {hw['isa']} ({', '.join(hw['flags'])}); 1 thread; float64",
        f"- date: {date.isoformat(timespec='seconds')}",
        f"- command: `python bench/sparse_choice_check.py {' '.join(sys.argv[1:])}`",
        "",
        "| expression | shape | nnz | linear us | seed/linear | weighted/linear |",
        "|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {"seed": [], "weighted": []}
    for (sub, nd), (shape, density, width) in itertools.product(EXPRESSIONS, SIZES):
        shp = shape[:nd]
        dense = np.where(rng.random(shp) < density, rng.standard_normal(shp), 0)
        t = SparseTensor.from_dense(dense, None if nd == 3 else ("dense", "compressed"))
        terms = sub.split("->")[0].split(",")
        ext = dict(zip(terms[0], shp, strict=True))
        for term in terms[1:]:
            for i in term:
                ext.setdefault(i, width)
        ops = [t] + [rng.standard_normal(tuple(ext[i] for i in term)) for term in terms[1:]]
        seed, weighted = sparse_plan(sub, *ops, lanes=None), sparse_plan(sub, *ops, lanes=4)
        timed = {}
        for name, nest in (("seed", seed.chosen), ("weighted", weighted.chosen), ("linear", seed.default_linear())):
            sc = SparseContraction(nest, ext, threads=1)
            sc.execute(*ops)
            timed[name] = best_s(lambda sc=sc, ops=ops: sc.execute(*ops))
        for name in ratios:
            ratios[name].append(timed[name] / timed["linear"])
        lines.append(
            f"| {sub} | {'x'.join(map(str, shp))} | {t.nnz} | {timed['linear'] * 1e6:.1f} | "
            f"{ratios['seed'][-1]:.2f} | {ratios['weighted'][-1]:.2f} |"
        )
    lines.append("")
    for name, r in ratios.items():
        a = np.array(r)
        lines.append(
            f"- {name}: more than 15 % slower than linear in {(a > 1.15).sum()} of {len(a)}, worst {a.max():.2f}, "
            f"geomean {np.exp(np.log(a).mean()):.2f}"
        )
    out = "\n".join(lines) + "\n"
    print(out)
    if args.write:
        path = Path(__file__).resolve().parent / "results" / f"x86_64_sparse_choice_{date.date().isoformat()}.md"
        path.write_text(out)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
