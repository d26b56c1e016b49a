"""The weighted run-time choice (`prune.MachineCosts`) against the seed's (iterations) on
measured time, one thread, in one process:

    python bench/sparse_choice_check.py [--write]

Eight expressions (TTM, TTMc, MTTKRP, TTM chain, SpMM, SDDMM, SDDMM-SpMM, a matrix chain) on
random tensors at four sizes: the seed's chosen nest, the weighted one (4 lanes) and the linear
schedule, each compiled by the same generator and timed (best of 40 `execute` calls). A choice
"loses" where it is more than 15 % slower than the linear schedule; a choice that is the linear
nest itself is marked and left out of the counts (its ratio only measures the host's noise).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparse_path_costs import best_ns, finish, header, random_case  # noqa: E402

from minijit.sparseauto.execute import SparseContraction  # noqa: E402
from minijit.sparseauto.plan import sparse_plan  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write bench/results/x86_64_sparse_choice_<date>.md")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    lines, date = header(
        "Weighted run-time choice against the seed's, measured (sparse nests)", "sparse_choice_check.py"
    )
    lines += ["| expression | shape | nnz | linear us | seed/linear | weighted/linear |", "|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"seed": [], "weighted": []}
    for (sub, nd), (shape, density, width) in itertools.product(EXPRESSIONS, SIZES):
        ops, ext = random_case(sub, nd, shape, density, width, rng)
        seed, weighted = sparse_plan(sub, *ops, lanes=None), sparse_plan(sub, *ops, lanes=4)
        linear = seed.default_linear()
        nests = {"seed": seed.chosen, "weighted": weighted.chosen, "linear": linear}
        timed = {}
        for name, nest in nests.items():
            sc = SparseContraction(nest, ext, threads=1)
            sc.execute(*ops)
            timed[name] = best_ns(lambda sc=sc, ops=ops: sc.execute(*ops), 40)
        cells = []
        for name in ratios:
            same = str(nests[name]) == str(linear)  # the linear nest itself: its ratio is noise
            if not same:
                ratios[name].append(timed[name] / timed["linear"])
            cells.append(f"{timed[name] / timed['linear']:.2f}" + (" (linear)" if same else ""))
        lines.append(
            f"| {sub} | {'x'.join(map(str, shape[:nd]))} | {ops[0].nnz} | {timed['linear'] / 1e3:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append("")
    for name, r in ratios.items():
        a = np.array(r)
        lines.append(
            f"- {name}, where it is not the linear nest ({len(a)} of {len(EXPRESSIONS) * len(SIZES)}): more than "
            f"15 % slower than linear in {(a > 1.15).sum()}, worst {a.max():.2f}, "
            f"geomean {np.exp(np.log(a).mean()):.2f}"
        )
    finish(lines, args.write, "sparse_choice", date)


if __name__ == "__main__":
    main()
