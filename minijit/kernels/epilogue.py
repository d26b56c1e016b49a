"""Fused epilogues: what a kernel does to its accumulator registers after its last product and
before it stores them, so the result crosses the memory hierarchy once.

An `Epilogue` is an immutable, validated tuple of operation names, each a registered `Kind`:

- ``relu``: ``x = max(x, 0) + 0`` on every accumulator element (``np.maximum(x, 0)``: NaN stays
  NaN, -0.0 gives +0.0). Elementwise: any GEMM-like kernel can apply it before its store; it is
  what a last touch ``relu`` (`minijit.ir.ptype_t.relu`) becomes where the kernel fuses it.
- ``online_softmax``: FlashAttention-2's unscaled online softmax on a tile of scores (rows of the
  first product ``S = Q Kᵀ``): the running row max ``m``, ``exp`` of the shifted scores, the
  running row sum ``l`` and the rescale of the second product's accumulator by
  ``exp(m_old - m_new)``. A row reduction with state carried across key tiles, so it cannot be
  combined with other operations and only a kernel built around it (the fused attention kernel,
  `minijit.kernels.x86_64.attention`) takes it.

The epilogue is a generator parameter and part of kernel cache keys: it is hashable, compares by
value, and prints as its canonical text (``str(Epilogue.RELU) == "relu"``, ``"none"`` for no
operation; `Epilogue.parse` reads that text back). Kernel names carry `Epilogue.tag` (``_r`` for
relu, nothing for none), so listings say which epilogue a kernel has.

Emission is per ISA, next to the kernels: `minijit.kernels.x86_64.common.emit_epilogue` and
`minijit.kernels.aarch64.common.emit_epilogue` apply the elementwise operations to a list of
accumulator registers; the online softmax's stages are emitted by the attention kernel itself.
A new fused operation is a new `Kind` here, its emission in each ISA's ``emit_epilogue``, and its
numpy semantics in `Epilogue.reference`; kernels that take ``epilogue`` need no new flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

__all__ = ["KINDS", "Epilogue", "Kind", "attention_softmax", "checked"]


@dataclass(frozen=True)
class Kind:
    """One epilogue operation: ``name``; ``tag``, its kernel-name suffix; ``elementwise``, each
    accumulator element on its own (fusable into any kernel's store); ``last_touch``, the last
    touch primitive (a `minijit.ir.ptype_t` name) it implements when fused, or None; ``state``,
    the per-row values a row reduction carries across tiles; ``stages``, what it emits, in order."""

    name: str
    tag: str
    elementwise: bool
    last_touch: str | None = None
    state: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in ("name", "tag"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.isidentifier():
                raise ValueError(f"Kind.{field} must be an identifier, got {value!r}")
        if self.elementwise and self.state:
            raise ValueError(f"Kind {self.name}: an elementwise operation carries no row state")


#: the registered operations, by name
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("relu", "r", elementwise=True, last_touch="relu", stages=("max0",)),
        Kind(
            "online_softmax",
            "osm",
            elementwise=False,
            state=("m", "l"),
            stages=("row_max", "exp", "row_sum", "rescale"),
        ),
    )
}


@dataclass(frozen=True)
class Epilogue:
    """The operations applied to a kernel's accumulators before its store, in order (``ops``:
    names of `KINDS`; empty: none). ValueError for an unknown or repeated name, or a row reduction
    next to other operations; TypeError for ``ops`` that is not a tuple of str."""

    ops: tuple[str, ...] = ()

    NONE: ClassVar[Epilogue]
    RELU: ClassVar[Epilogue]
    ONLINE_SOFTMAX: ClassVar[Epilogue]

    def __post_init__(self) -> None:
        if not isinstance(self.ops, tuple) or not all(isinstance(op, str) for op in self.ops):
            raise TypeError(f"Epilogue ops must be a tuple of str, got {self.ops!r}")
        unknown = [op for op in self.ops if op not in KINDS]
        if unknown:
            raise ValueError(f"epilogue: unknown operation(s) {unknown}; known: {sorted(KINDS)}")
        if len(set(self.ops)) != len(self.ops):
            raise ValueError(f"epilogue: an operation repeated in {self.ops}")
        if len(self.ops) > 1 and not self.elementwise:
            raise ValueError(f"epilogue: a row reduction ({self.ops}) cannot be combined with other operations")

    # -- what it is ------------------------------------------------------------------------------
    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The `Kind` of each operation, in order."""
        return tuple(KINDS[op] for op in self.ops)

    @property
    def elementwise(self) -> bool:
        """Every operation elementwise (True for none): a GEMM kernel can apply it before its store."""
        return all(k.elementwise for k in self.kinds)

    @property
    def tag(self) -> str:
        """The kernel-name suffix: ``_`` + each operation's tag ("" for none)."""
        return "".join(f"_{k.tag}" for k in self.kinds)

    def __bool__(self) -> bool:
        return bool(self.ops)

    def __str__(self) -> str:
        return "+".join(self.ops) if self.ops else "none"

    # -- conversions -----------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Epilogue:
        """The epilogue spelled ``text`` (`str` of an epilogue: "none", "relu", "a+b")."""
        if not isinstance(text, str):
            raise TypeError(f"epilogue must be an Epilogue or its text, got {text!r}")
        text = text.strip()
        if text in ("", "none"):
            return cls.NONE
        return cls(tuple(op.strip() for op in text.split("+")))

    @classmethod
    def of(cls, value: Epilogue | str | None) -> Epilogue:
        """``value`` as an `Epilogue`: itself, its text (`parse`), or None (none)."""
        if value is None:
            return cls.NONE
        if isinstance(value, Epilogue):
            return value
        return cls.parse(value)

    @classmethod
    def for_last_touch(cls, ptype: str) -> Epilogue | None:
        """The elementwise epilogue that fuses a last touch ``ptype`` (a `minijit.ir.ptype_t`
        name: "relu" -> `RELU`), or None where no operation implements it."""
        for k in KINDS.values():
            if k.elementwise and k.last_touch == ptype:
                return cls((k.name,))
        return None

    def require(self, allowed: tuple[str, ...] | frozenset[str], where: str) -> Epilogue:
        """Itself, or ValueError naming ``where`` if an operation is not in ``allowed``."""
        bad = [op for op in self.ops if op not in allowed]
        if bad:
            takes = sorted(allowed) or "none"
            raise ValueError(f"{where}: epilogue {self} not supported (operations it takes: {takes})")
        return self

    # -- semantics -------------------------------------------------------------------------------
    def reference(self, x: np.ndarray) -> np.ndarray:
        """The elementwise operations applied to ``x`` in numpy (a new array; for tests and
        reference paths). ValueError for a row reduction (it needs the attention's state)."""
        if not self.elementwise:
            raise ValueError(f"epilogue {self}: a row reduction has no elementwise reference")
        out = np.array(x, copy=True)
        for op in self.ops:
            if op == "relu":
                out = np.maximum(out, 0) + out.dtype.type(0)  # -0 -> +0 as the kernels
        return out


