"""x86-64 code of the fused conversion passes (`minijit.sparseauto.convert_native`).

`csf_pass(nd)`: ``int64_t f(const int64_t* coords, int64_t nnz, const int64_t* sizes,
int32_t* crd, int32_t* pos, int64_t* counts)``. ``coords`` is ``nd x nnz`` (row ``k`` at
``coords + k*nnz``), ``crd`` ``nd x nnz`` and ``pos`` ``(nd-1) x (nnz+1)`` int32 outputs (level
``k``'s ``crd`` in row ``k``, level ``k``'s ``pos`` in row ``k - 1``), ``counts[k]`` the
positions of level ``k < nd - 1``. Returns -1, or the first entry that is out of range, out of
lexicographic order or a repeat (then the outputs are partial).

`nonzero_pass(nd, dtype)`: ``int64_t f(const T* a, const int64_t* shape, int64_t* coords,
int64_t count, T* data)``: the C-order non-zeros of ``a`` (``shape``, every size >= 1; a
value is zero when all its bits are, so -0.0 and NaN are listed, as pydata's ``from_numpy`` does):
coordinates into ``coords`` (``nd x count``), values into ``data``; returns how many (-1 when
there are more than ``count``: nothing is written past ``count``).
"""

from __future__ import annotations

from asm.x86_64 import Assembler, dword, ptr, qword, xmmword, ymmword
from asm.x86_64.registers import (
    r8,
    r9,
    r10,
    r11,
    r12,
    r13,
    r14,
    r15,
    rax,
    rbp,
    rbx,
    rcx,
    rdi,
    rdx,
    rsi,
    xmm0,
    xmm2,
    xmm3,
    ymm0,
    ymm1,
    ymm2,
    ymm15,
)
from minijit.kernels.x86_64.common import Frame, build
from minijit.runtime.kernel import Kernel

__all__ = ["csf_pass", "nonzero_pass"]

CSF_SIGNATURE = "int64_t(const int64_t*, int64_t, const int64_t*, int32_t*, int32_t*, int64_t*)"
NONZERO_SIGNATURE = "int64_t(const {t}*, const int64_t*, int64_t*, int64_t, {t}*)"

_ROWS = (rdi, r8, r10, r11, r12, r13, r14)  # csf: coordinate row k
_SAVED = [rbx, rbp, r12, r13, r14, r15]


