"""x86-64 BRGEMM: ``C += sum_br A_br B_br`` (column-major, strides in elements).

``generate(m, n, k, br_size, ...)`` returns a Kernel
``void(const T* a, const T* b, T* c, int64_t lda, int64_t ldb, int64_t ldc,
int64_t br_stride_a, int64_t br_stride_b)`` with A M x K (``a[m + k*lda]``),
B K x N (``b[k + n*ldb]``, or ``b[n + k*ldb]`` with ``trans_b``), C M x N
(``c[m + n*ldc]``) and ``A_br = a + br*br_stride_a``.

Blocking (vector path, ``trans_a`` false): a block is ``mv`` vectors of M by
``nb`` columns of N held in ``mv*nb`` accumulators for all of K and BR, so C
is loaded and stored once per block. For every k the ``mv`` A vectors are
loaded and each B element is broadcast once (into a register, or as an EVEX
``{1toN}`` operand for single-vector blocks) and feeds ``mv`` FMAs:

    AVX-512: mv x nb = 4x6 (64x6 fp32, 32x6 fp64), remainders 3x8, 2x12, 1x20
    AVX2:    mv x nb = 2x6 (16x6 fp32, 8x6 fp64),  remainder 1x12

Loops, outermost first (unless ``n_outer``): M blocks (full, then one masked remainder block),
N blocks (full, then the narrower tail: `n_tail` splits a remainder too narrow to keep
the FMA pipes busy evenly with the last full block), BR, K unrolled by 4 (A rows at
``pa + {0, lda, 2lda, 3lda}``), then the K remainder. The last M vector of
the remainder block is loaded and stored under an opmask (AVX-512) or with
vmaskmov (AVX2), so nothing outside the matrices is touched.

Packed B (``b_panel``, with ``trans_b``): B comes in micro-panels of ``nb`` columns (the full
block's width, which every M block then uses), each ``k`` rows of ``ldb`` elements with the
columns adjacent (``b[j + k*ldb]``, ``ldb`` = nb), panel ``p`` at ``b + p*b_panel``: one
sequential B stream per block instead of one per column (`minijit.packing` writes it).
Fused touches (``zero_c``, ``relu_c``; the vector path with the BR loop inside the blocks): the
accumulators start at zero instead of loading C (a first touch ``zero``: C = A·B), and/or ReLU is
applied before the store (a last touch ``relu``), so C crosses the memory hierarchy once.

Packed A (``a_panel``): A comes in micro-panels of the full block's rows (``lda`` = those rows),
M block ``i`` at ``a + i*a_panel``: each block's A is one contiguous stream (few pages). In the
M-outer order each N block also prefetches (`A_NEXT_HINT`, a hint that never faults) its share of
the next M block's panel during its first K iterations (`next_panel_prefetch`), so the next block's
first N block finds its A in L2 instead of waiting on L3 or memory (Zen 3, 2048^3 fp32: +3.5 %).

N outermost (``n_outer``): the N blocks (full, then the tails) form the outer loop and each walks
every M block (the BLIS order), so C is read and written down its columns in sequential streams
the prefetchers keep ahead, the block's B columns stay in L1, and the call's A is re-read once per
N block (from L2 or L3: packed A panels, a block that fits the cache; `TensorOperation` decides).
The M-outer order keeps each A micro-panel in L1 over all of N instead, but touches C one block
``ldc`` apart at a time and waits on its misses: where K is small that costs up to half the time.

Copied A (``a_copy``): the kernel packs A itself. The first N block of each M block reads its A
rows from the caller's layout (``lda``, ``br_stride_a``) and also stores them into a 64-byte
aligned buffer on the stack (the M block's rows x every K and BR step, one column after the
other); the block's other N blocks read that buffer. The copy costs two stores per K row of one
block, which the FMAs hide, instead of a separate pass over A before the kernel runs.

One column (N = 1, no packed operand, ``a_copy`` or ``n_outer``): the kernel is `minijit.kernels.x86_64.gemv`'s, same
signature and result (any transposes; ``trans_c`` is then a strided y, and the fused touches apply).

``trans_a`` (``a[k + m*lda]``) and ``trans_c`` (``c[n + m*ldc]``) take a
simple scalar path (one vfmadd231ss/sd chain per element of C) that also
handles ``trans_b``.
"""

