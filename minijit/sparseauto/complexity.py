"""Symbolic time and auxiliary-memory complexity of loop nests (docs/seeds/002_sparseauto.txt sections 3 and 5.2).

Symbols are dimension sizes (``dim("i")``, printed ``I``) and, per sparse operand and
compressed level ``c``, the number of stored positions of that level
(``nnz("B", ("i", "j"))``, printed ``nnz(B_ij)``: the non-empty ``(i, j)`` fibres of ``B``).
:class:`Monomial` allows negative exponents (a density is ``nnz(B_ij) / (I*J)``);
:class:`Poly` is a sum of monomials with integer coefficients.

Time is the number of innermost iterations summed over the statements, under the seed's
uniform-sparsity assumption: a statement whose enclosing loops bind the index set ``S`` and walk
the levels of sparse operands up to the prefixes ``p_X`` runs ``prod(N_i, i in S) *
prod(density(X, p_X))`` times. Memory is the total size of the temporaries (a scalar counts 1).

Asymptotic comparison (:class:`Assumptions`) is exact for monomials under the seed's
assumptions: every size and count is >= 1, and along a sparse operand's levels
``pos(level k-1) <= pos(level k) <= pos(level k-1) * N_k`` (dense levels store every
coordinate), e.g. ``nnz(B_i) <= nnz(B_ij) <= nnz(B)`` and ``nnz(B_ij) <= I*J``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from minijit.sparseauto.nest import Compute, Loop, Nest, Node, Operand, cached_hash, fields_state

#: A symbol: ``("dim", index)`` or ``("nnz", operand, prefix)``.
Symbol = tuple


def dim_symbol(index: str) -> Symbol:
    """The symbol of the extent of ``index``."""
    return ("dim", index)


def nnz_symbol(operand: str, prefix: tuple[str, ...]) -> Symbol:
    """The symbol of the stored positions of ``operand``'s level ending ``prefix``."""
    return ("nnz", operand, tuple(prefix))


def symbol_name(sym: Symbol) -> str:
    """``I`` for a one-letter index ``i`` (else ``N_idx``); ``nnz(B_ij)`` for a level count."""
    if sym[0] == "dim":
        idx = sym[1]
        return idx.upper() if len(idx) == 1 and idx.islower() else f"N_{idx}"
    return f"nnz({sym[1]}_{''.join(sym[2])})"


@dataclass(frozen=True)
class Monomial:
    """A product of symbols with integer (possibly negative) exponents; sorted, no zeros."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    powers: tuple[tuple[Symbol, int], ...] = ()

    @staticmethod
    def of(powers: Mapping[Symbol, int]) -> Monomial:
        """Build from a mapping symbol -> exponent (zeros dropped)."""
        return Monomial(tuple(sorted((s, e) for s, e in powers.items() if e != 0)))

    def __mul__(self, other: Monomial) -> Monomial:
        acc = dict(self.powers)
        for s, e in other.powers:
            acc[s] = acc.get(s, 0) + e
        return Monomial.of(acc)

    def __truediv__(self, other: Monomial) -> Monomial:
        return self * Monomial(tuple((s, -e) for s, e in other.powers))

    def evaluate(self, env: Mapping[Symbol, float]) -> float:
        """The value with every symbol taken from ``env`` (KeyError naming a missing one)."""
        value = 1.0
        for s, e in self.powers:
            if s not in env:
                raise KeyError(f"no value for {symbol_name(s)}")
            value *= float(env[s]) ** e
        return value

    def __str__(self) -> str:
        if not self.powers:
            return "1"
        num = [symbol_name(s) + (f"^{e}" if e > 1 else "") for s, e in self.powers if e > 0]
        den = [symbol_name(s) + (f"^{-e}" if e < -1 else "") for s, e in self.powers if e < 0]
        text = "*".join(num) if num else "1"
        if den:
            text += "/" + (den[0] if len(den) == 1 else "(" + "*".join(den) + ")")
        return text


@dataclass(frozen=True)
class Poly:
    """A sum of monomials with positive integer coefficients (the empty sum is 0)."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    terms: tuple[tuple[Monomial, int], ...] = ()

    @staticmethod
    def of(terms: Iterable[tuple[Monomial, int]]) -> Poly:
        """Sum up ``(monomial, coefficient)`` pairs into canonical form."""
        acc: dict[Monomial, int] = {}
        for m, c in terms:
            acc[m] = acc.get(m, 0) + c
        return Poly(tuple(sorted(((m, c) for m, c in acc.items() if c), key=lambda t: t[0].powers)))

    def __add__(self, other: Poly) -> Poly:
        return Poly.of(self.terms + other.terms)

    @property
    def monomials(self) -> tuple[Monomial, ...]:
        """The distinct monomials."""
        return tuple(m for m, _ in self.terms)

    def evaluate(self, env: Mapping[Symbol, float]) -> float:
        """The value with concrete symbol values."""
        return sum(c * m.evaluate(env) for m, c in self.terms)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        return " + ".join((f"{c}*" if c != 1 else "") + str(m) for m, c in self.terms)


