"""A/B measurements behind the sparse code generator's choices (issue 38), in one process.

    python bench/sparse_ab.py [--rows "TTMc,SDDMM-SpMM,..."] [--rounds 7] [--threads 2] [--write]

Three experiments on the rows of `minijit bench sparse-einsum` (its data, seed 0):

* dispatch: two empty ranges of a compiled nest through the Python pool (`parallel.run_range`
  calling the kernel per range, the path before `sparseauto.dispatch`) against the trampoline on
  the native team (`dispatch.run_ranges`), microseconds per call;
* tight loops: each row's chosen (auto) and linear schedule compiled with and without the tight
  stationary loops (`codegen_inner._tight_plan` switched off), ms per `execute` call;
* prefetch distance: the chosen schedule compiled with the walks looking 4, 8, 16 or 32 positions
  ahead and with the rule (`codegen_inner.prefetch_ahead`), ms per call.

Variants of one experiment alternate in rounds whose order rotates; each keeps its best round
(the median of ``--reps`` calls). The host is shared: compare variants within a table, not
across runs.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minijit.bench import report  # noqa: E402
from minijit.bench import sparse_einsum as se  # noqa: E402
from minijit.bench.cpu import timeit  # noqa: E402
from minijit.parallel import run_range  # noqa: E402
from minijit.runtime.features import cpu_name  # noqa: E402
from minijit.sparseauto import api, codegen  # noqa: E402
from minijit.sparseauto.dispatch import run_ranges  # noqa: E402

DEFAULT_ROWS = "SpMM,SDDMM-SpMM,TTMc,TTM chain fibre,TTMc NELL-2,TTM chain NELL-2 fibre"


def rotated(variants: dict[str, Callable[[], object]], rounds: int, reps: int) -> dict[str, float]:
    """Best round (median of ``reps`` calls, seconds) per variant, the order rotated each round."""
    names, best = list(variants), dict.fromkeys(variants, float("inf"))
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            best[name] = min(best[name], timeit(variants[name], reps))
    return best


#: the generator's choices an experiment can switch off: the method returning "not here"
SWITCHES = {
    "tight": ("_tight_plan", lambda self, loop, inner: None),
    "pairs": ("_second_accumulators", lambda self, plan, accs: []),
    "row": ("_row_update_plan", lambda self, loop: None),
    "store": ("_stored_whole", lambda self, temp, nxt: False),
}


def compiled(
    row: dict, schedule: str, threads: int, tight: bool = True, ahead: int | None = None, off: tuple[str, ...] = ()
):
    """The row's contraction compiled afresh with the generator's choices in ``off`` switched off
    (`SWITCHES`; ``tight=False`` is ``off=("tight",)``) and a fixed prefetch distance (None: the
    rule)."""
    off = off + (() if tight else ("tight",))
    cls = codegen._Emitter  # the switches replace the methods on the emitter class, then go
    own = {name: vars(cls).get(SWITCHES[name][0]) for name in off}  # None: inherited
    saved_ahead = codegen.prefetch_ahead
    try:
        for name in off:
            setattr(cls, SWITCHES[name][0], SWITCHES[name][1])
        if ahead is not None:
            codegen.prefetch_ahead = lambda lines: ahead
        api._cache.clear()
        c, _ = api.compile_einsum(
            row["subscripts"], *row["operands"], schedule=schedule, threads=threads,
            fibre_output=bool(row.get("fibre_output")),
        )  # fmt: skip
    finally:
        for name, method in own.items():
            if method is not None:
                setattr(cls, SWITCHES[name][0], method)
            elif SWITCHES[name][0] in vars(cls):
                delattr(cls, SWITCHES[name][0])
        codegen.prefetch_ahead = saved_ahead
        api._cache.clear()
    return c


def dispatch_table(row: dict, rounds: int) -> list[str]:
    c = compiled(row, "auto", 2)
    ops = row["operands"]
    captured: dict = {}
    run = c._run
    c._run = lambda arrays, tensors: captured.setdefault("arrays", arrays)  # type: ignore[method-assign]
    c.execute(*ops)
    c._run = run  # type: ignore[method-assign]
    arrays = captured["arrays"]
    blocks = np.array([c._addresses(arrays, c._new_temps()) for _ in range(2)], np.int64)
    kernel = c._kernel

    def pool() -> None:
        def chunk(i0: int, i1: int) -> None:
            args = c._args(arrays)
            for _ in range(i0, i1):
                kernel(args, 0, 0)

        run_range(chunk, 2, 2)

    best = rotated({"Python pool": pool, "team trampoline": lambda: run_ranges(kernel.address, blocks, [(0, 0)] * 2)},
                   rounds, 50)  # fmt: skip
    lines = ["| path | us per call (2 empty ranges) |", "|---|---|"]
    lines += [f"| {k} | {v * 1e6:.1f} |" for k, v in best.items()]
    return lines


def tight_table(rows: list[dict], rounds: int, reps: int, threads: int) -> list[str]:
    lines = [
        "| row | auto tight | auto general | linear tight | linear general | linear/auto tight | general |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cs = {(s, t): compiled(row, s, threads, tight=t) for s in ("auto", "linear") for t in (True, False)}
        ops = row["operands"]
        best = rotated({f"{s} {t}": (lambda c=c, ops=ops: c.execute(*ops)) for (s, t), c in cs.items()}, rounds, reps)
        ms = {k: v * 1e3 for k, v in best.items()}
        lines.append(
            f"| {row['name']} | {ms['auto True']:.3f} | {ms['auto False']:.3f} | {ms['linear True']:.3f} | "
            f"{ms['linear False']:.3f} | {ms['linear True'] / ms['auto True']:.2f}x | "
            f"{ms['linear False'] / ms['auto False']:.2f}x |"
        )
    return lines


def prefetch_table(rows: list[dict], rounds: int, reps: int, threads: int) -> list[str]:
    aheads: list[int | None] = [4, 8, 16, 32, None]
    lines = ["| row | " + " | ".join("rule" if a is None else f"ahead {a}" for a in aheads) + " |"]
    lines.append("|---" * (len(aheads) + 1) + "|")
    for row in rows:
        cs = {a: compiled(row, "auto", threads, ahead=a) for a in aheads}
        ops = row["operands"]
        best = rotated({str(a): (lambda c=c, ops=ops: c.execute(*ops)) for a, c in cs.items()}, rounds, reps)
        lines.append(f"| {row['name']} | " + " | ".join(f"{best[str(a)] * 1e3:.3f}" for a in aheads) + " |")
    return lines


def choices_table(rows: list[dict], rounds: int, reps: int, threads: int) -> list[str]:
    """Each schedule with every choice on, and with one switched off at a time."""
    variants = [(), ("pairs",), ("row",), ("store",)]
    label = {(): "all on", ("pairs",): "no pairs", ("row",): "no row update", ("store",): "no stored temp"}
    lines = ["| row | schedule | " + " | ".join(label[v] for v in variants) + " |"]
    lines.append("|---|---" + "|---" * len(variants) + "|")
    for row in rows:
        for sched in ("auto", "linear"):
            cs = {v: compiled(row, sched, threads, off=v) for v in variants}
            ops = row["operands"]
            best = rotated({label[v]: (lambda c=c, ops=ops: c.execute(*ops)) for v, c in cs.items()}, rounds, reps)
            same = {v: cs[v].program.asm.code() == cs[()].program.asm.code() for v in variants}
            cells = [f"{best[label[v]] * 1e3:.3f}" + (" (same code)" if v and same[v] else "") for v in variants]
            lines.append(f"| {row['name']} | {sched} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write bench/results/x86_64_sparse_ab_<date>.md")
    ap.add_argument("--experiments", default="dispatch,tight,prefetch,choices")
    ap.add_argument("--suffix", default="", help="appended to the results file's name")
    args = ap.parse_args()
    every = {r["name"]: r for r in se.cases(False, np.random.default_rng(0))}
    rows = [every[n] for n in args.rows.split(",")]
    hw = report.hardware()
    date = datetime.datetime.now(datetime.timezone.utc)
    text = [
        "# Sparse code generator A/B (issue 38)",
        "",
        f"- CPU: {cpu_name()} ({report.describe_cpu(hw)}), {hw['cores']} cores, ISA {hw['isa']} "
        f"({', '.join(hw['flags'])})",
        f"- threads: {args.threads}; float64; best of {args.rounds} rotated rounds of the median of {args.reps} calls",
        f"- date: {date.isoformat(timespec='seconds')}",
        f"- command: `python bench/sparse_ab.py {' '.join(sys.argv[1:])}`",
        "",
    ]
    runs = set(args.experiments.split(","))
    if "dispatch" in runs:
        text += ["## Dispatch of a threaded call", "", *dispatch_table(rows[0], args.rounds), ""]
    if "tight" in runs:
        text += ["## Tight stationary loops, ms per call", ""]
        text += [*tight_table(rows, args.rounds, args.reps, args.threads), ""]
    if "prefetch" in runs:
        text += ["## Prefetch distance of the walks (chosen schedule), ms per call", ""]
        text += [*prefetch_table(rows, args.rounds, args.reps, args.threads), ""]
    if "choices" in runs:
        text += ["## Paired accumulators, row updates, stored temporaries: each switched off, ms per call", ""]
        text += [*choices_table(rows, args.rounds, args.reps, args.threads), ""]
    out = "\n".join(text) + "\n"
    print(out)
    if args.write:
        name = f"x86_64_sparse_ab_{date.date().isoformat()}{args.suffix}.md"
        path = Path(__file__).resolve().parent / "results" / name
        path.write_text(out)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
