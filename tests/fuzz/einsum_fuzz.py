"""Fuzz of ``minijit.einsum``, ``EinsumPlan`` and ``contract_path`` (run by `tests.fuzz.runner`).

Draws 1-3 operands over letters with sizes 1..5, the output a subset of the letters; corrupts a
share (an unknown letter in the output, an operand count or shape that does not match, a wrong
dtype, a Python list, a read-only or short ``out``). The outcome is numpy's result or a
ValueError/TypeError with ``out`` untouched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

LETTERS = "abcdef"
CORRUPT = ("none", "none", "none", "out_letter", "operand_count", "shape", "dtype", "list", "out_readonly", "out_short")


@st.composite
def problem(draw: Any) -> tuple[str, list[tuple[int, ...]], dict[str, int]]:
    """``(subscripts, shapes, sizes)`` of a valid einsum."""
    sizes = {c: draw(st.integers(1, 5)) for c in LETTERS}
    nops = draw(st.integers(1, 3))
    ops = [draw(st.text(LETTERS, min_size=1, max_size=3)) for _ in range(nops)]
    ops = ["".join(dict.fromkeys(o)) for o in ops]  # no repeated index within an operand
    used = sorted(set("".join(ops)))
    out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    return ",".join(ops) + "->" + out, [tuple(sizes[c] for c in o) for o in ops], sizes


def run(examples: int, seed: int, counts: Counter, show: Callable, expect: Callable) -> None:
    """Fuzz the three entry points with ``examples`` examples drawn from ``seed`` (counted in
    ``counts``; ``expect`` records the failures)."""
    import minijit

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        prob=problem(),
        entry=st.sampled_from(["einsum", "plan", "path"]),
        corrupt=st.sampled_from(CORRUPT),
        dtype=st.sampled_from(["float32", "float64"]),
        rseed=st.integers(0, 2**32 - 1),
    )
    def one(prob: tuple, entry: str, corrupt: str, dtype: str, rseed: int) -> None:
        subscripts, shapes, _ = prob
        rng = np.random.default_rng(rseed)
        ops: list[Any] = [rng.integers(-3, 4, s).astype(dtype) for s in shapes]
        want = np.einsum(subscripts, *[o.astype(np.float64) for o in ops]).astype(dtype)
        out = np.full(want.shape, 7, dtype)
        if corrupt == "out_letter":
            subscripts += "z"
        elif corrupt == "operand_count":
            ops = ops[:-1] if len(ops) > 1 else ops + ops
        elif corrupt == "shape":
            ops[0] = rng.integers(-3, 4, tuple(n + 1 for n in ops[0].shape)).astype(dtype)
        elif corrupt == "dtype":
            ops[-1] = ops[-1].astype(np.int32)
        elif corrupt == "list":
            ops[0] = ops[0].tolist()
        elif corrupt == "out_readonly":
            out.flags.writeable = False
        elif corrupt == "out_short":
            out = out.reshape(-1)[:-1] if out.size else np.empty(1, dtype)
        try:  # numpy's answer for the (possibly corrupted) call; None where numpy refuses it
            want = np.einsum(subscripts, *[np.asarray(o, np.float64) for o in ops]).astype(dtype)
        except ValueError:
            want = None
        example = {"entry": entry, "subscripts": subscripts, "corrupt": corrupt, "dtype": dtype, "operands": ops}
        show("einsum", example)
        counts["examples"] += 1
        counts[f"examples:{entry}"] += 1
        pass_out = corrupt.startswith("out") or rng.random() < 0.5

        def result_ok(got: Any) -> str | None:
            got = np.asarray(got)
            if want is None:
                return f"accepted what numpy refuses: returned {got!r}"
            if got.shape != want.shape or not np.array_equal(got, want):
                return f"wrong result: got {got!r}, want {want!r}"
            if pass_out and not np.array_equal(out, want):
                return f"out not written: {out!r}, want {want!r}"
            return None

        if entry == "einsum":
            kw = {"out": out} if pass_out else {}
            expect(example, lambda: minijit.einsum(subscripts, *ops, **kw), [out] if pass_out else [], result_ok)
        elif entry == "plan":

            def plan_run() -> Any:
                shp = [np.shape(o) for o in ops]
                plan = minijit.EinsumPlan(subscripts, *shp, dtype=dtype)
                return plan(*ops, out=out) if pass_out else plan(*ops)

            expect(example, plan_run, [out] if pass_out else [], result_ok)
        else:
            npath = None
            try:
                npath = np.einsum_path(subscripts, *ops, optimize="greedy")[0]
            except Exception:  # noqa: BLE001 - numpy refuses: minijit must refuse too
                npath = None

            def path_ok(res: Any) -> str | None:
                path, info = res
                if npath is None:
                    return f"contract_path accepted what numpy refuses: {path!r}"
                if not isinstance(info, str) or not isinstance(path, list):
                    return f"contract_path returned {res!r}"
                ninputs = len(ops)
                for step in path[1:] if path[:1] == ["einsum_path"] else path:
                    if not all(0 <= i < ninputs for i in step):
                        return f"contract_path step {step} out of range"
                    ninputs -= len(step) - 1
                return None if ninputs == 1 else f"contract_path leaves {ninputs} operands: {path!r}"

            expect(example, lambda: minijit.contract_path(subscripts, *[np.shape(o) for o in ops]), [], path_ok)

    hypothesis_seed(seed)(one)()
