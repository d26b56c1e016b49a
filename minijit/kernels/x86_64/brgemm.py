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
Fused touches (``zero_c``, ``epilogue``; the vector path with the BR loop inside the blocks): the
accumulators start at zero instead of loading C (a first touch ``zero``: C = A·B), and/or an
elementwise epilogue (`minijit.kernels.epilogue`: relu, a last touch) is applied to them before
the store, so C crosses the memory hierarchy once.

Packed A (``a_panel``): A comes in micro-panels of the full block's rows (``lda`` = those rows),
M block ``i`` at ``a + i*a_panel``: each block's A is one contiguous stream (few pages). In the
M-outer order each N block also prefetches (`A_NEXT_HINT`, a hint that never faults) its share of
the next M block's panel during its first K iterations (`next_panel_prefetch`), so the next block's
first N block finds its A in L2 instead of waiting on L3 or memory.

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
simple scalar path (one vfmadd231ss/sd chain per element of C; integers: imul/add
on a general register) that also handles ``trans_b``.

Integer dtypes ``s32`` / ``s64`` (``T`` int32_t / int64_t): the same kernels with the multiply-add
of `minijit.kernels.x86_64.muladd` (wrapping as two's complement, numpy's integer einsum); the
blocks of `brgemm_plan.nb_table` (int64 on AVX2: one vector of M by 6 columns); no GEMV kernel
(a column is a 1-wide block) and no epilogue.
"""

from __future__ import annotations

from asm.x86_64 import Assembler, Gpr
from asm.x86_64.registers import r8, r9, r10, r11, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi, xmm0, xmm1
from minijit.kernels.epilogue import Epilogue
from minijit.kernels.x86_64 import brgemm_plan as plan
from minijit.kernels.x86_64 import gemv
from minijit.kernels.x86_64.brgemm_plan import *  # noqa: F403  (the blocking decisions are part of this interface)
from minijit.kernels.x86_64.brgemm_vector import SCR, VectorKernel
from minijit.kernels.x86_64.common import (
    LOG2,
    Frame,
    Target,
    brgemm_signature,
    build,
    check_epilogue,
    check_flag,
    check_size,
    counted_loop,
    element_loops,
)
from minijit.runtime.kernel import Kernel

__all__ = ["MAX_SIZE", "generate", *plan.__all__]

MAX_SIZE = 1 << 16


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
    epilogue: Epilogue | str | None = Epilogue.NONE,
    a_copy: bool = False,
    n_outer: bool = False,
) -> Kernel:
    """Generate the BRGEMM kernel (see the module docstring). Bad arguments raise ValueError.

    ``br_outer``: run the BR loop outside the M/N block loops (C blocks are loaded and stored
    once per BR step) instead of inside each block; ``None`` picks it when the A panels of one
    call exceed `BR_OUTER_BYTES` and each BR step has at least `BR_OUTER_MIN_K` rows of K, unless
    A is packed (``a_panel``: each block's A is one stream over every BR step).
    ``b_panel``: B is packed in micro-panels of `panel_width` columns, ``b_panel`` elements apart
    (needs ``trans_b`` and ``ldb`` = panel width at the call; see the module docstring).
    ``a_panel``: A is packed in micro-panels of `panel_rows` rows, ``a_panel`` elements apart
    (``lda`` = panel rows at the call; not with ``trans_a``).
    ``zero_c``: C = A·B (C is not read); ``epilogue`` (an elementwise `Epilogue`, or its text:
    "relu"): C = epilogue(result); both fused into the blocks (vector path only; the BR loop then
    stays inside the blocks).
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
    t = Target.of(dtype, isa, ints=True)
    if b_panel is not None:
        check_size("b_panel", b_panel, 1, (1 << 31) // 8)
        if not trans_b or trans_a or trans_c:
            raise ValueError("b_panel (packed B micro-panels) needs trans_b=True and trans_a = trans_c = False")
    zero_c, epilogue = check_flag("zero_c", zero_c), check_epilogue(epilogue, "brgemm")
    a_copy, n_outer = check_flag("a_copy", a_copy), check_flag("n_outer", n_outer)
    if t.is_int and epilogue:
        raise ValueError(f"brgemm: epilogue {epilogue} applies to float dtypes only, got dtype {dtype!r}")
    # (integers: the vector path's 1-column blocks; the GEMV kernel is float only)
    one_column = n == 1 and a_panel is None and b_panel is None and not (a_copy or n_outer or t.is_int)
    if one_column:
        # one column: the GEMV kernel streams A with every lane busy (any transposes, fused touches)
        touches = {"zero_c": zero_c, "epilogue": epilogue}
        return gemv.generate(m, k, br_size, trans_a, trans_b, dtype, isa, trans_c=trans_c, **touches)
    # (integers: the scalar path starts its sums at zero too, as one column's GEMV does for floats)
    scalar_zero = zero_c and t.is_int and (trans_a or trans_c) and not br_outer
    if (zero_c or epilogue) and (trans_a or trans_c or br_outer) and not scalar_zero:
        raise ValueError(
            f"zero_c / epilogue {epilogue} (fused touches) need the vector path (no trans_a, trans_c) and br_outer off"
        )
    if a_panel is not None:
        check_size("a_panel", a_panel, 1, (1 << 31) // 8)
        if trans_a or trans_c:
            raise ValueError("a_panel (packed A micro-panels) needs trans_a = trans_c = False")
    if a_copy:
        if trans_a or trans_c or a_panel is not None or br_outer:
            raise ValueError(
                "a_copy (A copied by the kernel) needs trans_a = trans_c = False, no a_panel, br_outer off"
            )
        if not plan.a_copy_fits(m, n, k, br_size, isa, dtype, trans_b):
            raise ValueError(
                f"a_copy: a {m}x{n}x{k} x BR {br_size} kernel would need {plan.a_copy_bytes(k, br_size, isa, dtype)} B"
                f" of stack buffer (at most {plan.A_COPY_MAX_BYTES}) or more B column pointers than leave {SCR} free"
            )
    if n_outer and (trans_a or trans_c or a_copy or br_outer):
        raise ValueError("n_outer (N blocks outermost) needs trans_a = trans_c = False, no a_copy, br_outer off")
    a = Assembler(name="brgemm")
    if trans_a or trans_c:
        _emit_scalar(a, t, m, n, k, br_size, trans_a, trans_b, trans_c, zero_c)
    else:
        if br_outer is None:  # packed A panels hold every BR step's rows in one stream: BR stays inside
            big = m * k * br_size * t.es > plan.BR_OUTER_BYTES
            inside = a_panel is not None or a_copy or zero_c or bool(epilogue) or n_outer
            br_outer = not inside and br_size > 1 and k >= plan.BR_OUTER_MIN_K and big
        br_outer = bool(br_outer) and br_size > 1
        VectorKernel(
            a, t, m, n, k, br_size, trans_b, br_outer, b_panel, a_panel, zero_c, epilogue, a_copy, n_outer
        ).emit()
    flags = "".join(f for f, on in (("_ta", trans_a), ("_tb", trans_b), ("_tc", trans_c)) if on)
    flags += "_bro" if br_outer and br_size > 1 and not (trans_a or trans_c) else ""
    flags += f"_bp{b_panel}" if b_panel is not None else ""
    flags += f"_ap{a_panel}" if a_panel is not None else ""
    flags += ("_z" if zero_c else "") + epilogue.tag + ("_ac" if a_copy else "")
    flags += "_no" if n_outer else ""
    return build(a, brgemm_signature(t.ctype), f"brgemm_{dtype}_{isa}_{m}x{n}x{k}_br{br_size}{flags}")


# -- scalar path (trans_a / trans_c) ---------------------------------------------------------------
def _emit_scalar(
    a: Assembler, t: Target, m: int, n: int, k: int, br: int, ta: bool, tb: bool, tc: bool, zero: bool = False
) -> None:
    """C[m,n] += sum A[m,k] B[k,n] (``zero``, integers: C = the sum), one element at a time, any
    combination of transpositions."""
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

    # the element's sum: xmm0 (float) or, for integers, a general register (wrapping imul/add)
    acc, tmp = (rdx, rsi) if es == 8 else (rdx.r32, rsi.r32)

    def k_step() -> None:
        if t.is_int:
            a.mov(tmp, t.smem(pa))
            a.imul(tmp, t.smem(pb))
            a.add(acc, tmp)
        else:
            getattr(a, t.s("vmov"))(xmm1, t.smem(pa))
            getattr(a, t.s("vfmadd231"))(xmm0, xmm1, t.smem(pb))
        a.add(pa, sa_k)
        a.add(pb, sb_k)

    # integers with both K strides constant (a dot product of contiguous runs): 4 K steps by
    # displacement per pointer step (imul reads memory; the sum's chain is one add per step)
    unit_k = t.is_int and not isinstance(sa_k, Gpr) and not isinstance(sb_k, Gpr)

    def k_four() -> None:
        for u in range(plan.UNROLL):
            a.mov(tmp, t.smem(pa + u * sa_k))
            a.imul(tmp, t.smem(pb + u * sb_k))
            a.add(acc, tmp)
        a.add(pa, plan.UNROLL * sa_k)
        a.add(pb, plan.UNROLL * sb_k)

    def br_step() -> None:
        if unit_k:
            counted_loop(a, kc, k // plan.UNROLL, k_four, "k4")
            counted_loop(a, kc, k % plan.UNROLL, k_step, "k")
        else:
            counted_loop(a, kc, k, k_step, "k")
        a.add(pa, s_da)
        a.add(pb, s_db)

    def element() -> None:
        if t.is_int:
            if zero:
                a.xor(acc, acc)
            else:
                a.mov(acc, t.smem(c_mn))
        else:
            getattr(a, t.s("vmov"))(xmm0, t.smem(c_mn))
        a.mov(pa, a_m)
        a.mov(pb, b_n)
        counted_loop(a, brc, br, br_step, "br")
        if t.is_int:
            a.mov(t.smem(c_mn), acc)
        else:
            getattr(a, t.s("vmov"))(t.smem(c_mn), xmm0)

    # a_m, c_mn walk down the column of A and C; B and C move on by a column
    walk = [(a_m, s_a, sa_m), (c_mn, c_n, sc_m)]
    element_loops(a, (mc, m, "m"), (nc, n, "n"), element, walk, advance=[(b_n, sb_n), (c_n, sc_n)])
    frame.leave(a)
