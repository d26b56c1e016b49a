"""Fuzz batch ``sparse``: `minijit.einsum` with sparse operands (the SparseAuto path, issue 38),
called the way a hostile user would (issue 40).

Valid expressions come from the sparse einsum strategies (1-2 sparse operands as SparseTensor,
scipy CSR/CSC/COO or pydata COO; empty fibres, one non-zero, all zero); a share is corrupted one
thing at a time. Each example ends in numpy's result (on the densified operands) or in
ValueError/TypeError (SetupError included) with ``out`` untouched.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.minijit.sparseauto.strategies import expressions

CORRUPT = ["none"] * 6 + [
    "shape",
    "dtype_complex",
    "dtype_int",
    "out_letter",
    "operand_count",
    "bad_index",
    "bad_indptr",
    "list",
    "out_short",
    "out_readonly",
    "target",
]
FORMS = ["minijit", "scipy_csr", "scipy_csc", "scipy_coo", "pydata"]


def _as_form(t: Any, form: str) -> Any:
    """The SparseTensor ``t`` as the user's type ``form`` (scipy only for matrices)."""
    dense = t.to_dense()
    if form.startswith("scipy") and dense.ndim == 2:
        import scipy.sparse as sp

        return {"scipy_csr": sp.csr_matrix, "scipy_csc": sp.csc_matrix, "scipy_coo": sp.coo_matrix}[form](dense)
    if form == "pydata":
        import sparse

        return sparse.COO.from_numpy(dense)
    return t


def run(examples: int, seed: int, counts: Counter, show: Callable, expect: Callable) -> None:
    """``examples`` drawn from ``seed`` (counted in ``counts``; ``expect`` records failures)."""
    import scipy.sparse as sp

    import minijit

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        expr=expressions(max_indices=4, max_operands=3),
        form=st.sampled_from(FORMS),
        corrupt=st.sampled_from(CORRUPT),
        optimize=st.booleans(),
        pass_out=st.booleans(),
        rseed=st.integers(0, 2**32 - 1),
    )
    def one(expr: tuple, form: str, corrupt: str, optimize: bool, pass_out: bool, rseed: int) -> None:
        subscripts, ops, dense = expr
        ops, dense = list(ops), list(dense)
        ops = [_as_form(o, form) if hasattr(o, "levels") else o for o in ops]
        rng = np.random.default_rng(rseed)
        kw: dict[str, Any] = {"optimize": optimize}
        sparse_at = [k for k, o in enumerate(ops) if not isinstance(o, np.ndarray)]
        dense_at = [k for k, o in enumerate(ops) if isinstance(o, np.ndarray)]
        if corrupt in ("shape", "dtype_complex", "dtype_int", "list") and not dense_at:
            corrupt = "none"  # nothing dense to corrupt: a valid call
        if corrupt == "shape" and dense_at:
            k = dense_at[0]
            dense[k] = ops[k] = rng.uniform(-1, 1, tuple(n + 1 for n in ops[k].shape)).astype(ops[k].dtype)
        elif corrupt == "dtype_complex" and dense_at:
            ops[dense_at[0]] = ops[dense_at[0]].astype(np.complex128)
        elif corrupt == "dtype_int" and dense_at:
            dense[dense_at[0]] = ops[dense_at[0]] = rng.integers(-3, 4, ops[dense_at[0]].shape)
        elif corrupt == "out_letter":
            subscripts += "z" if "->" in subscripts else "->z"
        elif corrupt == "operand_count":
            ops, dense = ops[:-1], dense[:-1]
        elif corrupt in ("bad_index", "bad_indptr"):
            k = sparse_at[0]
            m = sp.csr_matrix(dense[k]) if dense[k].ndim == 2 and dense[k].size else None
            if m is not None and m.nnz:
                m = sp.csr_matrix((m.data.copy(), m.indices.copy(), m.indptr.copy()), shape=m.shape, copy=True)
                if corrupt == "bad_index":
                    m.indices[rng.integers(m.nnz)] = m.shape[1] + int(rng.integers(0, 3))
                else:
                    m.indptr[1:] = m.indptr[1:][::-1].copy()  # decreasing (or equal: then still valid)
                ops[k] = m
                dense[k] = None  # no numpy answer: it must refuse unless the CSR is still valid
            else:
                corrupt = "none"  # an empty or non-matrix operand: nothing to break
        elif corrupt == "list" and dense_at:
            ops[dense_at[0]] = ops[dense_at[0]].tolist()
        elif corrupt == "target":
            kw["target"] = "cuda"
        try:  # numpy's answer; None where numpy refuses or the operands are malformed
            want = None
            # a complex operand is numpy's dtype too: the sparse path computes it (densified); a
            # list is array_like to numpy, and so to the sparse path
            kind = np.complex128 if corrupt == "dtype_complex" else np.float64
            if all(d is not None for d in dense) and corrupt != "target":
                want = np.einsum(subscripts, *[np.asarray(d, kind) for d in dense])
        except ValueError:
            want = None
        if corrupt == "bad_indptr" and dense[sparse_at[0]] is None:
            m = ops[sparse_at[0]]
            if np.all(np.diff(m.indptr) >= 0):  # reversing left it valid (all rows equal)
                want = np.einsum(subscripts, *[np.asarray(m.toarray() if d is None else d, np.float64) for d in dense])
        out = None
        sampled = any(
            "->" in subscripts and sorted(subscripts.split("->")[1]) == sorted(t) and k in sparse_at
            for k, t in enumerate(subscripts.split("->")[0].split(","))
        )
        if (pass_out or corrupt.startswith("out")) and not sampled and want is not None:
            out = np.full(want.shape, 7.0)
            if corrupt == "out_short":
                out = out.reshape(-1)[:-1] if out.size else np.empty(1)
            elif corrupt == "out_readonly":
                out.flags.writeable = False
            kw["out"] = out
        example = {
            "subscripts": subscripts,
            "form": form,
            "corrupt": corrupt,
            "kw": kw,
            "operands": ops,
            "dense": dense,
        }
        show("sparse", example)
        counts["examples"] += 1
        lo, _, hi = os.environ.get("MINIJIT_FUZZ_ONLY", "").partition(":")
        if lo and not int(lo) <= counts["examples"] - 1 < int(hi):  # replaying a range of a batch
            return

        def result_ok(got: Any) -> str | None:
            # a numpy array, or a sparse result of the inputs' own kind (minijit.sparseauto.interop)
            package = type(got).__module__.split(".")[0]
            if not isinstance(got, np.ndarray) and package not in {type(o).__module__.split(".")[0] for o in ops}:
                return f"a result of type {type(got).__name__} for {form} inputs"
            for densify in ("to_dense", "toarray", "todense"):  # minijit, scipy, pydata
                if not isinstance(got, np.ndarray) and hasattr(got, densify):
                    got = getattr(got, densify)()
            got = np.asarray(got, kind)
            if want is None:
                return f"accepted what numpy refuses or malformed operands: returned {got!r}"
            tol = 1e-4 if any(getattr(o, "dtype", None) == np.float32 for o in ops) else 1e-10
            if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
                return f"wrong result: got {got!r}, want {want!r}"
            if out is not None and (out.shape != want.shape or not np.allclose(out, want, rtol=tol, atol=tol)):
                return f"out not written: {out!r}, want {want!r}"
            return None

        expect(example, lambda: minijit.einsum(subscripts, *ops, **kw), [out] if out is not None else [], result_ok)

    hypothesis_seed(seed)(one)()