def csf_pass(nd: int, vector: bool = True) -> Kernel:
    """The one-pass CSF builder for ``nd`` modes (module docstring). ``vector`` (AVX2): blocks of
    four entries that continue the previous entry's fibre (same upper coordinates, the last one
    rising within its size) are checked with four-lane compares and their last coordinates stored
    at once; any other block is walked entry by entry."""
    if not 1 <= nd <= len(_ROWS):
        raise ValueError(f"csf_pass: nd must be in 1..{len(_ROWS)}, got {nd}")
    a = Assembler()
    j, n, crd_last, size_last, t1, t2, stop = rbx, rsi, rcx, rbp, rdx, r9, r15
    rows, last = _ROWS[:nd], nd - 1
    f = Frame(saved=list(_SAVED))
    s_sizes, s_crd, s_pos, s_counts, s_flag = (f.slot(x) for x in ("sizes", "crd", "pos", "counts", "flag"))
    s_crd_m = [f.slot(f"crd{m}") for m in range(last)]
    s_pos_m = [None] + [f.slot(f"pos{m}") for m in range(1, nd)]
    # positions so far of each upper level: registers while they are free (nd <= 4), else slots
    s_n = [r12, r13, r14][:last] if nd <= 4 else [f.slot(f"n{m}") for m in range(last)]
    f.enter(a)
    # setup: the argument pointers to slots, row pointers, per-level output pointers, counts 0
    a.mov(s_sizes, rdx)
    a.mov(s_crd, rcx)
    a.mov(s_pos, r8)
    a.mov(s_counts, r9)
    a.lea(rax, ptr(rsi * 8))
    for k in range(1, nd):
        a.lea(rows[k], ptr(rows[k - 1] + rax))
    a.mov(t1, s_crd)
    a.lea(t2, ptr(rsi * 4))
    for m in range(nd):
        if m < last:
            a.mov(s_crd_m[m], t1)
            a.add(t1, t2)
        else:
            a.mov(crd_last, t1)
    a.mov(t1, s_pos)
    a.lea(t2, ptr(rsi * 4 + 4))
    for m in range(1, nd):
        a.mov(s_pos_m[m], t1)
        a.add(t1, t2)
    for m in range(last):
        a.mov(s_n[m], 0) if nd > 4 else a.xor(s_n[m].r32, s_n[m].r32)
    a.mov(t1, s_sizes)
    a.mov(size_last, qword(t1 + 8 * last))
    if vector:
        a.vpbroadcastq(ymm15, qword(t1 + 8 * last))
    a.xor(j.r32, j.r32)
    done, bad, top = a.new_label("done"), a.new_label("bad"), a.new_label("top")
    blocks = [a.new_label(f"new{k}") for k in range(nd)]
    entry, vtop = a.new_label("first"), a.new_label("blocks")
    a.jmp(entry)
    # scalar walk up to `stop`: the same upper coordinates as the entry before, the last one up
    a.bind(top)
    for k in range(last):
        a.mov(rax, qword(rows[k] + j * 8))
        a.cmp(rax, qword(rows[k] + j * 8 - 8))
        a.jne(blocks[k])
    a.mov(rax, qword(rows[last] + j * 8))
    a.cmp(rax, qword(rows[last] + j * 8 - 8))
    a.jle(bad)
    a.cmp(rax, size_last)
    a.jae(bad)  # unsigned: negative coordinates fail too
    a.mov(dword(crd_last + j * 4), rax.r32)
    a.inc(j)
    a.cmp(j, stop)
    a.jb(top)
    # blocks of four entries while four are left, else the scalar walk to the end
    a.bind(vtop)
    tail = a.new_label("tail")
    a.lea(rax, ptr(j + 4))
    a.cmp(rax, n)
    a.ja(tail)
    if vector:
        vfail = a.new_label("vfail")
        a.vmovupd(ymm1, ymmword(rows[last] + j * 8))
        a.vpcmpgtq(ymm0, ymm1, ymmword(rows[last] + j * 8 - 8))  # up from the entry before
        a.vpcmpgtq(ymm2, ymm15, ymm1)  # below the size (>= 0: up from a checked entry)
        a.vpand(ymm0, ymm0, ymm2)
        for k in range(last):  # the upper coordinates unchanged
            a.vmovupd(ymm2, ymmword(rows[k] + j * 8))
            a.vpcmpeqq(ymm2, ymm2, ymmword(rows[k] + j * 8 - 8))
            a.vpand(ymm0, ymm0, ymm2)
        a.vextractf128(xmm2, ymm0, 1)  # all four lanes true?
        a.vpand(xmm0, xmm0, xmm2)
        a.vpshufd(xmm2, xmm0, 0x4E)
        a.vpand(xmm0, xmm0, xmm2)
        a.vmovsd(s_flag, xmm0)
        a.cmp(s_flag, -1)
        a.jne(vfail)
        a.vshufps(ymm2, ymm1, ymm1, 0x88)  # the low dwords of the four coordinates
        a.vextractf128(xmm3, ymm2, 1)
        a.vunpcklpd(xmm2, xmm2, xmm3)
        a.vmovupd(xmmword(crd_last + j * 4), xmm2)
        a.add(j, 4)
        a.jmp(vtop)
        a.bind(vfail)  # a fibre starts (or bad input) in this block: walk its four entries
        a.lea(stop, ptr(j + 4))
        a.jmp(top)
    else:
        a.lea(stop, ptr(j + 4))
        a.jmp(top)
    a.bind(tail)
    a.mov(stop, n)
    a.cmp(j, n)
    a.jb(top)
    # done: the positions of the upper levels to counts, -1
    a.bind(done)
    a.mov(t1, s_counts)
    for m in range(last):
        if nd > 4:
            a.mov(rax, s_n[m])
        a.mov(qword(t1 + 8 * m), rax if nd > 4 else s_n[m])
    a.mov(rax, -1)
    f.leave(a)
    a.bind(bad)
    a.mov(rax, j)
    f.leave(a)

    def new_from(k: int, label, check: bool) -> None:
        """Entry j starts a new position at levels k..nd-1 (its level k coordinate differs)."""
        a.bind(label)
        if check:  # up, not down, at the first level that differs
            a.mov(rax, qword(rows[k] + j * 8))
            a.cmp(rax, qword(rows[k] + j * 8 - 8))
            a.jl(bad)
        for m in range(k, last):
            a.mov(rax, qword(rows[m] + j * 8))
            a.mov(t1, s_sizes)
            a.cmp(rax, qword(t1 + 8 * m))
            a.jae(bad)
            nm = s_n[m] if nd <= 4 else t2
            if nd > 4:
                a.mov(t2, s_n[m])
            a.mov(t1, s_crd_m[m])
            a.mov(dword(t1 + nm * 4), rax.r32)  # crd_m[n_m] = c_m
            if m + 1 == last:
                child = j
            elif nd <= 4:
                child = s_n[m + 1]
            else:
                a.mov(rax, s_n[m + 1])
                child = rax
            a.mov(t1, s_pos_m[m + 1])
            a.mov(dword(t1 + nm * 4), child.r32)  # pos_{m+1}[n_m] = n_{m+1}: its first child
            a.inc(nm)
            if nd > 4:
                a.mov(s_n[m], t2)
        a.mov(rax, qword(rows[last] + j * 8))
        a.cmp(rax, size_last)
        a.jae(bad)
        a.mov(dword(crd_last + j * 4), rax.r32)
        # back to the blocks at once: the block that failed held this fibre start (or bad input,
        # which the walk finds before its start)
        a.inc(j)
        a.jmp(vtop)

    # cold blocks: entry 0 (every level new), and a new position from level k on
    for k in range(last):
        new_from(k, blocks[k], True)
    new_from(0, entry, False)
    return build(a, CSF_SIGNATURE, f"csf_pass_{nd}{'_avx2' if vector else ''}")


