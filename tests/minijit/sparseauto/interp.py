"""A tiny pure-numpy interpreter of the loop-nest IR, the planner tests' oracle.

Operands are dense numpy arrays in their storage (``Operand.indices``) order; a sparse
operand's pattern is where its array is non-zero. A loop over ``i`` runs over the coordinates
that every sparse operand it walks (``Nest.walks``) stores under the coordinates bound so far,
else over ``0..extent(i)``, so the interpreter also checks the walk semantics: a schedule whose
loops skip coordinates that contribute fails the comparison with ``np.einsum``. It counts how
often each statement runs (the oracle of the time complexity).
"""

from __future__ import annotations

import numpy as np

from minijit.sparseauto.nest import COMPRESSED, DENSE, Compute, Loop, Nest, Operand, Temp


def run(nest: Nest, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
    """Execute ``nest`` on ``arrays`` (name -> array in storage order).

    Returns the output (dense, in ``nest.output.indices`` order) and the number of statement
    executions.
    """
    sizes: dict[str, int] = {}
    for o in nest.operands:
        for idx, n in zip(o.indices, arrays[o.name].shape, strict=True):
            sizes[idx] = n
    # projections[name][k]: for a sparse operand, which prefixes of length k+1 are stored
    proj = {}
    for o in nest.operands:
        if o.sparse:
            nz = arrays[o.name] != 0
            proj[o.name] = [nz.any(axis=tuple(range(k + 1, nz.ndim))) for k in range(nz.ndim)]
    out = np.zeros(tuple(sizes[i] for i in nest.output.indices))
    tensors: dict[str, np.ndarray] = {**arrays, nest.output.name: out}
    env: dict[str, int] = {}
    count = 0

    def coords(loop: Loop) -> list[int]:
        result = []
        walked = nest.walks(loop)
        for c in range(sizes[loop.index]):
            ok = True
            for o in walked:
                k = o.indices.index(loop.index)
                key = tuple(env[i] for i in o.indices[:k]) + (c,)
                if not proj[o.name][k][key]:
                    ok = False
                    break
            if ok:
                result.append(c)
        return result

    def body(nodes) -> None:
        nonlocal count
        for node in nodes:
            if isinstance(node, Temp):
                tensors[node.name] = np.zeros(tuple(sizes[i] for i in node.indices))
            elif isinstance(node, Loop):
                for c in coords(node):
                    env[node.index] = c
                    body(node.body)
                env.pop(node.index, None)
            else:
                assert isinstance(node, Compute)
                value = 1.0
                for a in node.ins:
                    value *= tensors[a.tensor][tuple(env[i] for i in a.indices)]
                tensors[node.out.tensor][tuple(env[i] for i in node.out.indices)] += value
                count += 1

    body(nest.body)
    return out, count


def einsum_reference(nest: Nest, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """``np.einsum`` of the nest's expression on the same arrays (output in storage order)."""
    letters = {}
    for o in (*nest.operands, nest.output):
        for i in o.indices:
            letters.setdefault(i, chr(ord("a") + len(letters)))
    spec = ",".join("".join(letters[i] for i in o.indices) for o in nest.operands)
    spec += "->" + "".join(letters[i] for i in nest.output.indices)
    return np.einsum(spec, *(arrays[o.name] for o in nest.operands))


def random_arrays(nest: Nest, sizes: dict[str, int], rng: np.random.Generator, density: float = 0.4):
    """Random operands: dense ones full, sparse ones with about ``density`` non-zeros."""
    arrays = {}
    for o in nest.operands:
        shape = tuple(sizes[i] for i in o.indices)
        a = rng.standard_normal(shape)
        if o.sparse:
            a = a * (rng.random(shape) < density)
        arrays[o.name] = a
    return arrays


def expression(subscripts: str, *levels: str) -> tuple[tuple[Operand, ...], Operand]:
    """Operands B, C, D, ... of ``subscripts`` with level strings like ``"dc"`` (d dense,
    c compressed; ``""`` or missing: all dense) and the output A (sampling the first sparse
    operand with the output's indices, as ``sparse_plan`` does)."""
    lhs, rhs = subscripts.split("->")
    ops = []
    for k, term in enumerate(lhs.split(",")):
        lv = levels[k] if k < len(levels) and levels[k] else "d" * len(term)
        fmts = tuple(COMPRESSED if ch == "c" else DENSE for ch in lv)
        ops.append(Operand("BCDEFGH"[k], tuple(term), fmts))
    out = Operand.dense("A", tuple(rhs))
    for o in ops:
        if o.sparse and o.indices == tuple(rhs):
            out = Operand("A", o.indices, o.levels)
            break
    return tuple(ops), out


def regular_sparse(
    shape: tuple[int, ...], levels: tuple[str, ...], fans: tuple[int, ...], rng: np.random.Generator
) -> tuple[np.ndarray, tuple[int, ...]]:
    """A random tensor (storage order) in which every stored prefix has exactly ``fans[k]``
    children at each compressed level ``k`` (dense levels store every coordinate).

    Returns the array and the stored positions of each compressed level (outermost first),
    for which the uniform-sparsity iteration counts are exact.
    """
    prefixes = [()]
    counts = []
    for k, (n, fmt) in enumerate(zip(shape, levels, strict=True)):
        nxt = []
        for p in prefixes:
            children = range(n) if fmt == DENSE else sorted(rng.choice(n, size=fans[k], replace=False))
            nxt.extend(p + (int(c),) for c in children)
        prefixes = nxt
        if fmt == COMPRESSED:
            counts.append(len(prefixes))
    a = np.zeros(shape)
    for p in prefixes:
        a[p] = rng.uniform(0.5, 1.5) * rng.choice((-1.0, 1.0))
    return a, tuple(counts)