Epilogue.NONE = Epilogue()
Epilogue.RELU = Epilogue(("relu",))
Epilogue.ONLINE_SOFTMAX = Epilogue(("online_softmax",))


def attention_softmax(epilogue: Epilogue | str | None = Epilogue.ONLINE_SOFTMAX, softmax: bool = True) -> bool:
    """Whether a fused attention kernel has its softmax stage: the epilogue of its first product is
    ``epilogue`` (a `minijit.kernels.epilogue.Epilogue` or its text), the online softmax (the
    default) or none (the stage left out, as ``softmax=False``). ValueError for another epilogue,
    TypeError for a non-bool ``softmax`` or an epilogue of another type."""
    if not isinstance(softmax, bool):
        raise TypeError(f"softmax must be a bool, got {softmax!r}")
    return softmax and bool(checked(epilogue, Epilogue.ONLINE_SOFTMAX.ops, "attention"))


def checked(value: object, allowed: tuple[str, ...] | frozenset[str], where: str) -> Epilogue:
    """``value`` (an `Epilogue`, its text or None) as an epilogue of only the operations in
    ``allowed`` (what a generator emits), else ValueError / TypeError naming ``where``."""
    try:
        ep = Epilogue.of(value)  # type: ignore[arg-type]
    except TypeError as e:
        raise TypeError(f"{where}: epilogue must be an Epilogue or its text, got {value!r}") from e
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return ep.require(allowed, where)
