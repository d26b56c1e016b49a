"""Hypothesis strategies for the fuzz suite: valid tensor-operation setups, one-field corruptions of
them, bad arrays, and a numpy oracle for any configuration that passes setup.

A setup is a dict of the ten ``setup`` arguments (lists, enum names). Array values are small
integers, exact in every dtype and in every order of summation, so results compare exactly.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
from hypothesis import strategies as st

#: outcomes a fuzz example may end in besides the numpy result
EXPECTED_ERRORS = (ValueError, TypeError)  # SetupError is a ValueError
FIELDS = ("dim_types", "exec_types", "dim_sizes", "strides_in0", "strides_in1", "strides_out")
#: elements of the largest array a drawn (valid or corrupted) setup may execute on
MAX_EXEC_ELEMENTS = 1 << 16
HUGE = [1 << b for b in range(33, 63)] + [(1 << 62) + 1, (1 << 63) - 1, 1 << 64]


def _layout(sizes: list[int], order: list[int]) -> list[int]:
    """Element strides of a dense tensor over dims ``order`` (innermost first) of ``sizes``."""
    strides = [0] * len(sizes)
    acc = 1
    for i in order:
        strides[i] = acc
        acc *= sizes[i]
    return strides


def _dense(draw: Any, sizes: list[int], which: list[int]) -> list[int]:
    """Dense strides (a drawn permutation, innermost first) over the dims ``which``; 0 elsewhere."""
    order = draw(st.permutations(which)) if which else []
    full = _layout(sizes, list(order))
    return [full[i] if i in which else 0 for i in range(len(sizes))]


@st.composite
def valid_setup(draw: Any, kinds: tuple[str, ...] = ("gemm", "brgemm", "binary", "unary")) -> dict:
    """A valid setup: GEMM/BRGEMM (M, N, K, optional C and BR K), binary or unary element-wise ops
    on dense tensors whose dim orders are drawn; exec types undefined (the optimizer runs)."""
    kind = draw(st.sampled_from(kinds))
    small = st.integers(1, 9)
    if kind in ("gemm", "brgemm"):
        types = ["m", "n", "k"] + (["k"] if kind == "brgemm" else []) + draw(st.sampled_from([[], ["c"]]))
        main = "gemm"
        first = draw(st.sampled_from(["none", "zero"]))
        last = draw(st.sampled_from(["none", "relu"]))
    elif kind == "binary":
        types = draw(st.lists(st.sampled_from(["c", "m", "n"]), min_size=1, max_size=3))
        main = draw(st.sampled_from(["add", "sub", "mul", "min", "max"]))
        first, last = "none", draw(st.sampled_from(["none", "relu"]))
    else:
        types = draw(st.lists(st.sampled_from(["c", "m", "n"]), min_size=1, max_size=3))
        main = draw(st.sampled_from(["copy", "relu", "zero", "identity"]))
        first, last = "none", draw(st.sampled_from(["none", "relu", "zero"]))
    perm = draw(st.permutations(range(len(types))))
    types = [types[i] for i in perm]
    sizes = [draw(small) for _ in types]
    n = len(types)
    idx = range(n)
    if main == "gemm":
        s0 = _dense(draw, sizes, [i for i in idx if types[i] in "cmk"])
        s1 = _dense(draw, sizes, [i for i in idx if types[i] in "cnk"])
        so = _dense(draw, sizes, [i for i in idx if types[i] in "cmn"])
    else:
        s0 = _dense(draw, sizes, list(idx)) if main != "zero" else [0] * n
        s1 = _dense(draw, sizes, list(idx)) if kind == "binary" else [0] * n
        so = _dense(draw, sizes, list(idx))
    dtype = draw(st.sampled_from(["fp32", "fp64"]))
    return {
        "dtype": dtype,
        "prim_first": first,
        "prim_main": main,
        "prim_last": last,
        "dim_types": types,
        "exec_types": ["undefined"] * n,
        "dim_sizes": sizes,
        "strides_in0": s0,
        "strides_in1": s1,
        "strides_out": so,
    }


CORRUPTIONS = (
    "dtype",
    "ptype",
    "size_small",
    "size_huge",
    "size_product",
    "k_stride_out",
    "shared_k",
    "length",
    "negate_stride",
    "exec_type",
    "dim_type",
    "stride_type",
    "stride_huge",
)


def corrupt(setup: dict, how: str, rnd: random.Random) -> dict:
    """``setup`` with one field corrupted as ``how`` (one of :data:`CORRUPTIONS`) says."""
    s = {k: list(v) if isinstance(v, list) else v for k, v in setup.items()}
    n = len(s["dim_types"])
    i = rnd.randrange(n)
    if how == "dtype":
        s["dtype"] = rnd.choice(["fp16", "int8", "float", "", 7, None, "fp32 "])
    elif how == "ptype":
        field = rnd.choice(["prim_first", "prim_main", "prim_last"])
        s[field] = rnd.choice(["conv", "gemmm", 3, None, "none" if field == "prim_main" else "gemm"])
    elif how == "size_small":
        s["dim_sizes"][i] = rnd.choice([0, -1, -7, -(1 << 40)])
    elif how == "size_huge":
        s["dim_sizes"][i] = rnd.choice(HUGE)  # 2**33..2**64: set up (then arrays too short) or refused
    elif how == "size_product":  # every dim at 2**33..2**56 so the sizes multiply past 2**56
        for j in range(n):
            s["dim_sizes"][j] = 1 << rnd.randrange(33, 57)
        if n == 1:
            s["dim_sizes"][0] = 1 << 57
    elif how == "k_stride_out":
        ks = [j for j in range(n) if s["dim_types"][j] == "k"]
        s["strides_out"][ks[0] if ks else i] = rnd.choice([1, -1, 3])
        if not ks:
            s["dim_types"][i] = "k"
    elif how == "shared_k":
        ks = [j for j in range(n) if s["dim_types"][j] == "k"] or [i]
        s["dim_types"][ks[0]] = "k"
        s["exec_types"] = ["shared" if j == ks[0] else "undefined" for j in range(n)]
    elif how == "length":
        field = rnd.choice(FIELDS)
        s[field] = s[field][:-1] if rnd.random() < 0.5 else s[field] + [s[field][-1]]
    elif how == "negate_stride":
        field = rnd.choice(["strides_in0", "strides_in1", "strides_out"])
        nz = [j for j in range(n) if s[field][j]] or [i]
        s[field][rnd.choice(nz)] *= -1
    elif how == "exec_type":
        s["exec_types"][i] = rnd.choice(["parallel", "", 1, None])
    elif how == "dim_type":
        s["dim_types"][i] = rnd.choice(["x", "mm", 0, None])
    elif how == "stride_type":
        field = rnd.choice(["strides_in0", "strides_in1", "strides_out"])
        s[field][i] = rnd.choice([1.5, "1", None, True])
    elif how == "stride_huge":
        field = rnd.choice(["strides_in0", "strides_in1", "strides_out"])
        s[field][i] = rnd.choice(HUGE) * rnd.choice([1, -1])
    else:
        raise ValueError(f"unknown corruption {how!r}")
    return s


BAD_ARRAYS = ("short", "dtype", "readonly", "list", "strided", "two_d_wrong", "none")


def _reach(sizes: list[int], strides: list[int]) -> tuple[int, int]:
    lo = hi = 0
    for n, s in zip(sizes, strides, strict=True):
        r = (n - 1) * s
        lo, hi = (lo + r, hi) if r < 0 else (lo, hi + r)
    return lo, hi


def executable(setup: dict) -> bool:
    """True when ``setup`` (one that passed setup) is small enough to execute and check here."""
    try:
        sizes = [int(x) for x in setup["dim_sizes"]]
        if math.prod(sizes) > MAX_EXEC_ELEMENTS:
            return False
        reaches = [_reach(sizes, [int(x) for x in setup[f"strides_{t}"]]) for t in ("in0", "in1", "out")]
        return all(hi - lo < MAX_EXEC_ELEMENTS for lo, hi in reaches)
    except (TypeError, ValueError):
        return False


def arrays_for(setup: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """in0, in1, out holding every element the strides reach, small integer values, and the
    element offsets that put each tensor's lowest reached element at index 0."""
    dt = np.float32 if setup["dtype"] in ("fp32", "float32") else np.float64
    sizes = [int(x) for x in setup["dim_sizes"]]
    arrays, offs = [], []
    for t in ("in0", "in1", "out"):
        lo, hi = _reach(sizes, [int(x) for x in setup[f"strides_{t}"]])
        arrays.append(rng.integers(-3, 4, hi - lo + 1).astype(dt))
        offs.append(-lo)
    return arrays[0], arrays[1], arrays[2], tuple(offs)  # type: ignore[return-value]


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _touch(name: str, x: np.ndarray) -> np.ndarray:
    if name == "zero":
        return np.zeros_like(x)
    if name == "relu":
        return np.maximum(x, 0)
    return x


