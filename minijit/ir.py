"""Intermediate representation of a tensor operation (docs/seeds/004_mini_jit_backend.txt sections 5.1 and 5.5).

A tensor operation is a list of :class:`Dimension` objects, outermost first. Each dimension has a
type (c/m/n/k), an execution type (shared/seq/prim/undefined), a size and one stride per tensor
(``in0``, ``in1``, ``out``). Strides are in *elements*, not bytes; the element offset of an index
tuple ``(i_0, ..., i_{d-1})`` in a tensor is ``sum(i_j * stride_j)``.

The prim dims (last in the list) form the block handled by one primitive call. Primitives are
column-major: for GEMM, ``in0`` is A (M x K, ``a[m + k*lda]``), ``in1`` is B (K x N,
``b[k + n*ldb]``) and ``out`` is C (M x N, ``c[m + n*ldc]``); BRGEMM adds a batch-reduce K dim
(the *outer* of its two prim K dims in list order) with ``C += sum_br A_br B_br``.

Order of dims in a valid config: all shared dims, then seq/undefined dims, then prim dims. A config
without prim dims is valid too: its primitives are not identified yet (see
:func:`minijit.optimizer.identify_primitives`); :meth:`TensorConfig.validate_executable` rejects it.
"""

from __future__ import annotations

import enum
import math
import operator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from minijit.errors import SetupError, error_t

__all__ = [
    "dtype_t",
    "ptype_t",
    "dim_t",
    "exec_t",
    "Dimension",
    "TensorConfig",
    "PrimDims",
    "UNARY_PTYPES",
    "BINARY_PTYPES",
    "GEMM_PTYPES",
    "TOUCH_PTYPES",
    "offset_range",
]