_INDEX = (r10, r11, r12, r13)  # nonzero: index of dimension k
_OUT_ROWS = (rdx, r9, r14, r15)  # nonzero: coordinate row k


def nonzero_pass(nd: int, dtype: str) -> Kernel:
    """The C-order non-zero lister for ``nd`` dimensions of ``dtype`` float32/float64."""
    if not 1 <= nd <= len(_INDEX):
        raise ValueError(f"nonzero_pass: nd must be in 1..{len(_INDEX)}, got {nd}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"nonzero_pass: dtype must be float32 or float64, got {dtype!r}")
    wide = dtype == "float64"
    es = 8 if wide else 4
    a = Assembler()
    src, shape, p, cnt, data = rdi, rsi, rbx, rbp, r8
    idx, out = _INDEX[:nd], _OUT_ROWS[:nd]
    f = Frame(saved=list(_SAVED))
    s_count = f.slot("count")
    f.enter(a)
    # setup: row pointers coords + k*count, counters 0
    a.mov(s_count, rcx)
    a.lea(rax, ptr(rcx * 8))
    for k in range(1, nd):
        a.lea(out[k], ptr(out[k - 1] + rax))
    a.xor(p.r32, p.r32)
    a.xor(cnt.r32, cnt.r32)
    over = a.new_label("over")

    def body() -> None:
        """Element p: unless it is +0.0 (all bits zero), append its value and coordinates."""
        skip = a.new_label("zero")
        if wide:
            a.mov(rax, qword(src + p * 8))
            a.test(rax, rax)
        else:
            a.mov(rax.r32, dword(src + p * 4))
            a.test(rax.r32, rax.r32)
        a.jz(skip)  # +0.0 only: -0.0 and NaN are stored, as pydata's from_numpy does
        a.cmp(cnt, s_count)
        a.jae(over)
        if wide:
            a.mov(qword(data + cnt * 8), rax)
        else:
            a.mov(dword(data + cnt * 4), rax.r32)
        for k in range(nd):
            a.mov(qword(out[k] + cnt * 8), idx[k])
        a.inc(cnt)
        a.bind(skip)
        a.inc(p)

    def loop(k: int) -> None:
        a.xor(idx[k].r32, idx[k].r32)
        head = a.label(f"dim{k}")
        if k == nd - 1:
            body()
        else:
            loop(k + 1)
        a.inc(idx[k])
        a.cmp(idx[k], qword(shape + 8 * k))
        a.jb(head)

    loop(0)
    a.mov(rax, cnt)
    f.leave(a)
    a.bind(over)
    a.mov(rax, -1)
    f.leave(a)
    del es
    t = "double" if wide else "float"
    return build(a, NONZERO_SIGNATURE.format(t=t), f"nonzero_pass_{nd}_{dtype}")
