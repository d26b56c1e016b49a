"""The blocking decisions of the x86-64 BRGEMM (`minijit.kernels.x86_64.brgemm`): register blocks
per ISA, the N tail, packed-panel geometry, the copied-A limits, the next-panel prefetch share and
when the BR loop runs outside the blocks. Sizes in elements unless a name says bytes."""

from __future__ import annotations

from minijit.kernels.x86_64.common import Target

__all__ = [
    "A_COPY_MAX_BYTES",
    "A_COPY_MAX_NB",
    "A_NEXT_HINT",
    "A_NEXT_PER_ITER",
    "B_GROUPS",
    "BR_OUTER_BYTES",
    "BR_OUTER_MIN_K",
    "MIN_CHAINS",
    "NB",
    "UNROLL",
    "a_copy_bytes",
    "a_copy_fits",
    "NB_OF",
    "blocking",
    "n_tail",
    "nb_table",
    "next_panel_prefetch",
    "panel_rows",
    "panel_width",
]

#: the largest stack buffer of a copied A (``a_copy``; panel rows x K x BR elements, bytes)
A_COPY_MAX_BYTES = 256 * 1024
#: B column-group pointers of the vector path (5 columns each); while the first N block of an
#: ``a_copy`` kernel fills the buffer, the last one walks it (`brgemm_vector.SCR`)
B_GROUPS = 4
#: the widest block of a kernel that copies A (``a_copy``): 3 B column groups of 5, as the fourth
#: group's pointer walks the buffer; the AVX-512 one-vector remainder block (20 columns) narrows
#: to 15, so an M of 64k + 16 rows (80, 144 fp32) can copy A in the kernel too
A_COPY_MAX_NB = 15
# BR loop outside the blocks when the A panels of one call (m*k*br elements) exceed this many bytes:
# a block then streams A over all of BR*K from L2/L3 once per N block; per BR step the A_br/B_br
# blocks stay in L2 and the C round trip costs one load+store per k rows.
BR_OUTER_BYTES = 64 * 1024
BR_OUTER_MIN_K = 32
UNROLL = 4
#: packed A, M blocks outermost: the hint each N block uses to prefetch its share of the next M
#: block's A panel (the next block's first N block would otherwise wait on it from L3 or memory),
#: at most `A_NEXT_PER_ITER` lines per unrolled K iteration, walked by `A_NEXT`
A_NEXT_HINT = "prefetcht1"
A_NEXT_PER_ITER = 2
#: independent accumulators (FMA chains) that keep two 4-cycle-latency FMA pipes busy
MIN_CHAINS = 8
# accumulator block (vectors of M -> columns of N)
NB = {"avx512": {4: 6, 3: 8, 2: 12, 1: 20}, "avx2": {2: 6, 1: 12}}
#: blocks of a dtype whose multiply-add needs other registers: int64 on AVX2 keeps two accumulators
#: per output vector (`minijit.kernels.x86_64.muladd`), one vector of M by the same 6 columns
NB_OF = {("avx2", "s64"): {1: 6}}


def nb_table(isa: str, dtype: str) -> dict[int, int]:
    """The register blocks (vectors of M -> columns of N) of ``dtype`` on ``isa``."""
    return NB_OF.get((isa, dtype), NB[isa])


def blocking(
    m: int, isa: str, dtype: str = "fp32", *, uniform_nb: bool = False, a_copy: bool = False
) -> list[tuple[int, int, int, int]]:
    """The M blocks: ``(count, mv, nb, lanes in the last vector)`` for full blocks then the remainder
    (``uniform_nb``: the remainder block keeps the full block's ``nb``, as packed B panels need;
    ``a_copy``: at most `A_COPY_MAX_NB` columns, so the last B column-group pointer stays free)."""
    t = Target.of(dtype, isa, ints=True)
    nbs = nb_table(isa, t.dtype)
    mv_full = max(nbs)
    mb = mv_full * t.vl
    out = []
    if m // mb:
        out.append((m // mb, mv_full, nbs[mv_full], t.vl))
    rem = m % mb
    if rem:
        mv = -(-rem // t.vl)
        out.append((1, mv, nbs[mv_full if uniform_nb else mv], rem - (mv - 1) * t.vl))
    if a_copy:
        out = [(count, mv, min(nb, A_COPY_MAX_NB), last) for count, mv, nb, last in out]
    return out


def n_tail(n: int, nb: int, mv: int, panels: bool = False) -> tuple[int, list[int]]:
    """The N blocks of one M block: ``(count of full nb-column blocks, widths of the tail blocks)``.

    A remainder narrower than `MIN_CHAINS` accumulators (``mv * width``: two FMA pipes of 4-cycle
    latency need 8 independent chains to stay busy) is merged with the last full block and the two
    split evenly (6 + 2 -> 4 + 4 on AVX2), unless B is in packed ``nb``-column panels (``panels``)."""
    count, rem = divmod(n, nb)
    if not rem:
        return count, []
    if panels or not count or mv * rem >= MIN_CHAINS:
        return count, [rem]
    both = nb + rem
    return count - 1, [-(-both // 2), both // 2]


def next_panel_prefetch(panel_bytes: int, n_blocks: int, br: int, k_loops: int) -> tuple[int, int]:
    """How each of an M block's ``n_blocks`` N blocks prefetches its share of the next M block's
    packed A panel (``panel_bytes``): ``(lines per unrolled K iteration, iterations of each BR step
    that prefetch)``, at most `A_NEXT_PER_ITER` lines an iteration (a panel too large for that is
    prefetched in part); ``(0, 0)`` when there is nothing to prefetch or no K loop to hide it in."""
    if panel_bytes <= 0 or n_blocks <= 0 or k_loops <= 0 or A_NEXT_PER_ITER <= 0:
        return 0, 0
    lines = -(-panel_bytes // (64 * n_blocks))  # this N block's share, in cache lines
    per_iter = min(A_NEXT_PER_ITER, -(-lines // (br * k_loops)))
    return per_iter, min(k_loops, -(-lines // (br * per_iter)))


def panel_width(isa: str) -> int:
    """Columns of one packed B micro-panel (the full register block's ``nb``; every dtype's)."""
    width = NB[isa][max(NB[isa])]
    assert all(nbs[max(nbs)] == width for (i, _), nbs in NB_OF.items() if i == isa)
    return width


def panel_rows(isa: str, dtype: str = "fp32") -> int:
    """Rows of one packed A micro-panel (the full register block's M)."""
    t = Target.of(dtype, isa, ints=True)
    return max(nb_table(isa, t.dtype)) * t.vl


def a_copy_bytes(k: int, br_size: int, isa: str, dtype: str = "fp32") -> int:
    """Bytes of the stack buffer an ``a_copy`` kernel fills: `panel_rows` x ``k`` x ``br_size``."""
    return panel_rows(isa, dtype) * Target.of(dtype, isa, ints=True).es * k * br_size


def a_copy_fits(m: int, n: int, k: int, br_size: int, isa: str, dtype: str = "fp32", trans_b: bool = False) -> bool:
    """Whether ``generate(..., a_copy=True)`` can take this shape: the buffer is at most
    `A_COPY_MAX_BYTES` and the last of the `B_GROUPS` B column-group pointers (five columns
    each) is free to walk it."""
    groups = 1 if trans_b else max(-(-nb // 5) for *_, nb, _ in blocking(m, isa, dtype, a_copy=True))
    return a_copy_bytes(k, br_size, isa, dtype) <= A_COPY_MAX_BYTES and groups < B_GROUPS
