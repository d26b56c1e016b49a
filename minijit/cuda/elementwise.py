"""Elementwise CUDA kernels (PTX through :mod:`ptx`): unary zero/copy/relu and binary
add/sub/mul/div/min/max over any strided layout, the whole operation in one launch.

For every index tuple ``i`` of the operation's dims::

    out[i] = last(op(in0[i], in1[i]))        # fp32 in, fp32 out

with ``last`` the last touch (none, or ReLU). Strides may be anything the
:class:`~minijit.ir.TensorConfig` accepts: permutations and transpositions (trus -> turs),
negative strides, stride 0 (broadcast) in an input.

Planning (host, :func:`plan`):

- the dims the kernel walks are the config's dims of size > 1 that reach ``out`` (a zero's K dims,
  stride 0 in out, only repeat writes and are dropped), sorted by ``|stride_out|``, innermost
  first: dim 0 is the unit-stride dim of ``out`` where there is one, so consecutive threads
  store consecutive elements (coalesced);
- neighbours that are one dim in every tensor the kernel touches (outer stride = inner stride *
  inner size) are fused; at most :data:`MAX_RANK` dims may remain;
- a 32-bit index variant runs when the element count is below 2**31 and every byte stride fits
  in .s32 (offsets are still 64-bit: ``mad.wide.s32``); otherwise the 64-bit variant.

The kernel walks the linear element index ``e`` (dim 0 fastest). Thread ``t`` of CTA ``c`` takes
elements ``base + t + j*BLOCK`` for ``j < EPT`` with ``base = c*TILE``, then ``base`` strides by
``gridDim.x * TILE`` (grid-stride loop). Each element index is clamped to the last element (so
every address the kernel forms, and every load, is in bounds) and decomposed into dim indices by
division with a precomputed multiplier (:func:`magic`, :func:`decompose`: no integer divide);
the byte offset of each tensor is ``sum idx_d * stride_d`` in 64 bits (:func:`offsets`); stores
are predicated on ``e < total``. The same two functions compute the addresses the kernel emits
(:class:`PtxInt`) and the numpy model of them (:class:`IntModel`) the tests check.

Kernel parameters (:attr:`KernelSpec.params`), in order: the device addresses of the first
element of each tensor the op touches (``in0``, ``in1``, ``out``; zero has only ``out``; u64),
``total`` (element count), per dim ``d < rank-1``: ``size{d}``, ``magic{d}`` (the multiplier as
a signed two's complement value), ``shift{d}`` (s32), then per tensor per dim ``{t}_stride{d}``
(bytes). Scalars are .s32 in the 32-bit variant and .s64 in the 64-bit one (shifts always .s32).
Grid ``(min(ceil(total/TILE), MAX_GRID), 1, 1)``, block ``(BLOCK, 1, 1)``;
:meth:`Plan.args` builds the argument tuple.

Semantics are numpy's on fp32: add/sub/mul/div are IEEE round-to-nearest without flush to zero
(``add.rn.f32``, ``div.rn.f32``); min/max are ``np.minimum``/``np.maximum`` bit for bit:
``(a < b or a is NaN) ? a : b`` (``>`` for max): the first NaN propagates with its payload, and
of two equal values (+0.0 and -0.0) the second is returned; ReLU is ``np.maximum(x, 0)``:
``(x > 0 or x is NaN) ? x : +0.0`` (NaN kept, -0.0 becomes +0.0). Arithmetic on NaN inputs
returns the GPU's canonical NaN (numpy keeps the payload). fp16/bf16 arithmetic is not
generated; the copy also runs on 2-byte elements (``KernelSpec.es == 2``: a bit move with
``ld/st.global.b16``, the same for fp16 and bf16), planned by :func:`copy_plan` from a shape and
two element-stride layouts (what `minijit.cuda.reorder` uses to reorder device arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minijit.errors import SetupError, error_t
from minijit.ir import BINARY_PTYPES, UNARY_PTYPES, TensorConfig, ptype_t
from ptx import Module, addr, sreg

__all__ = [
    "BLOCK",
    "EPT",
    "MAX_GRID",
    "MAX_RANK",
    "ElementwiseKernel",
    "IntModel",
    "KernelSpec",
    "Plan",
    "PtxInt",
    "decompose",
    "generate",
    "magic",
    "offsets",
    "copy_plan",
    "plan",
    "reference",
]

UNARY = ("zero", "copy", "relu")
BINARY = ("add", "sub", "mul", "div", "min", "max")
BLOCK = 256  #: threads per CTA
EPT = 4  #: elements per thread per pass of the grid-stride loop
MAX_GRID = 1 << 16  #: CTAs at most; larger operations loop
MAX_RANK = 8  #: dims after fusion
ES = 4  #: bytes per element (fp32)
ELEMENT_SIZES = (2, 4)  #: bytes per element a kernel moves (2: the copy only, as .b16 bits)
LIMIT32 = 2**31 - 1  #: largest element count and |byte stride| of the 32-bit index variant
UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum, "max": np.maximum}


# --------------------------------------------------------------------------- index math


def magic(d: int, bits: int) -> tuple[int, int]:
    """``(m, s)`` with ``n // d == (mulhi(n, m) + n) >> s`` for every ``0 <= n < 2**(bits-1)``.

    ``s = ceil(log2 d)`` and ``m = floor(2**bits * (2**s - d) / d) + 1`` (Granlund-Montgomery with
    the implicit 2**bits bit of the multiplier added back as ``+ n``): with ``M = 2**bits + m``,
    ``M*d - 2**(bits+s)`` lies in ``(0, d]``, so ``n*M >> (bits+s)`` is exact for ``n < 2**bits``;
    ``n < 2**(bits-1)`` keeps the sum ``mulhi + n`` inside ``bits`` bits."""
    if not 1 <= d < 2 ** (bits - 1):
        raise ValueError(f"divisor {d} must be in 1..2**{bits - 1}-1")
    s = (d - 1).bit_length()
    m = ((1 << bits) * ((1 << s) - d)) // d + 1
    return m, s


def decompose(ops, e, divisors) -> list:
    """Indices (dim 0 first) of linear element ``e``; ``divisors``: ``(size, magic, shift)`` of
    every dim but the outermost (registers or ints, as ``ops`` takes them)."""
    idx = []
    for size, m, s in divisors:
        q = ops.shr(ops.add(ops.mulhi(e, m), e), s)
        idx.append(ops.sub(e, ops.mul(q, size)))
        e = q
    idx.append(e)
    return idx


def offsets(ops, idx, strides):
    """Byte offset ``sum idx_d * stride_d`` (64-bit)."""
    off = None
    for i, s in zip(idx, strides, strict=True):
        off = ops.mad_wide(i, s, off)
    return off


class IntModel:
    """The operations of :func:`decompose`/:func:`offsets` on numpy object arrays of Python ints,
    wrapped to ``bits`` like the kernel's .u32/.u64 index registers (offsets are exact)."""

    def __init__(self, bits: int):
        self.bits, self.mask = bits, (1 << bits) - 1

    def _w(self, x):
        return np.asarray(x, dtype=object) & self.mask

    def add(self, a, b):
        return self._w(np.asarray(a, dtype=object) + b)

    def sub(self, a, b):
        return self._w(np.asarray(a, dtype=object) - b)

    def mul(self, a, b):
        return self._w(np.asarray(a, dtype=object) * b)

    def mulhi(self, a, b):
        return self._w((np.asarray(a, dtype=object) * b) >> self.bits)

    def shr(self, a, s):
        return self._w(np.asarray(a, dtype=object) >> s)

    def mad_wide(self, i, s, acc):
        prod = np.asarray(i, dtype=object) * s
        return prod if acc is None else prod + acc


