"""Optimizer passes over :class:`~minijit.ir.TensorConfig` (docs/seeds/004_mini_jit_backend.txt section 5.5).

Every pass is a pure function ``TensorConfig -> TensorConfig``: it never mutates its input and
always returns a new, validated config (equal to the input when nothing applies).
:func:`optimize` composes them in the seed's order: fuse -> split -> identify primitives -> reorder
-> create shared loops.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from minijit.ir import (
    BINARY_PTYPES,
    GEMM_PTYPES,
    Dimension,
    TensorConfig,
    dim_t,
    exec_t,
    ptype_t,
)

__all__ = [
    "swap_operands",
    "find_largest_multiple_of_divisor",
    "find_best_split",
    "fuse_dims",
    "split_dims",
    "identify_primitives",
    "reorder_dims",
    "limit_batch",
    "create_shared_loops",
    "thread_load",
    "optimize",
]


# ---------------------------------------------------------------------------------------------
# operand roles
# ---------------------------------------------------------------------------------------------
def swap_operands(config: TensorConfig) -> TensorConfig:
    """Give a GEMM/BRGEMM the roles its column-major kernels want.

    The kernels need an M dim with unit stride in the output. When the output has unit stride
    in an N dim but in no M dim (a row-major C, numpy's default layout) the operation is
    computed as C^T = B^T A^T: in0 and in1 exchange their strides, m and n dims exchange their
    types, and ``inputs_swapped`` flips so that ``execute`` exchanges the arrays. The same swap
    turns a strided row vector ``y = x B`` (M dims of size 1, no unit stride in out) into the
    column ``y^T = B^T x^T``, which the kernels take as one strided column (``trans_c`` with
    N = 1). Configs with prim dims, other primitives, and outputs already unit-stride in M are
    returned unchanged.
    """
    if config.prim_main not in GEMM_PTYPES or config.has_prims:
        return config

    def unit_out(t: dim_t) -> bool:
        return any(d.type is t and d.size > 1 and d.stride_out == 1 for d in config.dims)

    def size(t: dim_t) -> int:
        return math.prod(d.size for d in config.dims if d.type is t)

    strided_row = not unit_out(dim_t.n) and size(dim_t.m) == 1 and size(dim_t.n) > 1
    if unit_out(dim_t.m) or not (unit_out(dim_t.n) or strided_row):
        return config
    other = {dim_t.m: dim_t.n, dim_t.n: dim_t.m}
    dims = [
        d.with_(type=other.get(d.type, d.type), stride_in0=d.stride_in1, stride_in1=d.stride_in0) for d in config.dims
    ]
    return config.with_dims(dims, inputs_swapped=not config.inputs_swapped)


# ---------------------------------------------------------------------------------------------
# dimension splitting (docs/seeds/004_mini_jit_backend.txt section 5.5.2)
# ---------------------------------------------------------------------------------------------
def find_largest_multiple_of_divisor(
    divisor: int, size: int, max_size: int, min_size: int = 1
) -> tuple[int, int] | None:
    """Seed's ``findLargestMultipleOfDivisor``: the largest multiple ``l`` of ``divisor`` with
    ``l <= max_size`` and ``size % l == 0`` such that both ``size // l`` and ``l`` are ``>= min_size``.

    Returns ``(size // l, l)`` (outer, inner) or ``None``. ``l = 1`` (no split) is never returned.
    """
    if divisor <= 0 or size <= 0 or max_size <= 0 or min_size <= 0 or divisor > max_size or size < min_size:
        return None
    for l_m in range((max_size // divisor) * divisor, max(divisor, 2) - 1, -divisor):  # inner 1 is no split
        if size % l_m == 0:
            outer, inner = size // l_m, l_m
            if outer >= min_size and inner >= min_size:
                return outer, inner
    return None


def find_best_split(
    size: int, max_kernel_size: int, min_kernel_size: int = 1, dim_type: dim_t | str = dim_t.m
) -> tuple[int, int]:
    """Seed's ``findBestSplit``: split ``size`` into ``(outer, inner)`` with ``outer * inner == size``.

    M (and C) dims try inner sizes that are multiples of 16, 12, 8, then 2; N dims multiples of 4,
    then 2; K dims any divisor (the seed: "K can be chosen freely"). The first divisor that gives a
    split with ``inner <= max_kernel_size`` and both parts ``>= min_kernel_size`` wins, with the
    largest such inner size. Returns ``(1, size)`` when there is none.

    Example (the seed's code): ``find_best_split(1600, 1024, 16) == (20, 80)``;
    ``find_best_split(1600, 32, 16) == (50, 32)``; without a minimum ``(2, 800)``.
    """
    dim_type = dim_t(dim_type)
    if dim_type in (dim_t.m, dim_t.c):
        divisors: Sequence[int] = (16, 12, 8, 2)
    elif dim_type is dim_t.n:
        divisors = (4, 2)
    else:
        divisors = (1,)
    for divisor in divisors:
        found = find_largest_multiple_of_divisor(divisor, size, max_kernel_size, min_kernel_size)
        if found is not None:
            return found
    return 1, size


#: rows of the widest register-block vector (AVX-512 fp32 lanes): a GEMM kernel computes an M
#: block in whole vectors (the last one masked), so rows past a multiple of this are lanes wasted
ROW_GRANULE = 16


def split_rows(size: int, max_size: int, min_size: int = 1) -> tuple[int, int]:
    """``(outer, inner)`` for an M dim under a cache-model maximum (`split_dims`' ``max_sizes``):
    among the divisors ``inner <= max_size`` of ``size`` (``inner >= min_size`` where one is), the
    one with the fewest rows once every block is padded to `ROW_GRANULE` (the lanes the kernels
    compute), then the largest. Where ``size`` has a multiple of 16 that fits, that is the seed's
    choice too (`find_best_split`); elsewhere the seed's rule could take a block of 8 rows (104 =
    13 x 8 where 2 x 52 computes 128 rows instead of 208), or 3 blocks for 2 threads (102 = 3 x 34).
    Returns ``(1, size)`` when no divisor fits."""
    fits = [d for d in range(2, min(size, max_size) + 1) if size % d == 0]  # inner 1 is no split
    wide = [d for d in fits if d >= min_size] or fits
    if not wide:
        return 1, size
    inner = min(wide, key=lambda d: (size // d * -(-d // ROW_GRANULE) * ROW_GRANULE, -d))
    return size // inner, inner


def _first_prim(dims: Sequence[Dimension]) -> int:
    return next((i for i, d in enumerate(dims) if d.exec is exec_t.prim), len(dims))


def split_dims(
    config: TensorConfig,
    max_kernel_size: int,
    min_kernel_size: int = 1,
    max_sizes: Mapping[dim_t, int] | None = None,
) -> TensorConfig:
    """Split every dim larger than ``max_kernel_size`` (seed's ``splitDimensions``).

    A dim of size ``outer * inner`` (from :func:`find_best_split`) keeps its place and exec type
    with size ``inner``; a new dim of size ``outer`` and strides ``inner * stride`` is inserted
    right before it (before the prim block when the dim is prim; the outer part of a prim dim is
    seq). The outer part is checked again, so sizes shrink until they fit. When no split satisfies
    ``min_kernel_size`` the minimum is dropped (the seed's earlier rule) rather than leave a dim
    above the maximum; a dim without any fitting divisor (e.g. a large prime) stays as it is.

    ``max_sizes``: per dim type maxima (e.g. a `minijit.blocking.Blocking` from the cache model)
    that replace ``max_kernel_size`` for those types; their outer parts may be smaller than
    ``min_kernel_size`` (a K loop of 2 blocks is fine), only the inner part keeps the minimum.
    An M dim under such a maximum splits by `split_rows` (fewest padded rows).
    """
    if max_kernel_size < 1:
        raise ValueError(f"max_kernel_size must be >= 1, got {max_kernel_size}")
    max_sizes = dict(max_sizes or {})
    for t, v in max_sizes.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"max_sizes[{dim_t(t).name}] must be an int >= 1, got {v!r}")
    dims = list(config.dims)
    i = 0
    while i < len(dims):
        d = dims[i]
        limit = max_sizes.get(d.type, max_kernel_size)
        if d.size > limit:
            if d.type is dim_t.m and d.type in max_sizes:
                outer, inner = split_rows(d.size, limit, min_kernel_size)
            elif d.type in max_sizes:
                outer, inner = find_best_split(d.size, limit, 1, d.type)
                if inner < min_kernel_size:
                    outer, inner = find_best_split(d.size, limit, min_kernel_size, d.type)
            else:
                outer, inner = find_best_split(d.size, limit, min_kernel_size, d.type)
            if outer == 1 and min_kernel_size > 1:
                outer, inner = find_best_split(d.size, limit, 1, d.type)
            if outer > 1:
                new = Dimension(
                    d.type,
                    exec_t.seq if d.exec is exec_t.prim else d.exec,
                    outer,
                    d.stride_in0 * inner,
                    d.stride_in1 * inner,
                    d.stride_out * inner,
                )
                dims[i] = d.with_(size=inner)
                pos = _first_prim(dims) if d.exec is exec_t.prim else i
                dims.insert(pos, new)
                i = pos  # check the outer part again
                continue
        i += 1
    return config.with_dims(dims)


# ---------------------------------------------------------------------------------------------
# dimension fusion (docs/seeds/004_mini_jit_backend.txt section 5.5.4)
# ---------------------------------------------------------------------------------------------
def _fusable(inner: Dimension, outer: Dimension) -> bool:
    if inner.type is not outer.type or exec_t.prim in (inner.exec, outer.exec):
        return False
    loose = {exec_t.seq, exec_t.undefined}
    if inner.exec is not outer.exec and not {inner.exec, outer.exec} <= loose:
        return False
    return all(outer.stride(t) == inner.size * inner.stride(t) for t in ("in0", "in1", "out"))


def fuse_dims(config: TensorConfig, min_kernel_size: int | None = None) -> TensorConfig:
    """Fuse pairs of dims X (inner) and Y (outer) of the same type with
    ``stride(Y) == |X| * stride(X)`` in all three tensors into one dim of size ``|X| * |Y|`` and
    the strides of X, at X's position (seed's ``fuseDimensions``).

    Exec types must match (seq and undefined mix, giving seq); prim dims are never fused (that
    would change the primitive). With ``min_kernel_size`` only dims X smaller than it look for a
    partner (the seed's rule); with ``None`` every composable pair is fused. Repeats to a fixpoint.
    """
    dims = list(config.dims)
    changed = True
    while changed:
        changed = False
        for i in range(len(dims)):
            x = dims[i]
            if min_kernel_size is not None and x.size >= min_kernel_size:
                continue
            j = next((j for j in range(len(dims)) if j != i and _fusable(x, dims[j])), None)
            if j is None:
                continue
            y = dims[j]
            exec_ = x.exec if x.exec is y.exec else exec_t.seq
            dims[i] = x.with_(size=x.size * y.size, exec=exec_)
            del dims[j]
            changed = True
            break
    return config.with_dims(dims)


# ---------------------------------------------------------------------------------------------
# primitive identification (docs/seeds/004_mini_jit_backend.txt section 5.5.1)
# ---------------------------------------------------------------------------------------------
def _rank(stride: int) -> tuple[int, float]:
    """Sort key preferring unit stride, then the smallest nonzero magnitude (0 = absent: last)."""
    return (stride != 1, abs(stride) if stride else math.inf)


def _pick(dims: Sequence[Dimension], cands: Sequence[int], key: Callable[[Dimension], tuple]) -> int | None:
    """The candidate with the smallest key; dims of size > 1 first, later dims win ties."""
    best = None
    for i in cands:
        k = (dims[i].size == 1, *key(dims[i]), -i)
        if best is None or k < best[0]:
            best = (k, i)
    return None if best is None else best[1]


def _ranked(dims: Sequence[Dimension], cands: Sequence[int], key: Callable[[Dimension], tuple]) -> list[int | None]:
    """Candidates best first by the `_pick` order, then ``None`` (a size-1 dummy dim)."""
    return [*sorted(cands, key=lambda i: (dims[i].size == 1, *key(dims[i]), -i)), None]


def _unit(dims: Sequence[Dimension], i: int | None, tensor: str) -> bool:
    """A prim role the kernels can take with unit stride in ``tensor`` (size-1 dims: any stride)."""
    return i is None or dims[i].size == 1 or dims[i].stride(tensor) == 1


def _with_types(dims: Sequence[Dimension], t: dim_t) -> list[int]:
    return [i for i, d in enumerate(dims) if d.type is t]


def _dummy(t: dim_t) -> Dimension:
    return Dimension(t, exec_t.prim, 1, 0, 0, 0)


def identify_primitives(config: TensorConfig) -> TensorConfig:
    """Choose the prim dims when the config has none; undefined dims become seq
    (docs/seeds/004_mini_jit_backend.txt section 5.5.1).

    * GEMM/BRGEMM: prim M = the M dim with unit stride in in0 and out (in a one-column C, N of size
      1, an M dim strided in out when none has unit stride: a strided y); prim N = the N dim with
      the smallest strides in in1/out; prim K = the K dim with unit stride in in1. Another K dim (the
      one with the smallest strides) becomes the batch-reduce dim: a GEMM with a second K dim of
      size > 1 is promoted to BRGEMM, a BRGEMM without a second K is demoted to GEMM. Prim dims are
      ordered BR, M, N, K. A missing M, N or K is added as a size-1 prim dim with zero strides.
    * Unary (copy/relu): prim M = the unit-stride dim of in0; if its out stride is not 1 (a
      transposition) prim N = the unit-stride dim of out, else the dim with the next smallest in0
      stride. zero uses out strides only. Binary: prim M = unit stride in out (then in0, in1),
      prim N = the remaining dim with the smallest out stride. Prim dims are ordered N, M.

    Where no unit stride exists the smallest stride is taken; dims of size 1 are chosen last.
    Other dims keep their exec type (shared stays shared). A config that already has prim dims
    only gets its undefined dims set to seq.
    """
    dims = [d.with_(exec=exec_t.seq) if d.exec is exec_t.undefined else d for d in config.dims]
    main = config.prim_main
    if config.has_prims:
        return config.with_dims(dims)

    if main in GEMM_PTYPES:
        ks = _with_types(dims, dim_t.k)
        # the best-ranked (m, n, k) the BRGEMM kernel can take: unit stride of M in out, of M or K
        # (transposed A) in in0, of K or N (transposed B) in in1; size-1 dims and dummies always fit
        ranked = (
            _ranked(dims, _with_types(dims, dim_t.m), lambda d: (*_rank(d.stride_in0), *_rank(d.stride_out))),
            _ranked(dims, _with_types(dims, dim_t.n), lambda d: (abs(d.stride_out) + abs(d.stride_in1),)),
            _ranked(dims, ks, lambda d: (*_rank(d.stride_in1), *_rank(d.stride_in0))),
        )
        best = None
        for ranks in itertools.product(*(range(len(r)) for r in ranked)):
            m, n, k = (r[j] for r, j in zip(ranked, ranks, strict=True))
            one_column = n is None or dims[n].size == 1  # then a strided M in out is a strided y
            if not (
                (_unit(dims, m, "out") or one_column)
                and (_unit(dims, m, "in0") or _unit(dims, k, "in0"))
                and (_unit(dims, k, "in1") or _unit(dims, n, "in1"))
            ):
                continue
            dummies = sum(i is None or dims[i].size == 1 for i in (m, n, k))
            key = (dummies, not _unit(dims, m, "out"), sum(ranks), ranks)
            if best is None or key < best[0]:
                best = (key, (m, n, k))
        m, n, k = best[1]
        others = [i for i in ks if i != k]
        br = _pick(dims, others, lambda d: (abs(d.stride_in0) + abs(d.stride_in1),))
        if br is not None and main is ptype_t.gemm and dims[br].size == 1:
            br = None
        main = ptype_t.brgemm if br is not None else ptype_t.gemm
        roles: list[tuple[int | None, dim_t]] = [(m, dim_t.m), (n, dim_t.n), (k, dim_t.k)]
        if br is not None:
            roles.insert(0, (br, dim_t.k))
    else:
        cands = [i for i, d in enumerate(dims) if d.type is not dim_t.k]
        if main in BINARY_PTYPES:
            m_key = lambda d: (*_rank(d.stride_out), *_rank(d.stride_in0), *_rank(d.stride_in1))  # noqa: E731
            n_key = lambda d: (abs(d.stride_out),)  # noqa: E731
            fits = lambda m, n: all(_unit(dims, m, t) for t in ("in0", "in1", "out"))  # noqa: E731
        elif main is ptype_t.zero:
            m_key = lambda d: _rank(d.stride_out)  # noqa: E731
            n_key = lambda d: (abs(d.stride_out),)  # noqa: E731
            fits = lambda m, n: _unit(dims, m, "out")  # noqa: E731
        else:  # copy/relu: M unit in in0; unit in out too, or a transposition with N unit in out
            m_key = lambda d: (*_rank(d.stride_in0), *_rank(d.stride_out))  # noqa: E731
            n_key = lambda d: (abs(d.stride_in0),)  # noqa: E731
            fits = lambda m, n: _unit(dims, m, "in0") and (_unit(dims, m, "out") or _unit(dims, n, "out"))  # noqa: E731
        ranked = (_ranked(dims, cands, m_key), _ranked(dims, cands, n_key))
        best = None
        for ranks in itertools.product(*(range(len(r)) for r in ranked)):
            m, n = (r[j] for r, j in zip(ranked, ranks, strict=True))
            if (m is not None and m == n) or (m is None and n is not None) or not fits(m, n):
                continue
            key = (sum(i is None or dims[i].size == 1 for i in (m, n)), sum(ranks), ranks)
            if best is None or key < best[0]:
                best = (key, (m, n))
        m, n = best[1]
        fill = dims[m].type if m is not None else dim_t.c
        roles = [(n, fill), (m, fill)] if n is not None else [(m, fill)]

    chosen = {i for i, _ in roles if i is not None}
    prims = [dims[i].with_(exec=exec_t.prim) if i is not None else _dummy(t) for i, t in roles]
    loops = [d for i, d in enumerate(dims) if i not in chosen]
    loops = [d for d in loops if d.exec is exec_t.shared] + [d for d in loops if d.exec is not exec_t.shared]
    return config.with_dims(loops + prims, prim_main=main)


# ---------------------------------------------------------------------------------------------
# loop order and shared loops (docs/seeds/004_mini_jit_backend.txt section 5.5.3)
# ---------------------------------------------------------------------------------------------
def reorder_dims(config: TensorConfig) -> TensorConfig:
    """Order the seq dims by decreasing total stride ``|s_in0| + |s_in1| + |s_out|`` (stable), so
    the unit-/small-stride loops run innermost, next to the primitive (for the seed's GEMM layout:
    M, N, then K innermost, which keeps the C block hot across the K loop). Shared and prim dims
    keep their places. Any order of loops is legal: first/last touch depend only on all K indices
    being 0 / maximal, which holds regardless of the order.
    """
    dims = config.dims
    seq = [i for i, d in enumerate(dims) if d.exec in (exec_t.seq, exec_t.undefined)]
    order = sorted(seq, key=lambda i: -sum(abs(s) for s in dims[i].strides))
    out = list(dims)
    for slot, i in zip(seq, order, strict=True):
        out[slot] = dims[i]
    return config.with_dims(out)


def limit_batch(config: TensorConfig, max_br: int | None) -> TensorConfig:
    """Split a BR prim dim of more than ``max_br`` steps (None: no limit) into a seq K loop right
    outside the prims and a BR dim of its largest divisor up to ``max_br`` (a prime BR of 7 under a
    cap of 4 becomes 7 calls of one step). Each call then re-reads fewer K rows of B per register
    block of M (`minijit.blocking.LLC_B_SHARE`); C is read and written once per call, so once per
    K loop iteration instead of once in all.
    """
    if max_br is None:
        return config.with_dims(config.dims)
    if not isinstance(max_br, int) or isinstance(max_br, bool) or max_br < 1:
        raise ValueError(f"max_br must be a positive int or None, got {max_br!r}")
    br = config.prim.br if config.has_prims and config.prim_main in GEMM_PTYPES else None
    if br is None or config.dims[br].size <= max_br:
        return config.with_dims(config.dims)
    d = config.dims[br]
    inner = max(x for x in range(1, max_br + 1) if d.size % x == 0)
    outer = Dimension(dim_t.k, exec_t.seq, d.size // inner, *(s * inner for s in d.strides))
    dims = list(config.dims)
    dims[br] = d.with_(size=inner)
    dims.insert(_first_prim(dims), outer)
    return config.with_dims(dims)


def _smallest_divisor_at_least(size: int, need: int) -> int:
    for d in range(max(need, 1), size + 1):
        if size % d == 0:
            return d
    return size


def _shared_parts(size: int, cap: int) -> list[int]:
    """Sizes of a shared outer part of a dim of ``size``: its divisors from 2 up to ``cap``, and
    the whole dim (the search never needs more iterations than ``cap``; a dim of 2^40 costs no
    divisor scan beyond it)."""
    return [d for d in range(2, min(size, cap) + 1) if size % d == 0] + ([size] if size > cap else [])


def thread_load(iterations: int, threads: int) -> float:
    """Makespan of ``iterations`` equal iterations split statically over ``threads`` threads, in
    units of the perfectly balanced one: ``ceil(n / t) * t / n`` (1.0 = balanced; 5 iterations on
    2 threads: 1.2; fewer iterations than threads: ``t / n``, idle threads)."""
    return -(-iterations // threads) * threads / iterations


#: the shared-loop search stops adding dims once this many iterations per thread exist
MAX_SHARED_PER_THREAD = 64


def create_shared_loops(config: TensorConfig, thread_target: int) -> TensorConfig:
    """Mark seq (or undefined) M/N/C dims shared, outermost first, so that the shared iteration
    space splits evenly over ``thread_target`` threads (K dims are never shared).

    The seed marks dims until the product of the shared sizes reaches the target, which can leave
    threads idle at the end (5 iterations on 2 threads: the makespan of 3). Here the candidates are
    the first ``j`` eligible dims whole plus a shared outer part (any divisor) of the next one; the
    one with the lowest `thread_load` wins, and among equal loads the fewest iterations (so a dim
    that already balances the threads is shared alone, as in the seed: 2-D sharing only where one
    dim leaves threads waiting, e.g. N 5 x M 2 on 2 threads). A split dim becomes a shared outer part
    and a seq inner part. Shared dims are then moved to the front (stable), as in the seed.

    A GEMM big enough (`MIN_FLOPS_PER_PIECE` per iteration) is given more shared iterations, up
    to `PIECES_PER_THREAD` per thread among the equally balanced plans: the native team runs each
    thread's range in pieces that an idle thread can take over, so a thread slowed mid-call (a
    busy or shared core) no longer holds up the whole call.
    """
    if thread_target < 1:
        raise ValueError(f"thread_target must be >= 1, got {thread_target}")
    dims = list(config.dims)
    base = math.prod(d.size for d in dims if d.exec is exec_t.shared)
    eligible = [
        i
        for i, d in enumerate(dims)
        if d.exec in (exec_t.seq, exec_t.undefined) and d.type is not dim_t.k and d.size > 1
    ]
    target = _shared_target(config, thread_target)

    def key(iterations: int) -> tuple[float, bool, int]:
        # balanced first; then the most iterations up to `target`, else the fewest beyond it
        over = iterations > target
        return thread_load(iterations, thread_target), over, iterations if over else -iterations

    best_key, best_plan, best_iterations = key(base), (0, 1), base
    whole = base
    for j, i in enumerate(eligible):
        if whole >= thread_target * MAX_SHARED_PER_THREAD or (best_key[0] == 1.0 and best_iterations >= target):
            break
        for part in _shared_parts(dims[i].size, -(-thread_target * MAX_SHARED_PER_THREAD // whole)):
            k = key(whole * part)
            if k < best_key:
                best_key, best_plan, best_iterations = k, (j, part), whole * part
        whole *= dims[i].size
    taken, part = best_plan
    out: list[Dimension] = []
    for i, d in enumerate(dims):
        rank = eligible.index(i) if i in eligible else None
        if rank is None or rank > taken or (rank == taken and part == 1):
            out.append(d)
        elif rank < taken or part == d.size:
            out.append(d.with_(exec=exec_t.shared))
        else:
            inner = d.size // part
            strides = (d.stride_in0 * inner, d.stride_in1 * inner, d.stride_out * inner)
            out += [Dimension(d.type, exec_t.shared, part, *strides), d.with_(size=inner)]
    threads = best_iterations
    if threads < thread_target and config.prim_main in GEMM_PTYPES and config.flops() >= MIN_FLOPS_PER_THREAD * 2:
        out = _share_prim_dim(out, thread_target, threads)
    out = [d for d in out if d.exec is exec_t.shared] + [d for d in out if d.exec is not exec_t.shared]
    return config.with_dims(out)


#: shared iterations per thread a big GEMM is given (each one a piece another thread can take)
PIECES_PER_THREAD = 4
#: ... as long as each iteration keeps at least this many flops (about 1 ms at 70 GFLOPS: a
#: piece's claim and call cost well under a microsecond)
MIN_FLOPS_PER_PIECE = 1 << 26


def _shared_target(config: TensorConfig, thread_target: int) -> int:
    """Shared iterations `create_shared_loops` aims at beyond balance: 1 (the fewest that balance)
    except for GEMMs big enough to run in pieces (`PIECES_PER_THREAD`, `MIN_FLOPS_PER_PIECE`)."""
    if thread_target < 2 or config.prim_main not in GEMM_PTYPES:
        return 1
    return max(1, min(thread_target * PIECES_PER_THREAD, config.flops() // MIN_FLOPS_PER_PIECE))


#: a prim dim split for threads keeps at least this many elements per thread
MIN_SHARED_PRIM = 32
#: ... and only when each of two threads gets at least this many flops (about 1 ms at 70 GFLOPS:
#: the pool's hand-off, tens of microseconds, must stay small against it; a 256^3 GEMM stays whole)
MIN_FLOPS_PER_THREAD = 1 << 26


def _share_prim_dim(dims: list[Dimension], thread_target: int, threads: int) -> list[Dimension]:
    """Too few loop iterations for the threads (e.g. one 512^3 GEMM prim): split the prim N dim,
    else the prim M dim, into a shared outer part (the smallest divisor reaching the target) and
    a prim inner part of at least ``MIN_SHARED_PRIM`` elements. Unchanged when none fits."""
    prims = [i for i, d in enumerate(dims) if d.exec is exec_t.prim]
    for t in (dim_t.n, dim_t.m):
        cands = [i for i in prims if dims[i].type is t]
        if not cands:
            continue
        i = cands[-1]
        d = dims[i]
        need = -(-thread_target // threads)
        part = _smallest_divisor_at_least(d.size, need)
        inner = d.size // part
        if part == d.size or inner < MIN_SHARED_PRIM:
            continue
        outer = Dimension(d.type, exec_t.shared, part, d.stride_in0 * inner, d.stride_in1 * inner, d.stride_out * inner)
        return [outer, *dims[:i], d.with_(size=inner), *dims[i + 1 :]]
    return dims


# ---------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------
# The one set of defaults used by `TensorOperation.setup`, `optimize` and `minijit bench`
# (dim sizes in elements): prims up to 256 per dim; a split keeps both parts >= 4 where it can.
DEFAULT_MAX_KERNEL_SIZE = 256
DEFAULT_MIN_KERNEL_SIZE = 4


def optimize(
    config: TensorConfig,
    thread_target: int = 1,
    max_kernel_size: int = DEFAULT_MAX_KERNEL_SIZE,
    min_kernel_size: int = DEFAULT_MIN_KERNEL_SIZE,
    max_sizes: Mapping[dim_t, int] | None = None,
    max_br: int | None = None,
) -> TensorConfig:
    """Run :func:`swap_operands`, then the passes in the seed's order: :func:`fuse_dims` (with
    ``min_kernel_size``), :func:`split_dims` (``max_sizes``: per dim type maxima, e.g. from
    `minijit.blocking`), :func:`identify_primitives`, :func:`reorder_dims`, then
    :func:`limit_batch` (``max_br``: the most BR steps per call, e.g. `Blocking.br`), and
    :func:`create_shared_loops`. The result has prim dims and no undefined exec types.

    GEMM/BRGEMM configs fuse by the seed's rule (only dims below ``min_kernel_size``); elementwise
    ones (copies, permutes, unary and binary ops) fuse every composable pair: that only removes
    loops and widens the primitive, and a permute's transposing tile then spans whole contiguous
    runs of both tensors instead of their innermost dims."""
    config = swap_operands(config)
    config = fuse_dims(config, min_kernel_size if config.prim_main in GEMM_PTYPES else None)
    config = split_dims(config, max_kernel_size, min_kernel_size, max_sizes)
    config = identify_primitives(config)
    config = reorder_dims(config)
    config = limit_batch(config, max_br)
    return create_shared_loops(config, thread_target)