from __future__ import annotations

from asm.x86_64 import Assembler, Gpr, bcst, ptr
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi, xmm0, xmm1
from minijit.kernels.x86_64 import gemv
from minijit.kernels.x86_64.common import (
    LOG2,
    Frame,
    Partial,
    Target,
    brgemm_signature,
    build,
    check_flag,
    check_size,
    counted_loop,
    element_loops,
    emit_mask_table,
)
from minijit.runtime.kernel import Kernel

__all__ = ["generate", "blocking", "next_panel_prefetch", "MAX_SIZE"]

MAX_SIZE = 1 << 16
#: the largest stack buffer of a copied A (``a_copy``; panel rows x K x BR elements, bytes)
A_COPY_MAX_BYTES = 256 * 1024
#: the general purpose register that walks the copied A buffer while the first N block fills it
SCR = r15
#: the widest block of a kernel that copies A (``a_copy``): 3 B column groups of 5 (r12-r14), as
#: `SCR` is the fourth group's pointer; the AVX-512 one-vector remainder block (20 columns)
#: narrows to 15, so an M of 64k + 16 rows (80, 144 fp32) can copy A in the kernel too
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

# general purpose registers of the vector path
A_M, B_N, C_N = rdi, rsi, rdx  # A at the M block; B and C at the N block (br = 0)
LDA, LDB, LDC = rcx, r8, r9  # leading dimensions in bytes
LDA3, LDB3 = r10, r11  # 3 * lda, 3 * ldb
PA, KC, BRC = rax, rbx, rbp  # A pointer, K counter, BR counter
PB = (r12, r13, r14, r15)  # B column-group pointers (5 columns each) or the B row pointer (trans_b)
A_NEXT = r15  # the next A panel's prefetch pointer (free unless B has 4 column groups, or a_copy)