def oracle(setup: dict, in0: np.ndarray, in1: np.ndarray, out: np.ndarray, offsets: tuple[int, int, int]) -> np.ndarray:
    """The expected ``out`` after executing ``setup`` (a config that passed setup), from index
    arithmetic alone: GEMM ``out = last(first(out) + sum_K in0 * in1)``, element-wise
    ``out = last(main(in0, in1))``, at the elements the output strides reach."""
    sizes = [int(x) for x in setup["dim_sizes"]]
    grids = np.indices(sizes).reshape(len(sizes), -1)
    off = {
        t: o + (np.array([int(x) for x in setup[f"strides_{t}"]]) @ grids if sizes else np.zeros(1, int))
        for t, o in zip(("in0", "in1", "out"), offsets, strict=True)
    }
    res = out.astype(np.float64)
    main, first, last = str(setup["prim_main"]), str(setup["prim_first"]), str(setup["prim_last"])
    targets = np.unique(off["out"])
    a, b = in0.astype(np.float64), in1.astype(np.float64)
    if main in ("gemm", "brgemm"):
        res[targets] = _touch(first, res[targets])
        np.add.at(res, off["out"], a[off["in0"]] * b[off["in1"]])
    elif main in _BINARY:
        res[off["out"]] = _BINARY[main](a[off["in0"]], b[off["in1"]])
    elif main in ("copy", "identity"):
        res[off["out"]] = a[off["in0"]]
    elif main == "relu":
        res[off["out"]] = np.maximum(a[off["in0"]], 0)
    elif main == "zero":
        res[off["out"]] = 0
    res[targets] = _touch(last, res[targets])
    return res.astype(out.dtype)


def bad_array(kind: str, which: int, arrays: list, rng: np.random.Generator) -> list:
    """``arrays`` (in0, in1, out) with array ``which`` replaced by a bad one of ``kind``."""
    arrays = list(arrays)
    x = arrays[which]
    if kind == "short":
        x = x[:-1].copy() if x.size > 0 else x
    elif kind == "dtype":
        x = x.astype(np.float64 if x.dtype == np.float32 else np.float32)
    elif kind == "readonly":
        x = x.copy()
        x.flags.writeable = False
    elif kind == "list":
        x = x.tolist()
    elif kind == "strided":
        y = np.repeat(x, 2)
        x = y[::2]
    elif kind == "two_d_wrong":
        x = x.astype(np.int32)
    elif kind == "none":
        x = None
    arrays[which] = x
    return arrays