class _NamedEnum(enum.Enum):
    """Enum whose members can also be looked up by name (case-insensitive), aliases included."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            member = cls.__members__.get(value.strip().lower())
            if member is not None:
                return member
        return None

    def __str__(self) -> str:
        return self.name


_NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64, "s32": np.int32, "s64": np.int64}


class dtype_t(_NamedEnum):  # noqa: N801 - mini_jit naming
    """Element data type."""

    fp32 = "fp32"
    fp64 = "fp64"
    s32 = "s32"  # int32, wrapping (the BRGEMM, zero and copy primitives of targets that take it)
    s64 = "s64"  # int64, wrapping

    @property
    def numpy(self) -> np.dtype:
        """The matching numpy dtype."""
        return np.dtype(_NUMPY_DTYPES[self.value])

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.numpy.itemsize

    @classmethod
    def from_numpy(cls, dtype: Any) -> dtype_t:
        """The dtype_t of a numpy dtype (raises SetupError(wrong_dtype) when unsupported)."""
        dt = np.dtype(dtype)
        for member in cls:
            if member.numpy == dt:
                return member
        raise SetupError(error_t.wrong_dtype, f"unsupported numpy dtype {dt}")


class ptype_t(_NamedEnum):  # noqa: N801
    """Primitive type. ``identity`` is an alias of ``copy``."""

    none = "none"
    zero = "zero"
    relu = "relu"
    copy = "copy"
    identity = "copy"  # alias
    gemm = "gemm"
    brgemm = "brgemm"
    add = "add"
    sub = "sub"
    mul = "mul"
    div = "div"
    min = "min"
    max = "max"


class dim_t(_NamedEnum):  # noqa: N801
    """Dimension type: C (appears in all tensors), M (in0, out), N (in1, out), K (in0, in1)."""

    c = "c"
    m = "m"
    n = "n"
    k = "k"


class exec_t(_NamedEnum):  # noqa: N801
    """Execution type of a dimension."""

    seq = "seq"
    shared = "shared"
    prim = "prim"
    undefined = "undefined"


UNARY_PTYPES = frozenset({ptype_t.zero, ptype_t.relu, ptype_t.copy})
BINARY_PTYPES = frozenset({ptype_t.add, ptype_t.sub, ptype_t.mul, ptype_t.div, ptype_t.min, ptype_t.max})
GEMM_PTYPES = frozenset({ptype_t.gemm, ptype_t.brgemm})
#: Primitives allowed as first/last touch (applied in place to the output block).
TOUCH_PTYPES = frozenset({ptype_t.none, ptype_t.zero, ptype_t.relu, ptype_t.copy})

_TENSORS = ("in0", "in1", "out")
#: Largest size, |stride|, product of sizes and element reach of a tensor: with 8-byte elements
#: byte offsets stay below 2**59, far inside the 63 bits of a signed 64-bit address difference.
MAX_EXTENT = 1 << 56


def _coerce_enum(cls: type[enum.Enum], value: Any, code: error_t, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        # canonical names, aliases next to what they stand for: "copy (alias identity)"
        aliases: dict[str, list[str]] = {}
        for name, member in cls.__members__.items():
            if name != member.name:
                aliases.setdefault(member.name, []).append(name)
        names = ", ".join(m.name + (f" (alias {', '.join(aliases[m.name])})" if m.name in aliases else "") for m in cls)
        raise SetupError(code, f"{what} {value!r} is not one of {names}") from None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


@dataclass(frozen=True)
class Dimension:
    """One loop dimension: type, execution type, size and strides (in elements) of in0, in1, out.

    Enum fields accept names (``Dimension("m", "seq", 32, 1, 0, 1)``); integers are normalized to
    ``int``. Sizes and stride rules are checked by :class:`TensorConfig`, which knows the index.
    """

    type: dim_t
    exec: exec_t
    size: int
    stride_in0: int
    stride_in1: int
    stride_out: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", _coerce_enum(dim_t, self.type, error_t.wrong_dimension, "dim type"))
        object.__setattr__(self, "exec", _coerce_enum(exec_t, self.exec, error_t.wrong_exec_type, "exec type"))
        for name in ("size", "stride_in0", "stride_in1", "stride_out"):
            value = _as_int(getattr(self, name))
            if value is not None:
                object.__setattr__(self, name, value)

    def stride(self, tensor: str) -> int:
        """Stride in ``"in0"``, ``"in1"`` or ``"out"``."""
        if tensor not in _TENSORS:
            raise ValueError(f"tensor must be one of {_TENSORS}, got {tensor!r}")
        return getattr(self, f"stride_{tensor}")

    @property
    def strides(self) -> tuple[int, int, int]:
        """``(stride_in0, stride_in1, stride_out)``."""
        return (self.stride_in0, self.stride_in1, self.stride_out)

    def with_(self, **changes: Any) -> Dimension:
        """A copy with fields replaced."""
        return replace(self, **changes)

    def __str__(self) -> str:
        return (
            f"{self.type.name}/{self.exec.name} size {self.size} "
            f"strides ({self.stride_in0}, {self.stride_in1}, {self.stride_out})"
        )


class PrimDims(NamedTuple):
    """Indices (into ``TensorConfig.dims``) of the prim dims by role; ``None`` where absent.

    GEMM/BRGEMM: m, n, k (and br for BRGEMM). Unary/binary: m is the prim dim with unit stride
    (in in0 for copy/relu, in out for zero and binary ops; the innermost prim dim otherwise), n the
    other one (``None`` for a single prim dim).
    """

    m: int | None = None
    n: int | None = None
    k: int | None = None
    br: int | None = None


def _dim_desc(i: int, d: Dimension) -> str:
    return f"dim {i} ({d})"


@dataclass(frozen=True)
class TensorConfig:
    """A validated tensor operation: dtype, first/main/last primitive and the dimension list.

    Construction validates everything (raising :class:`SetupError` whose message names the
    offending dimension index); instances are immutable, passes return new ones.
    """

    dtype: dtype_t
    prim_first: ptype_t
    prim_main: ptype_t
    prim_last: ptype_t
    dims: tuple[Dimension, ...]
    #: True when the optimizer swapped the operands (computing C^T = B^T A^T, m and n dims
    #: exchanged): ``execute`` then passes the caller's in1 as in0 and in0 as in1.
    inputs_swapped: bool = False
    _prim: PrimDims = field(init=False, repr=False, compare=False)

    # ----------------------------------------------------------------------------------------
    # construction and validation
    # ----------------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _coerce_enum(dtype_t, self.dtype, error_t.wrong_dtype, "dtype"))
        for name, what in (("prim_first", "first touch"), ("prim_main", "main"), ("prim_last", "last touch")):
            value = _coerce_enum(ptype_t, getattr(self, name), error_t.wrong_ptype, f"{what} primitive")
            object.__setattr__(self, name, value)
        dims = tuple(self.dims)
        for i, d in enumerate(dims):
            if not isinstance(d, Dimension):
                raise SetupError(error_t.wrong_dimension, f"dim {i} is not a Dimension: {d!r}", dim=i)
        object.__setattr__(self, "dims", dims)
        self._validate()
        object.__setattr__(self, "_prim", self._find_prim_roles())

    @classmethod
    def from_lists(
        cls,
        dtype: dtype_t | str,
        prim_first: ptype_t | str,
        prim_main: ptype_t | str,
        prim_last: ptype_t | str,
        dim_types: Any,
        exec_types: Any,
        dim_sizes: Any,
        strides_in0: Any,
        strides_in1: Any,
        strides_out: Any,
    ) -> TensorConfig:
        """Build from the seed's ``setup`` argument lists (same order); all lists must have equal length."""
        given = {
            "dim_types": dim_types,
            "exec_types": exec_types,
            "dim_sizes": dim_sizes,
            "strides_in0": strides_in0,
            "strides_in1": strides_in1,
            "strides_out": strides_out,
        }
        lists = {}
        for name, value in given.items():
            try:
                lists[name] = list(value)
            except TypeError:
                raise SetupError(error_t.wrong_length, f"{name} must be a list, got {value!r}") from None
        lengths = {name: len(v) for name, v in lists.items()}
        if len(set(lengths.values())) != 1:
            desc = ", ".join(f"{name}={n}" for name, n in lengths.items())
            raise SetupError(error_t.wrong_length, f"setup lists differ in length: {desc}")
        dims = []
        for i, row in enumerate(zip(*lists.values(), strict=True)):
            try:
                dims.append(Dimension(*row))
            except SetupError as e:
                raise SetupError(e.code, f"dim {i}: {e.message}", dim=i) from None
        return cls(dtype, prim_first, prim_main, prim_last, tuple(dims))

    def to_lists(self) -> tuple[list[dim_t], list[exec_t], list[int], list[int], list[int], list[int]]:
        """``(dim_types, exec_types, dim_sizes, strides_in0, strides_in1, strides_out)``."""
        return (
            [d.type for d in self.dims],
            [d.exec for d in self.dims],
            [d.size for d in self.dims],
            [d.stride_in0 for d in self.dims],
            [d.stride_in1 for d in self.dims],
            [d.stride_out for d in self.dims],
        )

    def with_dims(self, dims: Any, **changes: Any) -> TensorConfig:
        """A new (validated) config with another dimension list (and optionally other fields)."""
        return replace(self, dims=tuple(dims), **changes)

    def _fail(self, code: error_t, i: int, what: str) -> SetupError:
        return SetupError(code, f"{_dim_desc(i, self.dims[i])}: {what}", dim=i)

    def _validate(self) -> None:
        main = self.prim_main
        if main is ptype_t.none:
            raise SetupError(error_t.wrong_ptype, "main primitive must not be none")
        for name, p in (("first touch", self.prim_first), ("last touch", self.prim_last)):
            if p not in TOUCH_PTYPES:
                raise SetupError(
                    error_t.wrong_ptype, f"{name} primitive must be one of none, zero, relu, copy; got {p.name}"
                )
        gemm = main in GEMM_PTYPES
        for i, d in enumerate(self.dims):
            if _as_int(d.size) is None or d.size < 1:
                raise self._fail(error_t.wrong_size, i, f"size must be an integer >= 1, got {d.size!r}")
            for t in _TENSORS:
                if _as_int(d.stride(t)) is None:
                    raise self._fail(error_t.wrong_stride, i, f"stride_{t} must be an integer, got {d.stride(t)!r}")
            if d.type is dim_t.k and d.exec is exec_t.shared:
                raise self._fail(error_t.shared_k, i, "K dimensions must not be shared")
            # dim types allowed by the main primitive
            if d.type is dim_t.k and not gemm and main is not ptype_t.zero:
                raise self._fail(error_t.wrong_dimension, i, f"K dimensions need a GEMM/BRGEMM, not {main.name}")
            # strides consistent with the dim type
            if d.type is dim_t.k and d.stride_out != 0:
                raise self._fail(error_t.wrong_stride, i, f"a K dim must have stride_out 0, got {d.stride_out}")
            if d.type is not dim_t.k and d.size > 1 and d.stride_out == 0:
                raise self._fail(error_t.wrong_stride, i, "an output dim of size > 1 needs a nonzero stride_out")
            if gemm and d.type is dim_t.n and d.stride_in0 != 0:
                raise self._fail(error_t.wrong_stride, i, f"an N dim must have stride_in0 0, got {d.stride_in0}")
            if gemm and d.type is dim_t.m and d.stride_in1 != 0:
                raise self._fail(error_t.wrong_stride, i, f"an M dim must have stride_in1 0, got {d.stride_in1}")
            if main in UNARY_PTYPES and d.stride_in1 != 0:
                raise self._fail(
                    error_t.wrong_stride, i, f"unary ops have no in1: stride_in1 must be 0, got {d.stride_in1}"
                )
        self._validate_ranges()
        self._validate_out_overlap()
        self._validate_order()
        self._validate_prims()

    def _validate_ranges(self) -> None:
        """Sizes, strides and the offsets they reach stay far inside int64 (as byte offsets)."""
        for i, d in enumerate(self.dims):
            if d.size > MAX_EXTENT:
                raise self._fail(error_t.wrong_size, i, f"size must be at most 2**{MAX_EXTENT.bit_length() - 1}")
            for t in _TENSORS:
                if abs(d.stride(t)) > MAX_EXTENT:
                    raise self._fail(
                        error_t.wrong_stride, i, f"|stride_{t}| must be at most 2**{MAX_EXTENT.bit_length() - 1}"
                    )
        bits = MAX_EXTENT.bit_length() - 1
        total = 1
        for i, d in enumerate(self.dims):
            total *= d.size
            if total > MAX_EXTENT:
                raise self._fail(
                    error_t.wrong_size, i, f"the sizes of dims 0..{i} multiply to {total}, more than 2**{bits}"
                )
        for t in _TENSORS:
            lo = hi = 0
            for i, d in enumerate(self.dims):
                reach = (d.size - 1) * d.stride(t)
                lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
                if hi - lo > MAX_EXTENT:
                    raise self._fail(
                        error_t.wrong_stride,
                        i,
                        f"the strides of {t} (dims 0..{i}) reach {hi - lo} elements, more than 2**{bits}",
                    )

    def _validate_out_overlap(self) -> None:
        """Distinct output index tuples (over the C/M/N dims) must address distinct elements.

        Sufficient test first: sorted by |stride_out|, each dim's stride exceeds the reach of all
        smaller ones (every nested layout, padded or permuted or reversed, passes). Otherwise the
        offsets are enumerated when that is cheap; beyond that the layout is rejected.
        """
        outs = sorted((abs(d.stride_out), i) for i, d in enumerate(self.dims) if d.type is not dim_t.k and d.size > 1)
        reach = 0
        for s, i in outs:
            if s <= reach:
                break
            reach += (self.dims[i].size - 1) * s
        else:
            return
        sizes = [self.dims[j].size for _, j in outs]
        if math.prod(sizes) <= 1 << 20:
            offsets = np.zeros(1, dtype=np.int64)
            for _, j in outs:
                d = self.dims[j]
                offsets = (offsets[:, None] + np.arange(d.size, dtype=np.int64)[None, :] * d.stride_out).ravel()
            if np.unique(offsets).size == offsets.size:
                return
        raise self._fail(
            error_t.wrong_stride,
            i,
            f"stride_out {self.dims[i].stride_out} makes output elements overlap "
            "(two index tuples of the C/M/N dims reach the same element)",
        )

    def _validate_order(self) -> None:
        rank = {exec_t.shared: 0, exec_t.seq: 1, exec_t.undefined: 1, exec_t.prim: 2}
        for i in range(1, len(self.dims)):
            a, b = self.dims[i - 1].exec, self.dims[i].exec
            if rank[b] < rank[a]:
                raise self._fail(
                    error_t.wrong_exec_type,
                    i,
                    f"must not follow a {a.name} dim: dims are ordered shared, seq/undefined, prim",
                )

    def _validate_prims(self) -> None:
        prim = [i for i, d in enumerate(self.dims) if d.exec is exec_t.prim]
        if not prim:
            return  # primitives not identified yet
        main = self.prim_main
        types = [self.dims[i].type for i in prim]
        if main in GEMM_PTYPES:
            want = {dim_t.m: 1, dim_t.n: 1, dim_t.k: 1 if main is ptype_t.gemm else 2, dim_t.c: 0}
            seen: dict[dim_t, int] = dict.fromkeys(dim_t, 0)
            for i, t in zip(prim, types, strict=True):
                seen[t] += 1
                if seen[t] > want[t]:
                    raise self._fail(
                        error_t.wrong_dimension,
                        i,
                        f"{main.name} takes prim dims {self._want_desc(main)}; this prim {t.name} dim is one too many",
                    )
            for t, n in want.items():
                if seen[t] != n:
                    raise self._fail(
                        error_t.wrong_dimension,
                        prim[0],
                        f"{main.name} takes prim dims {self._want_desc(main)}; found {seen[t]} prim {t.name}",
                    )
            return
        if len(prim) > 2:
            raise self._fail(
                error_t.wrong_dimension, prim[0], f"{main.name} takes one or two prim dims, got {len(prim)}"
            )
        if main is ptype_t.zero:
            return
        for i, t in zip(prim, types, strict=True):
            if t is dim_t.k:
                raise self._fail(error_t.wrong_dimension, i, f"{main.name} takes prim dims of type c, m or n")

    @staticmethod
    def _want_desc(main: ptype_t) -> str:
        return "M, N, K" if main is ptype_t.gemm else "K(br), M, N, K"

    def _find_prim_roles(self) -> PrimDims:
        prim = [i for i, d in enumerate(self.dims) if d.exec is exec_t.prim]
        if not prim:
            return PrimDims()
        dims = self.dims
        if self.prim_main in GEMM_PTYPES:
            m = next(i for i in prim if dims[i].type is dim_t.m)
            n = next(i for i in prim if dims[i].type is dim_t.n)
            ks = [i for i in prim if dims[i].type is dim_t.k]
            if len(ks) == 2:
                return PrimDims(m=m, n=n, k=ks[1], br=ks[0])  # BR = the outer prim K
            return PrimDims(m=m, n=n, k=ks[0])
        # m: a prim dim the kernel can run with unit stride (in in0 for copy/relu, in out for zero,
        # in all three tensors for binary ops), dims of size > 1 first
        if self.prim_main in (ptype_t.copy, ptype_t.relu):
            tensors: tuple[str, ...] = ("in0",)
        elif self.prim_main is ptype_t.zero:
            tensors = ("out",)
        else:
            tensors = _TENSORS
        fits = [i for i in prim if all(dims[i].stride(t) == 1 for t in tensors)]
        unit = (
            [i for i in fits if dims[i].size > 1]
            or fits
            or [i for i in prim if dims[i].size == 1]
            or [i for i in prim if dims[i].stride(tensors[-1]) == 1]  # not runnable; named in setup's error
        )
        m = unit[0] if unit else prim[-1]
        rest = [i for i in prim if i != m]
        return PrimDims(m=m, n=rest[0] if rest else None)

    def validate_executable(self) -> None:
        """Raise SetupError unless the primitives are identified and no exec type is undefined."""
        for i, d in enumerate(self.dims):
            if d.exec is exec_t.undefined:
                raise self._fail(error_t.wrong_exec_type, i, "exec type undefined: run the optimizer first")
        if not self.prim_dims:
            raise SetupError(error_t.wrong_exec_type, "no prim dims: run identify_primitives first")

    # ----------------------------------------------------------------------------------------
    # queries
    # ----------------------------------------------------------------------------------------
    @property
    def prim(self) -> PrimDims:
        """Indices of the prim dims by role (see :class:`PrimDims`)."""
        return self._prim

    @property
    def shared_dims(self) -> tuple[Dimension, ...]:
        return tuple(d for d in self.dims if d.exec is exec_t.shared)

    @property
    def seq_dims(self) -> tuple[Dimension, ...]:
        """Seq and undefined dims (the sequential loops), in order."""
        return tuple(d for d in self.dims if d.exec in (exec_t.seq, exec_t.undefined))

    @property
    def prim_dims(self) -> tuple[Dimension, ...]:
        return tuple(d for d in self.dims if d.exec is exec_t.prim)

    @property
    def loop_dims(self) -> tuple[Dimension, ...]:
        """Every non-prim dim (shared, then seq), in order."""
        return tuple(d for d in self.dims if d.exec is not exec_t.prim)

    @property
    def first_prim(self) -> int:
        """Index of the first prim dim (``len(dims)`` when there is none)."""
        return next((i for i, d in enumerate(self.dims) if d.exec is exec_t.prim), len(self.dims))

    @property
    def has_prims(self) -> bool:
        return any(d.exec is exec_t.prim for d in self.dims)

    @property
    def uses_in0(self) -> bool:
        return self.prim_main is not ptype_t.zero

    @property
    def uses_in1(self) -> bool:
        return self.prim_main in GEMM_PTYPES or self.prim_main in BINARY_PTYPES

    def num_elements(self) -> int:
        """Product of all dim sizes (iterations of the full loop nest)."""
        return math.prod(d.size for d in self.dims)

    def flops(self) -> int:
        """Floating-point operations of the main primitive: 2 per multiply-add for GEMM/BRGEMM,
        1 per element for binary ops and ReLU, 0 for zero/copy (touches are not counted)."""
        n = self.num_elements()
        if self.prim_main in GEMM_PTYPES:
            return 2 * n
        if self.prim_main in BINARY_PTYPES or self.prim_main is ptype_t.relu:
            return n
        return 0

    def offset_range(self, tensor: str) -> tuple[int, int]:
        """See :func:`offset_range`."""
        return offset_range(self, tensor)

    def __str__(self) -> str:
        head = (
            f"TensorConfig {self.dtype.name}: first {self.prim_first.name}, "
            f"main {self.prim_main.name}, last {self.prim_last.name}"
            + (" (inputs swapped: in0 is the caller's in1)" if self.inputs_swapped else "")
        )
        cols = ("#", "type", "exec", "size", "in0", "in1", "out")
        rows = [cols] + [
            (str(i), d.type.name, d.exec.name, str(d.size), str(d.stride_in0), str(d.stride_in1), str(d.stride_out))
            for i, d in enumerate(self.dims)
        ]
        widths = [max(len(r[c]) for r in rows) for c in range(len(cols))]
        lines = [head] + ["  " + "  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join(lines)


def offset_range(config: TensorConfig | Any, tensor: str) -> tuple[int, int]:
    """Smallest and largest element offset (relative to the base element) reachable in ``tensor``.

    ``tensor`` is ``"in0"``, ``"in1"`` or ``"out"``; ``config`` a TensorConfig or a sequence of
    Dimensions. Negative strides give a negative minimum. An array of ``n`` elements with the base
    at element ``b`` is large enough iff ``b + lo >= 0`` and ``b + hi < n``.
    """
    dims = config.dims if isinstance(config, TensorConfig) else config
    lo = hi = 0
    for d in dims:
        reach = (d.size - 1) * d.stride(tensor)
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return lo, hi
