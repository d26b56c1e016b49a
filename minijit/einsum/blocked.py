"""Blocked reductions for the CPU einsum plan: a sum over many elements (a reduce node,
`minijit.einsum.builder._Builder.reduce`) is split into levels, so that no accumulation chain is
long. The summed indices of a tensor are cut into factor indices (C order is kept: a run of summed
indices adjacent in the tensor's order becomes one index, which is split into factors, innermost
first); the first level sums the innermost factors (one kernel chain of at most `LEAF_MAX`
elements, a block), each further level sums one factor of at most `FAN_IN_MAX` block sums (a
prime factor above it: that prime). The error of a sum of ``n`` terms is then at most
``(L - 1 + sum(f - 1 for the later factors f)) * u * sum(|x|)`` (u: the unit roundoff, L the
block's length; docs/decisions.md), where one chain has ``(n - 1) * u * sum(|x|)``.
"""

from __future__ import annotations

__all__ = ["FAN_IN_MAX", "LEAF_MAX", "THRESHOLD", "factors", "levels"]

#: elements one kernel chain sums (a block)
LEAF_MAX = 1024
#: block sums (or partial sums) one later level combines
FAN_IN_MAX = 16
#: a reduction of at most this many elements is one chain (one node), as before
THRESHOLD = LEAF_MAX


def _largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (1 when ``limit`` < 2)."""
    for d in range(min(n, limit), 1, -1):
        if n % d == 0:
            return d
    return 1


def _smallest_factor(n: int) -> int:
    d = 2
    while d * d <= n:
        if n % d == 0:
            return d
        d += 1
    return n


def factors(n: int, leaf_limit: int = LEAF_MAX) -> list[int]:
    """``n`` as factors, innermost first: a leaf of at most ``leaf_limit`` (the largest divisor
    of ``n`` that fits), then factors of at most `FAN_IN_MAX` (a larger prime as it is)."""
    leaf = _largest_divisor(n, leaf_limit)
    out, rest = [leaf], n // leaf
    while rest > 1:
        f = _largest_divisor(rest, FAN_IN_MAX)
        if f == 1:
            f = _smallest_factor(rest)
        out.append(f)
        rest //= f
    return out


def levels(
    ids: tuple[str, ...], drop, sizes: dict[str, int]
) -> tuple[tuple[str, ...], dict[str, int], list[tuple[str, ...]]] | None:
    """How to sum ``drop`` out of a C-order tensor ``ids`` in levels: ``(new_ids, new_sizes,
    stages)``, ``new_ids`` the tensor's indices with each run of summed indices as its factor
    indices (sizes in ``new_sizes``), ``stages`` the indices each level sums, first level first.
    None when the sum is short (at most `THRESHOLD` elements) or cannot be cut into levels."""
    total = 1
    for c in ids:
        if c in drop:
            total *= sizes[c]
    if total <= THRESHOLD:
        return None
    runs: list[list[str]] = []  # runs of adjacent summed indices, in the tensor's order
    pieces: list[list[str] | str] = []
    for c in ids:
        if c in drop:
            if pieces and isinstance(pieces[-1], list):
                pieces[-1].append(c)
            else:
                pieces.append([c])
                runs.append(pieces[-1])
        else:
            pieces.append(c)
    new_sizes: dict[str, int] = {}
    split: dict[int, list[str]] = {}  # run -> its factor letters, innermost first
    leaf_letters: list[str] = []
    later: list[str] = []
    budget = LEAF_MAX
    for r in reversed(range(len(runs))):  # the innermost run first: its leaf is the unit-stride block
        n = 1
        for c in runs[r]:
            n *= sizes[c]
        fs = factors(n, budget)
        budget = max(1, budget // fs[0])
        name = "".join(runs[r])
        letters = [f"{name}#{k}" for k in range(len(fs))]
        new_sizes.update(zip(letters, fs, strict=True))
        split[r] = letters
        leaf_letters.append(letters[0])
        later.extend(letters[1:])
    if not later:
        return None
    new_ids: list[str] = []
    k = 0
    for p in pieces:
        if isinstance(p, list):
            new_ids.extend(reversed(split[k]))
            k += 1
        else:
            new_ids.append(p)
    ones = {c for c, n in new_sizes.items() if n == 1}  # a factor of 1 is no index at all
    stages = [st for st in (tuple(c for c in leaf_letters if c not in ones), *((c,) for c in later)) if st]
    if len(stages) < 2:
        return None
    kept = tuple(c for c in new_ids if c not in ones)
    return kept, {c: n for c, n in new_sizes.items() if n != 1}, stages
