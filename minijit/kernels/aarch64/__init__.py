"""AArch64 primitive generators, NEON and SVE: one module per kernel kind.

`brgemm`, `gemv`, `unary` and `binary` each hold the loops both ISAs share in a base class and
the ISA's blocking and stages in a ``Neon...`` / ``Sve...`` subclass (``program`` emits the
kernel, ``generate`` loads it); `loopnest` compiles loop nests. ISA idioms live in `pieces`
(NEON: q/d/s pieces, ldp streams) and `predicated` (SVE: whilelt loops, gathers), shared helpers
in `common`. Generated kernels are callables made by `minijit.runtime.load`: native on an AArch64
host, otherwise executed in the qemu emulation worker at the SVE vector length ``sve_vl`` (bits).
"""