def blocking(
    m: int, isa: str, dtype: str = "fp32", *, uniform_nb: bool = False, a_copy: bool = False
) -> list[tuple[int, int, int, int]]:
    """The M blocks: ``(count, mv, nb, lanes in the last vector)`` for full blocks then the remainder
    (``uniform_nb``: the remainder block keeps the full block's ``nb``, as packed B panels need;
    ``a_copy``: at most `A_COPY_MAX_NB` columns, so a B column-group pointer never takes `SCR`)."""
    t = Target.of(dtype, isa)
    mv_full = max(NB[isa])
    mb = mv_full * t.vl
    out = []
    if m // mb:
        out.append((m // mb, mv_full, NB[isa][mv_full], t.vl))
    rem = m % mb
    if rem:
        mv = -(-rem // t.vl)
        out.append((1, mv, NB[isa][mv_full if uniform_nb else mv], rem - (mv - 1) * t.vl))
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
    """Columns of one packed B micro-panel (the full register block's ``nb``)."""
    return NB[isa][max(NB[isa])]


def panel_rows(isa: str, dtype: str = "fp32") -> int:
    """Rows of one packed A micro-panel (the full register block's M)."""
    t = Target.of(dtype, isa)
    return max(NB[isa]) * t.vl


def a_copy_bytes(k: int, br_size: int, isa: str, dtype: str = "fp32") -> int:
    """Bytes of the stack buffer an ``a_copy`` kernel fills: `panel_rows` x ``k`` x ``br_size``."""
    return panel_rows(isa, dtype) * Target.of(dtype, isa).es * k * br_size


def a_copy_fits(m: int, n: int, k: int, br_size: int, isa: str, dtype: str = "fp32", trans_b: bool = False) -> bool:
    """Whether ``generate(..., a_copy=True)`` can take this shape: the buffer is at most
    `A_COPY_MAX_BYTES` and `SCR` is not one of the B column-group pointers (five columns each)."""
    groups = 1 if trans_b else max(-(-nb // 5) for *_, nb, _ in blocking(m, isa, dtype, a_copy=True))
    return a_copy_bytes(k, br_size, isa, dtype) <= A_COPY_MAX_BYTES and PB.index(SCR) >= groups


def generate(
    m: int,
    n: int,
    k: int,
    br_size: int,
    trans_a: bool = False,
    trans_b: bool = False,
    trans_c: bool = False,
    dtype: str = "fp32",
    isa: str = "avx512",
    *,
    br_outer: bool | None = None,
    b_panel: int | None = None,
    a_panel: int | None = None,
    zero_c: bool = False,
    relu_c: bool = False,
    a_copy: bool = False,
    n_outer: bool = False,
) -> Kernel:
    """Generate the BRGEMM kernel (see the module docstring). Bad arguments raise ValueError.

    ``br_outer``: run the BR loop outside the M/N block loops (C blocks are loaded and stored
    once per BR step) instead of inside each block; ``None`` picks it when the A panels of one
    call exceed `BR_OUTER_BYTES` and each BR step has at least `BR_OUTER_MIN_K` rows of K, unless
    A is packed (``a_panel``: each block's A is one stream over every BR step; measured on a Zen
    host, 2048^3 fp32 in 256^3 x BR 8 calls: 74 GFLOPS with the BR loop outside, 85 inside).
    ``b_panel``: B is packed in micro-panels of `panel_width` columns, ``b_panel`` elements apart
    (needs ``trans_b`` and ``ldb`` = panel width at the call; see the module docstring).
    ``a_panel``: A is packed in micro-panels of `panel_rows` rows, ``a_panel`` elements apart
    (``lda`` = panel rows at the call; not with ``trans_a``).
    ``zero_c`` / ``relu_c``: C = A·B (C is not read) / C = relu(result), fused into the blocks
    (vector path only; the BR loop then stays inside the blocks).
    ``a_copy``: each M block's first N block copies its A rows into a stack buffer that the other
    N blocks read (see the module docstring; vector path, BR inside the blocks, not with
    ``a_panel``; `a_copy_fits` says which shapes can).
    ``n_outer``: N blocks outermost, each over every M block (see the module docstring; vector
    path, BR inside the blocks, not with ``a_copy``).
    """
    for name, value in (("m", m), ("n", n), ("k", k)):
        check_size(name, value, 1, MAX_SIZE)
    check_size("br_size", br_size, 1, 1 << 24)
    trans_a, trans_b, trans_c = (
        check_flag(nm, v) for nm, v in (("trans_a", trans_a), ("trans_b", trans_b), ("trans_c", trans_c))
    )
    t = Target.of(dtype, isa)
    if b_panel is not None:
        check_size("b_panel", b_panel, 1, (1 << 31) // 8)
        if not trans_b or trans_a or trans_c:
            raise ValueError("b_panel (packed B micro-panels) needs trans_b=True and trans_a = trans_c = False")
    zero_c, relu_c = check_flag("zero_c", zero_c), check_flag("relu_c", relu_c)
    a_copy, n_outer = check_flag("a_copy", a_copy), check_flag("n_outer", n_outer)
    one_column = n == 1 and a_panel is None and b_panel is None and not (a_copy or n_outer)
    if one_column:
        # one column: the GEMV kernel streams A with every lane busy (any transposes, fused touches)
        return gemv.generate(m, k, br_size, trans_a, trans_b, dtype, isa, trans_c=trans_c, zero_c=zero_c, relu_c=relu_c)
    if (zero_c or relu_c) and (trans_a or trans_c or br_outer):
        raise ValueError("zero_c / relu_c (fused touches) need the vector path (no trans_a, trans_c) and br_outer off")
    if a_panel is not None:
        check_size("a_panel", a_panel, 1, (1 << 31) // 8)
        if trans_a or trans_c:
            raise ValueError("a_panel (packed A micro-panels) needs trans_a = trans_c = False")
    if a_copy:
        if trans_a or trans_c or a_panel is not None or br_outer:
            raise ValueError(
                "a_copy (A copied by the kernel) needs trans_a = trans_c = False, no a_panel, br_outer off"
            )
        if not a_copy_fits(m, n, k, br_size, isa, dtype, trans_b):
            raise ValueError(
                f"a_copy: a {m}x{n}x{k} x BR {br_size} kernel would need {a_copy_bytes(k, br_size, isa, dtype)} B"
                f" of stack buffer (at most {A_COPY_MAX_BYTES}) or more B column pointers than leave {SCR} free"
            )
    if n_outer and (trans_a or trans_c or a_copy or br_outer):
        raise ValueError("n_outer (N blocks outermost) needs trans_a = trans_c = False, no a_copy, br_outer off")
    a = Assembler(name="brgemm")
    if trans_a or trans_c:
        _emit_scalar(a, t, m, n, k, br_size, trans_a, trans_b, trans_c)
    else:
        if br_outer is None:  # packed A panels hold every BR step's rows in one stream: BR stays inside
            big = m * k * br_size * t.es > BR_OUTER_BYTES
            inside = a_panel is not None or a_copy or zero_c or relu_c or n_outer
            br_outer = not inside and br_size > 1 and k >= BR_OUTER_MIN_K and big
        br_outer = bool(br_outer) and br_size > 1
        _emit_vector(a, t, m, n, k, br_size, trans_b, br_outer, b_panel, a_panel, zero_c, relu_c, a_copy, n_outer)
    flags = "".join(f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c)) if on)
    flags += "_bro" if br_outer and br_size > 1 and not (trans_a or trans_c) else ""
    flags += f"_bp{b_panel}" if b_panel is not None else ""
    flags += f"_ap{a_panel}" if a_panel is not None else ""
    flags += ("_z" if zero_c else "") + ("_r" if relu_c else "") + ("_ac" if a_copy else "")
    flags += "_no" if n_outer else ""
    return build(a, brgemm_signature(t.ctype), f"brgemm_{dtype}_{isa}_{m}x{n}x{k}_br{br_size}{flags}")


# -- vector path --------------------------------------------------------------------------------
def _emit_vector(
    a: Assembler,
    t: Target,
    m: int,
    n: int,
    k: int,
    br: int,
    trans_b: bool,
    br_outer: bool,
    b_panel: int | None,
    a_panel: int | None,
    zero_c: bool = False,
    relu_c: bool = False,
    a_copy: bool = False,
    n_outer: bool = False,
) -> None:
    es, vb = t.es, t.vbytes
    br_total, br = br, (1 if br_outer else br)  # `br`: BR steps inside one block
    blocks = blocking(m, t.isa, t.dtype, uniform_nb=b_panel is not None or n_outer, a_copy=a_copy)
    k_loops, k_rem = divmod(k, UNROLL)
    k_adv = k_loops * UNROLL  # rows the pointers advance per BR step (the remainder uses offsets)
    masked = t.isa == "avx2" and any(last < t.vl for *_, last in blocks)
    table = a.new_label("mask") if masked else None

    frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
    s_b, s_c, s_mc, s_nc, s_da, s_db = (frame.slot(x) for x in ("b", "c_m", "m_count", "n_count", "da", "db"))
    s_a0, s_c0 = frame.slot("a0"), frame.slot("c0")  # BR-outer: A_br and C bases; N-outer: A base
    s_next = frame.slot("a_next")  # packed A, M-outer: where the next N block's prefetch starts
    # bytes of one M block's packed A panel (every K row of every BR step): what the blocks prefetch
    a_next_bytes = 0 if a_panel is None or n_outer or br_outer or a_copy else a_panel * es
    s_bstep = {nb: frame.slot(f"b_step{nb}") for _, _, nb, _ in blocks}
    s_cstep = {nb: frame.slot(f"c_step{nb}") for _, _, nb, _ in blocks}
    # copied A: one M block's rows (the full block's vectors) for every K row of every BR step
    s_acopy = frame.buffer("a_copy", max(mv for _, mv, _, _ in blocks) * vb * k * br) if a_copy else None

    a_rows = (None, LDA, (LDA, 2), LDA3)  # A row k + kk: pa + a_rows[kk]
    b_offs = (None, LDB, (LDB, 2), LDB3, (LDB, 4))  # B column 5g + r: pb[g] + b_offs[r] (row kk with trans_b)

    def at(base: Gpr, off, disp: int = 0):
        if off is None:
            return base + disp
        reg, scale = off if isinstance(off, tuple) else (off, 1)
        return base + reg * scale + disp

    def b_elem(j: int, kk: int):
        if trans_b:
            return at(PB[0], b_offs[kk], j * es)
        g, r = divmod(j, 5)
        return at(PB[g], b_offs[r], kk * es)

    # prologue: strides to bytes, BR pointer deltas, per-block pointer steps
    frame.enter(a)
    for r in (LDA, LDB, LDC):
        a.shl(r, LOG2[es])
    a.lea(LDA3, ptr(LDA + LDA * 2))
    a.lea(LDB3, ptr(LDB + LDB * 2))
    a.mov(s_b, B_N)
    a.mov(s_c, C_N)
    if br > 1:
        # da = br_stride_a - k_adv*lda, db = br_stride_b - k_adv*(es | ldb)  (bytes)
        a.mov(rax, frame.arg(0))
        a.shl(rax, LOG2[es])
        a.imul(rbx, LDA, k_adv)
        a.sub(rax, rbx)
        a.mov(s_da, rax)
        a.mov(rax, frame.arg(1))
        a.shl(rax, LOG2[es])
        if trans_b:
            a.imul(rbx, LDB, k_adv)
            a.sub(rax, rbx)
        elif k_adv:
            a.sub(rax, k_adv * es)
        a.mov(s_db, rax)
    elif br_outer:  # da, db = the BR strides in bytes
        for i, slot in ((0, s_da), (1, s_db)):
            a.mov(rax, frame.arg(i))
            a.shl(rax, LOG2[es])
            a.mov(slot, rax)
        a.mov(s_a0, A_M)
        a.mov(s_c0, C_N)
    for nb in s_bstep:
        if not trans_b:
            a.imul(rax, LDB, nb)
            a.mov(s_bstep[nb], rax)
        a.imul(rax, LDC, nb)
        a.mov(s_cstep[nb], rax)

    def block(
        mv: int,
        nb: int,
        part: Partial | None,
        prefetch: bool = True,
        a_from: str = "a",
        a_next: tuple[int, int] = (0, 0),
    ) -> None:
        """One mv x nb block of C: load, BR x K FMAs, store (``prefetch``: the next nb columns of C
        are the next block's). ``a_from``: A is read from the caller's ``a`` ("a"), also stored into
        the copied-A buffer ("copy"), or read from that buffer ("buffer", ``mv * vb`` bytes a row).
        ``a_next``: the next A panel's lines prefetched from ``s_next`` on (`next_panel_prefetch`)."""
        col = mv * vb  # bytes of one K row of the copied A
        regs = t.vregs
        acc = [[regs[j * mv + i] for j in range(nb)] for i in range(mv)]
        av = regs[mv * nb : mv * nb + mv]
        embedded = t.isa == "avx512" and mv == 1
        bc = regs[mv * nb + mv : mv * nb + mv + (2 if t.isa == "avx512" else 1)]

        def vload(i: int, dst, addr) -> None:
            if part is not None and i == mv - 1:
                part.load(a, dst, addr)
            else:
                a.vmovups(dst, t.vmem(addr))

        def vstore(i: int, addr, src) -> None:
            if part is not None and i == mv - 1:
                part.store(a, addr, src)
            else:
                a.vmovups(t.vmem(addr), src)

        if zero_c:  # first touch zero: C is not read
            for j in range(nb):
                for i in range(mv):
                    getattr(a, t.v("vxor"))(acc[i][j], acc[i][j], acc[i][j])
        else:  # C block -> accumulators
            a.mov(PA, C_N)
            for j in range(nb):
                for i in range(mv):
                    vload(i, acc[i][j], PA + i * vb)
                if j < nb - 1:
                    a.add(PA, LDC)
        if prefetch:  # prefetch the next N block's C columns (a hint: never faults), hiding their miss
            if nb in s_cstep:
                a.mov(PA, C_N)
                a.add(PA, s_cstep[nb])
            else:
                a.imul(PA, LDC, nb)
                a.add(PA, C_N)
            for j in range(nb):  # every line of the column's rows, at any alignment of C
                for line in range(0, mv * vb, 64):
                    a.prefetcht0(ptr(PA + line))
                a.prefetcht0(ptr(PA + mv * vb - 1))
                if j < nb - 1:
                    a.add(PA, LDC)
        # A and B pointers
        a.mov(PA, s_acopy if a_from == "buffer" else A_M)
        if a_from == "copy":
            a.mov(SCR, s_acopy)
        a.mov(PB[0], B_N)
        if not trans_b:
            for g in range(1, -(-nb // 5)):
                a.lea(PB[g], ptr(PB[g - 1] + LDB * 4))
                a.add(PB[g], LDB)

        def k_step(kk: int) -> None:
            for i in range(mv):
                if a_from == "buffer":  # masked lanes were stored as zeros
                    a.vmovups(av[i], t.vmem(PA + kk * col + i * vb))
                    continue
                vload(i, av[i], at(PA, a_rows[kk], i * vb))
                if a_from == "copy":
                    a.vmovups(t.vmem(SCR + kk * col + i * vb), av[i])
            for j in range(nb):
                if embedded:
                    getattr(a, t.v("vfmadd231"))(acc[0][j], av[0], bcst(b_elem(j, kk)))
                    continue
                b = bc[j % len(bc)]
                getattr(a, "vbroadcastss" if es == 4 else "vbroadcastsd")(b, t.smem(b_elem(j, kk)))
                for i in range(mv):
                    getattr(a, t.v("vfmadd231"))(acc[i][j], av[i], b)

        # the next A panel's lines: `per_iter` in each of the first `pf_iters` K iterations of a BR step
        per_iter, pf_iters = a_next
        if pf_iters:
            a.mov(A_NEXT, s_next)

        def k_unrolled(pf: int = 0) -> None:
            for kk in range(UNROLL):
                k_step(kk)
                if kk < pf:  # one line of the next A panel, between the FMA groups
                    getattr(a, A_NEXT_HINT)(ptr(A_NEXT + kk * 64))
            if pf:
                a.add(A_NEXT, pf * 64)
            if a_from == "buffer":
                a.add(PA, UNROLL * col)
            else:
                a.lea(PA, ptr(PA + LDA * 4))
            if a_from == "copy":
                a.add(SCR, UNROLL * col)
            if trans_b:
                a.lea(PB[0], ptr(PB[0] + LDB * 4))
            else:
                for g in range(-(-nb // 5)):
                    a.add(PB[g], UNROLL * es)

        def br_step() -> None:
            counted_loop(a, KC, pf_iters, lambda: k_unrolled(per_iter), "k_pf")  # K, prefetching
            counted_loop(a, KC, k_loops - pf_iters, k_unrolled, "k")  # K, unrolled by 4
            for kk in range(k_rem):  # K remainder
                k_step(kk)
            if br > 1:  # next A_br, B_br (the copied A's rows run on: past the K remainder)
                if a_from != "buffer":
                    a.add(PA, s_da)
                elif k_rem:
                    a.add(PA, k_rem * col)
                if a_from == "copy" and k_rem:
                    a.add(SCR, k_rem * col)
                for g in range(1 if trans_b else -(-nb // 5)):
                    a.add(PB[g], s_db)

        counted_loop(a, BRC, br, br_step, "br")
        if pf_iters:
            a.mov(s_next, A_NEXT)
        if relu_c:  # last touch relu: max(0, x) + 0 (-0 -> +0, NaN kept), as the unary kernel
            zero = av[0]
            getattr(a, t.v("vxor"))(zero, zero, zero)
            for j in range(nb):
                for i in range(mv):
                    getattr(a, t.v("vmax"))(acc[i][j], zero, acc[i][j])
                    getattr(a, t.v("vadd"))(acc[i][j], acc[i][j], zero)
        # accumulators -> C block
        a.mov(PA, C_N)
        for j in range(nb):
            for i in range(mv):
                vstore(i, PA + i * vb, acc[i][j])
            if j < nb - 1:
                a.add(PA, LDC)

    def next_columns(w: int, c_ptr) -> None:
        """B_N and ``c_ptr`` (C's register or slot) ``w`` columns on: the next packed B panel (a
        full block), the next rows (trans_b: B rows are n), or ``w`` columns of ``ldb``."""
        if b_panel is not None:
            a.add(B_N, b_panel * es)
        elif trans_b:
            a.add(B_N, w * es)
        else:
            a.imul(PA, LDB, w)
            a.add(B_N, PA)
        a.imul(PA, LDC, w)
        a.add(c_ptr, PA)

    def n_blocks(mv: int, nb: int, part: Partial | None) -> None:
        """All N blocks of one M block: full nb-column blocks, then the narrower remainder."""
        a.mov(B_N, s_b)
        a.mov(C_N, s_c)

        full_count, widths = n_tail(n, nb, mv, b_panel is not None)
        # this M block's N blocks prefetch the next A panel between them (A_NEXT must be free)
        free = trans_b or -(-max([nb, *widths]) // 5) < len(PB)
        lines = next_panel_prefetch(a_next_bytes if free else 0, full_count + len(widths), br, k_loops)

        def full(a_from: str = "a") -> None:
            block(mv, nb, part, a_from=a_from, a_next=lines)
            if b_panel is not None:  # the next packed micro-panel
                a.add(B_N, b_panel * es)
            elif trans_b:
                a.add(B_N, nb * es)
            else:
                a.add(B_N, s_bstep[nb])
            a.add(C_N, s_cstep[nb])

        # copied A: the first block fills the buffer, the others read it
        first, rest = ("copy", "buffer") if a_copy else ("a", "a")
        if full_count and a_copy:
            full(first)
        counted_loop(a, s_nc, full_count - (1 if a_copy else 0), lambda: full(rest), "n")
        for i, w in enumerate(widths):
            more = i < len(widths) - 1
            block(mv, w, part, prefetch=more, a_from=first if full_count + i == 0 else rest, a_next=lines)
            if more:  # the next tail block
                next_columns(w, C_N)

    def m_blocks() -> None:
        for count, mv, nb, last in blocks:
            part = None
            if last < t.vl:
                part = Partial(t, last, maskreg=t.vregs[-1], table=table)
                part.setup(a, rax)

            def m_block(mv: int = mv, nb: int = nb, part: Partial | None = part) -> None:
                if a_next_bytes:  # the next M block's A panel starts one panel on
                    a.lea(rax, ptr(A_M + a_next_bytes))
                    a.mov(s_next, rax)
                n_blocks(mv, nb, part)
                a.add(A_M, mv * vb if a_panel is None else a_panel * es)  # next M block (or A panel)
                a.add(s_c, mv * vb)

            counted_loop(a, s_mc, count, m_block, "m")

    def n_outer_blocks() -> None:
        """N blocks outermost, each walking every M block: C is read and written down its columns,
        ``nb`` sequential streams, and the A block is re-read per N block (from L2)."""
        a.mov(s_a0, A_M)
        a.mov(B_N, s_b)
        full_count, widths = n_tail(n, blocks[0][2], blocks[0][1], b_panel is not None)

        def n_block(w: int) -> None:
            a.mov(A_M, s_a0)
            a.mov(C_N, s_c)
            for count, mv, _, last in blocks:
                part = None
                if last < t.vl:
                    part = Partial(t, last, maskreg=t.vregs[-1], table=table)
                    part.setup(a, rax)

                def m_step(mv: int = mv, part: Partial | None = part) -> None:
                    block(mv, w, part, prefetch=False)
                    a.add(A_M, mv * vb if a_panel is None else a_panel * es)  # next M block (or A panel)
                    a.add(C_N, mv * vb)

                counted_loop(a, s_mc, count, m_step, "m")
            next_columns(w, s_c)

        counted_loop(a, s_nc, full_count, lambda: n_block(blocks[0][2]), "n")
        for w in widths:
            n_block(w)

    if br_outer:

        def br_pass() -> None:
            a.mov(A_M, s_a0)
            a.mov(rax, s_c0)
            a.mov(s_c, rax)
            m_blocks()
            a.mov(rax, s_da)
            a.add(s_a0, rax)
            a.mov(rax, s_db)
            a.add(s_b, rax)

        counted_loop(a, BRC, br_total, br_pass, "br_outer")
    elif n_outer:
        n_outer_blocks()
    else:
        m_blocks()
    frame.leave(a)
    if table is not None:
        emit_mask_table(a, table)


# -- scalar path (trans_a / trans_c) ---------------------------------------------------------------
def _emit_scalar(a: Assembler, t: Target, m: int, n: int, k: int, br: int, ta: bool, tb: bool, tc: bool) -> None:
    """C[m,n] += sum A[m,k] B[k,n], one element at a time, any combination of transpositions."""
    es = t.es
    lda, ldb, ldc = rcx, r8, r9
    pa, pb, kc, brc = rax, rbx, rdi, rbp
    a_m, c_mn, b_n, c_n, mc, nc = r11, r10, r14, r15, r13, r12
    # element strides (bytes; an int is a constant, a register a leading dimension)
    sa_m, sa_k = (lda, es) if ta else (es, lda)
    sb_k, sb_n = (ldb, es) if tb else (es, ldb)
    sc_m, sc_n = (ldc, es) if tc else (es, ldc)

    frame = Frame(saved=[rbx, rbp, r12, r13, r14, r15])
    s_a, s_da, s_db = frame.slot("a"), frame.slot("da"), frame.slot("db")
    frame.enter(a)
    for r in (lda, ldb, ldc):
        a.shl(r, LOG2[es])
    a.mov(s_a, rdi)
    # BR deltas: br_stride - k * stride_k (bytes)
    for arg, stride, slot in ((0, sa_k, s_da), (1, sb_k, s_db)):
        a.mov(rax, frame.arg(arg))
        a.shl(rax, LOG2[es])
        if isinstance(stride, Gpr):
            a.imul(rbx, stride, k)
            a.sub(rax, rbx)
        else:
            a.sub(rax, k * es)
        a.mov(slot, rax)
    a.mov(b_n, rsi)
    a.mov(c_n, rdx)

    def k_step() -> None:
        getattr(a, t.s("vmov"))(xmm1, t.smem(pa))
        getattr(a, t.s("vfmadd231"))(xmm0, xmm1, t.smem(pb))
        a.add(pa, sa_k)
        a.add(pb, sb_k)

    def br_step() -> None:
        counted_loop(a, kc, k, k_step, "k")
        a.add(pa, s_da)
        a.add(pb, s_db)

    def element() -> None:
        getattr(a, t.s("vmov"))(xmm0, t.smem(c_mn))
        a.mov(pa, a_m)
        a.mov(pb, b_n)
        counted_loop(a, brc, br, br_step, "br")
        getattr(a, t.s("vmov"))(t.smem(c_mn), xmm0)

    # a_m, c_mn walk down the column of A and C; B and C move on by a column
    walk = [(a_m, s_a, sa_m), (c_mn, c_n, sc_m)]
    element_loops(a, (mc, m, "m"), (nc, n, "n"), element, walk, advance=[(b_n, sb_n), (c_n, sc_n)])
    frame.leave(a)