@dataclass(frozen=True)
class Assumptions:
    """The seed's assumptions about the symbols of one expression's operands."""

    __hash__ = cached_hash
    __getstate__ = fields_state

    operands: tuple[Operand, ...]

    def _log_coefficients(self, m: Monomial) -> dict[str, int]:
        """Minimum over the nnz symbols of log(m) as a linear form in the log dims (integer
        coefficients: the exponents are integers)."""
        powers = dict(m.powers)
        coef: dict[str, int] = {}
        for s, e in powers.items():
            if s[0] == "dim":
                coef[s[1]] = coef.get(s[1], 0) + e
        for o in self.operands:
            comp = [k for k, f in enumerate(o.levels) if f.sparse]
            b = {k: powers.get(nnz_symbol(o.name, o.indices[: k + 1]), 0) for k in comp}
            for u, idx in enumerate(o.indices):
                # log pos(c) = sum over u <= c of d_u; d_u = log N for a dense level, in [0, log N]
                # for a compressed one (the minimum takes the end its coefficient prefers).
                cu = sum(b[c] for c in comp if c >= u)
                if not o.levels[u].sparse or cu < 0:
                    coef[idx] = coef.get(idx, 0) + cu
        return coef

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 - frozen and hashable; pruning asks the same pairs again and again
    def monomial_le(self, small: Monomial, big: Monomial) -> bool:
        """True when ``small <= big`` for every value of the symbols the assumptions allow."""
        return all(v >= 0 for v in self._log_coefficients(big / small).values())

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 - as monomial_le: many candidates share a time
    def le(self, p: Poly, q: Poly) -> bool:
        """``p = O(q)``: each monomial of ``p`` is at most one of ``q`` (0 and constants are O(1))."""
        big = q.monomials or (Monomial(),)
        return all(any(self.monomial_le(m, b) for b in big) for m in p.monomials)

    def pointwise_le(self, p: Poly, q: Poly) -> bool:
        """``p <= q`` for every allowed value, shown by matching each unit term of ``p`` to its
        own unit term of ``q`` that bounds it (sound, not complete; lower-order terms count)."""
        ps = [m for m, c in p.terms for _ in range(c)]
        qs = [m for m, c in q.terms for _ in range(c)]
        if len(ps) > len(qs):
            return False
        owner: list[int | None] = [None] * len(qs)

        def place(k: int, seen: set[int]) -> bool:
            for j, qm in enumerate(qs):
                if j in seen or not self.monomial_le(ps[k], qm):
                    continue
                seen.add(j)
                if owner[j] is None or place(owner[j], seen):
                    owner[j] = k
                    return True
            return False

        return all(place(k, set()) for k in range(len(ps)))

    def equivalent(self, p: Poly, q: Poly) -> bool:
        """``p = Theta(q)`` in the sense of :meth:`le` both ways."""
        return self.le(p, q) and self.le(q, p)

    @functools.lru_cache(maxsize=1 << 14)  # noqa: B019 - as monomial_le: many candidates share a time
    def asymptotic(self, p: Poly) -> Poly:
        """``p`` without the monomials another of its monomials bounds, coefficients dropped."""
        ms = list(dict.fromkeys(p.monomials))
        keep = []
        for k, m in enumerate(ms):
            dominated = any(
                self.monomial_le(m, other) and (not self.monomial_le(other, m) or j < k)
                for j, other in enumerate(ms)
                if j != k
            )
            if not dominated:
                keep.append((m, 1))
        return Poly.of(keep)


