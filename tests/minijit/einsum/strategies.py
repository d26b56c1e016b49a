"""Hypothesis strategies for random einsum expressions (shared by the einsum tests)."""

from __future__ import annotations

import math
import string

import numpy as np
from hypothesis import strategies as st

LETTERS = string.ascii_lowercase


@st.composite
def expressions(draw, min_ops=2, max_ops=8, max_indices=8, max_size=24, max_product=4096, broadcast=True):
    """``(subscripts, shapes)``: operands over shuffled random index subsets, implicit or explicit
    output, occasionally size-1 (broadcast) dims; the product of all index sizes is bounded."""
    n_idx = draw(st.integers(1, max_indices))
    letters = draw(st.permutations(LETTERS[:max_indices]))[:n_idx]
    sizes = {c: draw(st.integers(1, max_size)) for c in letters}
    while math.prod(sizes.values()) > max_product:  # shrink the largest until the bound holds
        big = max(sizes, key=sizes.get)
        sizes[big] = max(1, sizes[big] // 2)
    n_ops = draw(st.integers(min_ops, max_ops))
    inputs = []
    for _ in range(n_ops):
        sub = draw(st.lists(st.sampled_from(letters), min_size=1, max_size=min(4, n_idx), unique=True))
        inputs.append("".join(sub))
    used = sorted(set("".join(inputs)))
    if draw(st.booleans()):
        subs = ",".join(inputs)  # implicit output
    else:
        out = draw(st.lists(st.sampled_from(used), max_size=min(4, len(used)), unique=True))
        subs = ",".join(inputs) + "->" + "".join(out)
    shapes = []
    for sub in inputs:
        shape = [sizes[c] for c in sub]
        if broadcast and draw(st.integers(0, 3)) == 0:
            shape[draw(st.integers(0, len(shape) - 1))] = 1
        shapes.append(tuple(shape))
    return subs, shapes


def operands(shapes, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]


def typed_operands(shapes, dtype, seed: int) -> list[np.ndarray]:
    """Operands of ``dtype``: integers over the whole range (products and sums wrap), bool at
    random, float16 and complex uniform in [-1, 1) (both parts), other floats too."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    out = []
    for s in shapes:
        if dt.kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max, s, dtype=dt, endpoint=True))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, s).astype(bool))
        elif dt.kind == "c":
            out.append((rng.uniform(-1, 1, s) + 1j * rng.uniform(-1, 1, s)).astype(dt))
        else:
            out.append(rng.uniform(-1, 1, s).astype(dt))
    return out


def reference(subs, ops):
    """np.einsum in float64, and the same on absolute values (the scale of the rounding error)."""
    ref = np.einsum(subs, *[o.astype(np.float64) for o in ops])
    scale = np.einsum(subs, *[np.abs(o.astype(np.float64)) for o in ops])
    return ref, scale


def assert_close(got, subs, ops, dtype):
    ref, scale = reference(subs, ops)
    assert got.shape == ref.shape, (subs, got.shape, ref.shape)
    assert got.dtype == np.dtype(dtype)
    assert_layout(got, subs, ops)
    eps = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
    err = np.abs(got.astype(np.float64) - ref)
    bad = err > eps * (scale + 1)
    assert not bad.any(), f"{subs}: max error {err.max()} at scale {scale.max()}"


def assert_layout(got, subs, ops):
    """numpy's default order 'K': C-contiguous operands give a C-order result; others (several
    operands) the strides of numpy's unoptimised einsum, a dense result in either case."""
    if all(o.flags.c_contiguous for o in ops):
        assert got.flags.c_contiguous, subs
        return
    want = np.einsum(subs, *[np.zeros_like(o, dtype=np.float64) for o in ops], optimize=False)
    perm = sorted(range(got.ndim), key=lambda ax: -abs(got.strides[ax]))
    assert got.transpose(perm).flags.c_contiguous or got.size <= 1, (subs, got.strides)  # dense
    if len(ops) > 1 and got.ndim > 1:  # one operand: numpy returns a view of it
        itemsize = got.itemsize / want.itemsize
        assert got.strides == tuple(int(s * itemsize) for s in want.strides), (subs, got.strides, want.strides)