class PtxInt:
    """The same operations as PTX instructions on .u32 (or .u64) index registers of kernel ``k``;
    ``mad_wide`` accumulates .s64 byte offsets (``mad.wide.s32`` / ``mad.lo.s64``)."""

    def __init__(self, k, type: str):
        self.k, self.type = k, type

    def _op(self, name: str, a, b, **kw):
        d = self.k.reg(self.type)
        getattr(self.k, name)(d, a, b, **kw)
        return d

    def add(self, a, b):
        return self._op("add", a, b)

    def sub(self, a, b):
        return self._op("sub", a, b)

    def mul(self, a, b):
        return self._op("mul", a, b, mode="lo")

    def mulhi(self, a, b):
        return self._op("mul", a, b, mode="hi")

    def shr(self, a, s):
        return self._op("shr", a, s)

    def mad_wide(self, i, s, acc):
        d = self.k.reg("s64")
        wide = {"type": "s32", "mode": "wide"} if self.type == "u32" else {"type": "s64", "mode": "lo"}
        if acc is None:
            self.k.mul(d, i, s, **wide)
        else:
            self.k.mad(d, i, s, acc, **wide)
        return d


# --------------------------------------------------------------------------- kernel specification


@dataclass(frozen=True)
class KernelSpec:
    """Everything that selects one generated kernel: the op (zero/copy/relu or a binary op), a ReLU
    last touch, the rank after fusion, the index width, threads per CTA, elements per thread and
    bytes per element ``es`` (4: fp32; 2: the copy only, a bit move of fp16/bf16 elements)."""

    op: str
    relu: bool = False
    rank: int = 1
    wide: bool = False
    block: int = BLOCK
    ept: int = EPT
    es: int = ES

    @property
    def name(self) -> str:
        last = "_relu" if self.relu else ""
        bits = "" if self.es == ES else f"_b{8 * self.es}"
        return f"ew_{self.op}{last}{bits}_r{self.rank}_{'i64' if self.wide else 'i32'}_b{self.block}x{self.ept}"

    @property
    def value_type(self) -> str:
        """PTX type of the values the kernel loads and stores (f32, or b16 bits for 2-byte copies)."""
        return "f32" if self.es == ES else f"b{8 * self.es}"

    @property
    def tile(self) -> int:
        return self.block * self.ept

    @property
    def inputs(self) -> tuple[str, ...]:
        return () if self.op == "zero" else ("in0",) if self.op in UNARY else ("in0", "in1")

    @property
    def tensors(self) -> tuple[str, ...]:
        """The tensors the kernel touches, in parameter order."""
        return (*self.inputs, "out")

    @property
    def params(self) -> tuple[tuple[str, str], ...]:
        """``(name, type)`` of every kernel parameter, in order."""
        s = "s64" if self.wide else "s32"
        out = [(t, "u64") for t in self.tensors] + [("total", s)]
        for d in range(self.rank - 1):
            out += [(f"size{d}", s), (f"magic{d}", s), (f"shift{d}", "s32")]
        return tuple(out + [(f"{t}_stride{d}", s) for t in self.tensors for d in range(self.rank)])

    def validate(self) -> KernelSpec:
        def bad(msg):
            raise ValueError(f"KernelSpec {self.name}: {msg}")

        if self.op not in UNARY + BINARY:
            bad(f"op {self.op!r}; one of {UNARY + BINARY}")
        if not 1 <= self.rank <= MAX_RANK:
            bad(f"rank must be in 1..{MAX_RANK}")
        if self.block not in (32, 64, 128, 256, 512, 1024):
            bad("block must be a power of two in 32..1024")
        if not 1 <= self.ept <= 8:
            bad("ept must be in 1..8")
        if self.es not in ELEMENT_SIZES:
            bad(f"es (bytes per element) must be one of {ELEMENT_SIZES}")
        if self.es != ES and (self.op != "copy" or self.relu):
            bad(f"{self.es}-byte elements are moved by the copy only (no arithmetic, no ReLU)")
        return self


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class Plan:
    """One launch: the kernel spec, the kernel's dims (innermost first) and byte strides."""

    spec: KernelSpec
    sizes: tuple[int, ...]
    strides: dict  # tensor -> byte strides, one per dim

    @property
    def total(self) -> int:
        return math.prod(self.sizes)

    @property
    def bits(self) -> int:
        return 64 if self.spec.wide else 32

    @property
    def divisors(self) -> tuple[tuple[int, int, int], ...]:
        """``(size, magic, shift)`` of every dim but the outermost."""
        return tuple((n, *magic(n, self.bits)) for n in self.sizes[:-1])

    @property
    def grid(self) -> tuple[int, int, int]:
        return (max(1, min(-(-self.total // self.spec.tile), MAX_GRID)), 1, 1)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.spec.block, 1, 1)

    def args(self, ptrs) -> tuple[int, ...]:
        """Kernel arguments for ``ptrs`` (tensor name -> device address of its first element)."""
        bits = self.bits

        def signed(v: int) -> int:
            return v - (1 << bits) if v >= 1 << (bits - 1) else v

        vals = [int(ptrs[t]) for t in self.spec.tensors] + [self.total]
        for n, m, s in self.divisors:
            vals += [n, signed(m), s]
        for t in self.spec.tensors:
            vals += self.strides[t]
        return tuple(vals)


def effective_op(main: ptype_t, last: ptype_t) -> tuple[str, bool]:
    """(kernel op, ReLU last touch) of a main primitive and a last touch (zero overrides all)."""
    if main is ptype_t.zero or last is ptype_t.zero:
        return "zero", False
    return main.name, last is ptype_t.relu


def plan(config: TensorConfig, *, wide: bool | None = None, block: int = BLOCK, ept: int = EPT) -> Plan:
    """Sort, fuse and size the dims of an elementwise ``config`` (see the module docstring).
    ``wide=True`` forces the 64-bit index variant. Raises `SetupError` for what the kernel cannot run."""
    main = config.prim_main
    if main not in UNARY_PTYPES | BINARY_PTYPES:
        raise SetupError(error_t.wrong_ptype, f"elementwise kernels run {', '.join(UNARY + BINARY)}, not {main.name}")
    op, relu = effective_op(main, config.prim_last)
    tensors = KernelSpec(op).tensors
    for t in tensors:  # byte offsets the strides reach stay inside .s64
        lo, hi = config.offset_range(t)
        if max(-lo, hi) * ES >= 2**62:
            raise SetupError(error_t.wrong_stride, f"the strides of {t} reach {max(-lo, hi)} elements: out of range")
    dims = [(d.size, {t: d.stride(t) for t in tensors}) for d in config.dims if d.size > 1 and d.stride_out != 0]
    return _plan_dims(KernelSpec(op, relu, block=block, ept=ept), dims, wide)


def copy_plan(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    es: int = ES,
    *,
    wide: bool | None = None,
    block: int = BLOCK,
    ept: int = EPT,
) -> Plan:
    """The copy ``dst[i] = src[i]`` for every index tuple ``i`` of ``shape`` (no dim of size 0),
    ``es``-byte elements (2 or 4), strides in elements of each tensor (``src`` is ``in0``, ``dst``
    ``out``); ``dst`` must not repeat an element (no stride 0 on a dim of size > 1). ValueError
    for what the kernel cannot run."""
    shape, src_strides, dst_strides = (tuple(int(x) for x in t) for t in (shape, src_strides, dst_strides))
    if not len(shape) == len(src_strides) == len(dst_strides):
        raise ValueError(f"copy_plan: shape {shape} and strides {src_strides}, {dst_strides} differ in rank")
    if any(n < 1 for n in shape):
        raise ValueError(f"copy_plan: every extent must be >= 1, got shape {shape}")
    if any(s == 0 and n > 1 for n, s in zip(shape, dst_strides, strict=True)):
        raise ValueError(f"copy_plan: the destination strides {dst_strides} repeat elements of shape {shape}")
    for name, st in (("source", src_strides), ("destination", dst_strides)):
        if sum(abs(s) * (n - 1) for n, s in zip(shape, st, strict=True)) * es >= 2**62:
            raise ValueError(f"copy_plan: the {name} strides {st} reach beyond 2**62 bytes")
    dims = [(n, {"in0": a, "out": b}) for n, a, b in zip(shape, src_strides, dst_strides, strict=True) if n > 1]
    spec = KernelSpec("copy", block=block, ept=ept, es=es)
    try:
        return _plan_dims(spec, dims, wide)
    except SetupError as e:
        raise ValueError(f"copy_plan: {e.message}") from None


def _plan_dims(spec: KernelSpec, dims: list[tuple[int, dict]], wide: bool | None) -> Plan:
    """The plan of ``spec``'s op (its rank and width set here) over ``dims``: ``(size, element
    stride per tensor)`` of each dim of size > 1 that reaches ``out``, in any order."""
    tensors, es = spec.tensors, spec.es
    dims = sorted(dims, key=lambda d: abs(d[1]["out"]))
    fused: list[tuple[int, dict]] = []
    for size, st in dims:
        if fused:
            n, prev = fused[-1]
            if all(st[t] == prev[t] * n for t in tensors):
                fused[-1] = (n * size, prev)
                continue
        fused.append((size, dict(st)))
    if not fused:
        fused = [(1, dict.fromkeys(tensors, 0))]
    if len(fused) > MAX_RANK:
        raise SetupError(
            error_t.wrong_dimension,
            f"{len(fused)} dims remain after fusing contiguous ones; the CUDA elementwise kernel takes {MAX_RANK}",
        )
    sizes = tuple(n for n, _ in fused)
    strides = {t: tuple(st[t] * es for _, st in fused) for t in tensors}
    need64 = math.prod(sizes) > LIMIT32 or any(abs(s) > LIMIT32 for v in strides.values() for s in v)
    spec = KernelSpec(spec.op, spec.relu, len(sizes), need64 or bool(wide), spec.block, spec.ept, es).validate()
    return Plan(spec, sizes, strides)


# --------------------------------------------------------------------------- the generator


@dataclass(frozen=True)
class ElementwiseKernel:
    """A generated kernel: its spec, entry name, PTX text and parameter types."""

    spec: KernelSpec
    name: str
    text: str
    signature: tuple[str, ...]


def _select(k, cmp: str, a, b):
    """``(a cmp b or a is NaN) ? a : b`` (numpy's minimum/maximum and, with b = +0.0, ReLU)."""
    p, q, r, d = k.reg("pred"), k.reg("pred"), k.reg("pred"), k.reg("f32")
    k.setp(cmp, p, a, b, type="f32")
    k.setp("nan", q, a, a)
    k.or_(r, p, q)
    k.selp(d, a, b, r)
    return d


def _compute(k, op: str, x: list, zero):
    """The f32 result register of ``op`` on the loaded inputs ``x``."""
    if op == "zero":
        return zero
    if op == "copy":
        return x[0]
    if op == "relu":
        return _select(k, "gt", x[0], 0.0)
    if op in ("min", "max"):
        return _select(k, "lt" if op == "min" else "gt", x[0], x[1])
    d = k.reg("f32")
    if op == "div":
        k.div(d, x[0], x[1], rnd="rn")  # IEEE division, as numpy
    else:
        getattr(k, op)(d, x[0], x[1], rnd="rn")
    return d


def generate(spec: KernelSpec) -> ElementwiseKernel:
    """Emit the kernel for ``spec`` (parameters and launch: see the module docstring)."""
    spec.validate()
    # blocking decisions: BLOCK threads per CTA, EPT elements per thread per pass (loads of all
    # EPT elements are issued before their stores), index registers .u32 or .u64
    it = "u64" if spec.wide else "u32"
    mod = Module()
    k = mod.kernel(spec.name, reqntid=spec.block)
    ops = PtxInt(k, it)
    ptr, total, divs, strides = _arguments(k, spec, it)
    # this CTA's first element, the grid's step between passes, each thread's element offsets
    base, step = k.reg(it), k.reg(it)
    k.mul(base, _special(k, spec, sreg.ctaid.x), spec.tile, mode="lo")
    k.mul(step, _special(k, spec, sreg.nctaid.x), spec.tile, mode="lo")
    tid = _special(k, spec, sreg.tid.x)
    lanes = [tid] + [ops.add(tid, j * spec.block) for j in range(1, spec.ept)]
    last = ops.sub(total, 1)
    zero = None
    if spec.op == "zero":
        zero = k.reg("f32")
        k.mov(zero, 0.0)
    loop, done = k.label("pass"), k.label("done")
    k.place(loop)
    # leave when the pass starts past the end (uniform over the CTA)
    end = k.reg("pred")
    k.setp("ge", end, base, total)
    k.bra(done, pred=end, uni=True)
    work = [_element(k, spec, ops, ops.add(base, lanes[j]), total, last, divs, ptr, strides) for j in range(spec.ept)]
    for ok, out, x in work:
        # the op, the ReLU last touch, the predicated store (2-byte copies: the loaded bits)
        v = _compute(k, spec.op, x, zero)
        if spec.relu:
            v = _select(k, "gt", v, 0.0)
        k.st("global", addr(out), v, pred=ok)
    # next pass
    k.add(base, base, step)
    k.bra(loop, uni=True)
    k.place(done)
    k.ret()
    return ElementwiseKernel(spec, k.name, mod.text(), k.signature)


def _arguments(k, spec: KernelSpec, it: str):
    """Tensor pointers (global window), element count, divisors (size, magic, shift) and byte strides."""
    par = {name: k.param(t, name) for name, t in spec.params}

    def load(name: str, t: str):
        r = k.reg(t)
        k.ld_param(r, par[name])
        return r

    ptr = {}
    for t in spec.tensors:
        ptr[t] = k.reg("u64")
        k.cvta(ptr[t], load(t, "u64"))
    total = load("total", it)
    divs = [(load(f"size{d}", it), load(f"magic{d}", it), load(f"shift{d}", "u32")) for d in range(spec.rank - 1)]
    s = "s64" if spec.wide else "s32"
    strides = {t: [load(f"{t}_stride{d}", s) for d in range(spec.rank)] for t in spec.tensors}
    return ptr, total, divs, strides


def _special(k, spec: KernelSpec, s):
    """A special register, widened to u64 for 64-bit indices."""
    r = k.reg("u32")
    k.mov(r, s)
    if not spec.wide:
        return r
    w = k.reg("u64")
    k.cvt(w, r)
    return w


def _element(k, spec: KernelSpec, ops, e, total, last, divs, ptr, strides):
    """One element of a pass: its store predicate, the output address and the loaded inputs."""
    # element index e, its store predicate, the clamped index every address is formed from
    ok, ec = k.reg("pred"), k.reg(ops.type)
    k.setp("lt", ok, e, total)
    k.min(ec, e, last)
    # dim indices, then per tensor the address of the element (64-bit offsets)
    idx = decompose(ops, ec, divs)
    where = {}
    for t in spec.tensors:
        where[t] = k.reg("u64")
        k.add(where[t], ptr[t], offsets(ops, idx, strides[t]))
    # loads of the inputs (in bounds for every thread: no predicate)
    x = []
    for t in spec.inputs:
        x.append(k.reg(spec.value_type))
        k.ld("global", x[-1], addr(where[t]))
    return ok, where["out"], x


# --------------------------------------------------------------------------- numpy reference


def reference(main: str, last: str, in0, in1, out) -> None:
    """``out[...] = last(main(in0, in1))`` in numpy on strided views (what the kernel computes;
    a copy moves any element type, e.g. the uint16 bits of a 2-byte copy, unchanged)."""
    zero = np.float32(0)
    with np.errstate(all="ignore"):
        if main == "zero":
            r = zero
        elif main == "copy":
            r = np.array(in0)
        elif main == "relu":
            r = np.maximum(in0, zero)
        else:
            r = UFUNCS[main](in0, in1)
        if last == "relu":
            r = np.maximum(r, zero)
        elif last == "zero":
            r = zero
    out[...] = r