@dataclass(frozen=True)
class Cost:
    """A schedule's symbolic cost: time and memory polynomials, loop and memory depths."""

    time: Poly
    memory: Poly
    loop_depth: int
    memory_depth: int

    def __str__(self) -> str:
        return f"time {self.time}, memory {self.memory}, loop depth {self.loop_depth}, memory depth {self.memory_depth}"


#: The per-loop context of a statement's count: the loop's index and the sparse operands read
#: inside it (the levels it can walk).
_Context = tuple[tuple[str, frozenset[str]], ...]


class _Sparse:
    """The sparse operands of one nest, hashed by identity (one object per operand tuple, see
    :func:`_sparse_of`): the per-loop memo keys on it without hashing the operands again."""

    __slots__ = ("operands",)

    def __init__(self, operands: tuple[Operand, ...]) -> None:
        self.operands = operands


@functools.lru_cache(maxsize=256)
def _sparse_of(operands: tuple[Operand, ...]) -> _Sparse:
    return _Sparse(tuple(o for o in operands if o.sparse))


#: a monomial's sorted ``(symbol, exponent)`` pairs: the memos add these up (cheap to hash)
_Powers = tuple[tuple[Symbol, int], ...]


@functools.lru_cache(maxsize=1 << 16)
def _statement_count(sparse: _Sparse, loops: _Context) -> _Powers:
    """Iterations of a statement nested in ``loops`` (uniform sparsity), as powers."""
    powers: dict[Symbol, int] = {}
    for index, _ in loops:
        powers[dim_symbol(index)] = powers.get(dim_symbol(index), 0) + 1
    for o in sparse.operands:
        walked = {index for index, reads in loops if o.name in reads}
        depth = 0
        while depth < len(o.indices) and o.indices[depth] in walked:
            depth += 1
        comp = [k for k in range(depth) if o.levels[k].sparse]
        if not comp:
            continue
        c = comp[-1]
        sym = nnz_symbol(o.name, o.indices[: c + 1])
        powers[sym] = powers.get(sym, 0) + 1
        for idx in o.indices[: c + 1]:
            powers[dim_symbol(idx)] = powers.get(dim_symbol(idx), 0) - 1
    return Monomial.of(powers).powers


def _add_terms(acc: dict[_Powers, int], sparse: _Sparse, body: tuple[Node, ...], loops: _Context) -> None:
    for node in body:
        if isinstance(node, Loop):
            for m, c in _loop_terms(sparse, node, loops):
                acc[m] = acc.get(m, 0) + c
        elif isinstance(node, Compute):
            m = _statement_count(sparse, loops)
            acc[m] = acc.get(m, 0) + 1


def _loop_terms(sparse: _Sparse, loop: Loop, loops: _Context) -> tuple[tuple[_Powers, int], ...]:
    """The statement counts inside ``loop`` under the enclosing ``loops``, memoized on the loop
    (enumerated schedules share their sub-nests)."""
    memo = loop.memo
    key = ("time", sparse, loops)
    found = memo.get(key)
    if found is None:
        acc: dict[_Powers, int] = {}
        names = loop.reads
        inner = (*loops, (loop.index, frozenset(o.name for o in sparse.operands if o.name in names)))
        _add_terms(acc, sparse, loop.body, inner)
        found = memo[key] = tuple(acc.items())
    return found


