"""Stage 3 of the seed's pipeline: SMT-checked dominance under user constraints
(docs/seeds/002_sparseauto.txt section 5.2).

With ranges known at compile time (dimension extents, non-zero counts), a frontier bucket is
removed when another bucket's time and memory are no larger for every symbol value the
constraints and the seed's assumptions allow (the solver finds no counterexample). A solver
timeout or ``unknown`` keeps the bucket: the stage never over-prunes. Needs ``z3-solver`` (the
``sparse`` extra); without it the stage is skipped with a message.

Constraints map a one-letter index to its extent, an operand name to its stored values (the
positions of its deepest compressed level times its trailing dense extents), or
``"nnz(B_ij)"`` to the positions of that level; each value is an int or an inclusive
``(low, high)`` pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from minijit.sparseauto.complexity import Monomial, Poly, Symbol, dim_symbol, nnz_symbol, symbol_name
from minijit.sparseauto.nest import Operand
from minijit.sparseauto.prune import Bucket

#: Per-query solver timeout (milliseconds).
DEFAULT_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class SmtResult:
    """The buckets kept, whether the stage ran, and a one-line account."""

    kept: tuple[Bucket, ...]
    ran: bool
    message: str


def _import_z3():
    try:
        import z3
    except ImportError:
        return None
    return z3


def _range(key: str, value: object) -> tuple[float, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo = hi = value
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        lo, hi = value
    else:
        raise ValueError(f"constraint {key!r}: expected a number or a (low, high) pair, got {value!r}")
    for v in (lo, hi):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"constraint {key!r}: bounds must be non-negative numbers, got {value!r}")
    if lo > hi:
        raise ValueError(f"constraint {key!r}: low {lo} exceeds high {hi}")
    return float(lo), float(hi)


def parse_constraints(
    constraints: Mapping[str, object], operands: Iterable[Operand]
) -> dict[str, tuple[tuple[tuple[Symbol, int], ...], tuple[float, float]]]:
    """Check ``constraints`` against the operands; return key -> (monomial powers, range).

    Raises ValueError naming an unknown index, operand or level, or a malformed range.
    """
    if not isinstance(constraints, Mapping):
        raise TypeError(f"constraints must be a mapping, got {type(constraints).__name__}")
    operands = tuple(operands)
    indices = {i for o in operands for i in o.indices}
    level_names = {}
    for o in operands:
        for k, f in enumerate(o.levels):
            if f.sparse:
                sym = nnz_symbol(o.name, o.indices[: k + 1])
                level_names[symbol_name(sym)] = sym
    out = {}
    for key, value in constraints.items():
        rng = _range(key, value)
        if key in indices:
            out[key] = (((dim_symbol(key), 1),), rng)
        elif key in level_names:
            out[key] = (((level_names[key], 1),), rng)
        elif any(o.name == key for o in operands):
            o = next(o for o in operands if o.name == key)
            comp = [k for k, f in enumerate(o.levels) if f.sparse]
            if not comp:
                raise ValueError(f"constraint {key!r}: operand {key} is dense; constrain its indices instead")
            last = comp[-1]
            powers = [(nnz_symbol(o.name, o.indices[: last + 1]), 1)]
            powers += [(dim_symbol(i), 1) for i in o.indices[last + 1 :]]
            out[key] = (tuple(powers), rng)
        else:
            raise ValueError(
                f"constraint {key!r} names no index, operand or level (indices {sorted(indices)}, "
                f"levels {sorted(level_names)})"
            )
    return out


class _Model:
    def __init__(self, z3, operands: tuple[Operand, ...], parsed) -> None:
        self.z3 = z3
        self.vars: dict[Symbol, object] = {}
        self.base = []
        for o in operands:
            for i in o.indices:
                self.var(dim_symbol(i))
        for o in operands:
            prev = None  # z3 expression of the positions of the previous level
            for k, (idx, f) in enumerate(zip(o.indices, o.levels, strict=True)):
                n = self.var(dim_symbol(idx))
                if f.sparse:
                    p = self.var(nnz_symbol(o.name, o.indices[: k + 1]))
                    lower = prev if prev is not None else 1
                    upper = n if prev is None else prev * n
                    self.base += [p >= lower, p <= upper]
                    prev = p
                else:
                    prev = n if prev is None else prev * n
        for powers, (lo, hi) in parsed.values():
            e = self.monomial(Monomial.of(dict(powers)))
            self.base += [e >= lo, e <= hi]

    def var(self, sym: Symbol):
        if sym not in self.vars:
            v = self.z3.Real(symbol_name(sym))
            self.vars[sym] = v
            self.base.append(v >= 1)
        return self.vars[sym]

    def monomial(self, m: Monomial):
        e = self.z3.RealVal(1)
        for s, k in m.powers:
            v = self.var(s)
            for _ in range(abs(k)):
                e = e * v if k > 0 else e / v
        return e

    def poly(self, p: Poly, denominator: Monomial):
        if not p.terms:
            return self.monomial(denominator)  # an empty memory counts as O(1)
        return self.z3.Sum([c * self.monomial(m * denominator) for m, c in p.terms])

    def le_everywhere(self, a: Bucket, b: Bucket, timeout_ms: int) -> bool:
        """True when a's time and memory are <= b's for every allowed value (proved unsat)."""
        den: dict[Symbol, int] = {}
        for p in (a.time, a.memory, b.time, b.memory):
            for m in p.monomials:
                for s, e in m.powers:
                    if e < 0:
                        den[s] = max(den.get(s, 0), -e)
        d = Monomial.of(den)
        worse = self.z3.Or(
            self.poly(a.time, d) > self.poly(b.time, d),
            self.poly(a.memory, d) > self.poly(b.memory, d),
        )
        s = self.z3.Solver()
        s.set("timeout", timeout_ms)
        s.add(*self.base)  # after building ``worse``: it may have added symbols and their bounds
        s.add(worse)
        return s.check() == self.z3.unsat


def smt_stage(
    bs: Iterable[Bucket],
    operands: Iterable[Operand],
    constraints: Mapping[str, object] | None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> SmtResult:
    """Stage 3: drop the buckets another bucket dominates under ``constraints``.

    Skipped (all buckets kept, ``ran`` False) without constraints or without z3. Constraints
    are checked before z3 is imported, so bad ones raise ValueError either way.
    """
    bs = tuple(bs)
    operands = tuple(operands)
    if not constraints:
        return SmtResult(bs, False, "SMT stage skipped: no constraints given")
    parsed = parse_constraints(constraints, operands)
    z3 = _import_z3()
    if z3 is None:
        return SmtResult(
            bs,
            False,
            "SMT stage skipped: z3 is not installed (pip install 'minijit[sparse]' or z3-solver)",
        )
    model = _Model(z3, operands, parsed)
    check = z3.Solver()
    check.add(*model.base)
    if check.check() == z3.unsat:
        raise ValueError(f"constraints {dict(constraints)!r} contradict each other or the operands' shapes")
    removed: set[int] = set()
    for k, b in enumerate(bs):
        for j, a in enumerate(bs):
            if j == k or j in removed:
                continue
            if model.le_everywhere(a, b, timeout_ms) and (j < k or not model.le_everywhere(b, a, timeout_ms)):
                removed.add(k)
                break
    kept = tuple(b for k, b in enumerate(bs) if k not in removed)
    return SmtResult(kept, True, f"SMT stage: {len(bs)} buckets -> {len(kept)} under {len(parsed)} constraints")