def _poly(acc: dict[_Powers, int]) -> Poly:
    """``Poly.of`` of summed-up powers (the same canonical form)."""
    return Poly(tuple(sorted(((Monomial(m), c) for m, c in acc.items() if c), key=lambda t: t[0].powers)))


def time_complexity(nest: Nest) -> Poly:
    """Innermost iterations of all statements of ``nest`` (a polynomial in the symbols)."""
    acc: dict[_Powers, int] = {}
    _add_terms(acc, _sparse_of(nest.operands), nest.body, ())
    return _poly(acc)


#: the code a statement compiles to (`minijit.sparseauto.codegen`'s innermost loops): "vector"
#: (its innermost loop is dense and every access with that index is dense with it last),
#: "strided" (dense with another stride), "scalar" (a walk, a sparse access, or no loop)
PATHS = ("vector", "strided", "scalar")


def statement_path(nest: Nest, c: Compute, inner: Loop | None) -> str:
    """The code path of statement ``c`` under its innermost loop ``inner`` (see `PATHS`)."""
    if inner is None:
        return "scalar"
    j = inner.index
    uses = [acc for acc in (c.out, *c.ins) if j in acc.indices]
    if not any(j in acc.indices for acc in c.ins):
        return "scalar"
    levels = {o.name: o for o in (*nest.operands, nest.output) if o.sparse}
    for acc in uses:
        o = levels.get(acc.tensor)
        if o is not None and (j not in o.indices or o.levels[o.indices.index(j)].sparse or o is not nest.output):
            return "scalar"  # a sparse operand's level, or a sampled output's compressed one
    return "vector" if all(acc.indices[-1] == j for acc in uses) else "strided"


def statement_counts(nest: Nest) -> tuple[tuple[Monomial, str], ...]:
    """Each statement's executions (uniform sparsity, as in :func:`time_complexity`) and its
    code path (:func:`statement_path`), in nest order."""
    sparse = _sparse_of(nest.operands)
    out: list[tuple[Monomial, str]] = []

    def visit(body: tuple[Node, ...], loops: _Context, inner: Loop | None) -> None:
        for node in body:
            if isinstance(node, Loop):
                reads = frozenset(o.name for o in sparse.operands if o.name in node.reads)
                visit(node.body, (*loops, (node.index, reads)), node)
            elif isinstance(node, Compute):
                out.append((Monomial(_statement_count(sparse, loops)), statement_path(nest, node, inner)))

    visit(nest.body, (), None)
    return tuple(out)


def _node_depth(node: Node) -> int | None:
    """The deepest statement's number of loops from ``node`` down (None: no statement)."""
    if isinstance(node, Loop):
        memo = node.memo
        if "depth" not in memo:
            inner = [d for d in map(_node_depth, node.body) if d is not None]
            memo["depth"] = 1 + max(inner) if inner else None
        return memo["depth"]
    return 0 if isinstance(node, Compute) else None


@functools.lru_cache(maxsize=1 << 12)
def _temp_powers(indices: tuple[str, ...]) -> _Powers:
    return Monomial.of({dim_symbol(i): 1 for i in indices}).powers


def memory_complexity(nest: Nest) -> Poly:
    """Total elements of the temporaries of ``nest`` (a scalar temporary counts 1)."""
    acc: dict[_Powers, int] = {}
    for t in nest.temps:
        m = _temp_powers(t.indices)
        acc[m] = acc.get(m, 0) + 1
    return _poly(acc)


def loop_depth(nest: Nest) -> int:
    """The deepest statement's number of enclosing loops."""
    return max(d for d in map(_node_depth, nest.body) if d is not None)


def memory_depth(nest: Nest) -> int:
    """The largest rank of a temporary (0 without temporaries or with scalars only)."""
    return max((len(t.indices) for t in nest.temps), default=0)


def cost(nest: Nest) -> Cost:
    """The symbolic :class:`Cost` of ``nest``."""
    return Cost(time_complexity(nest), memory_complexity(nest), loop_depth(nest), memory_depth(nest))
