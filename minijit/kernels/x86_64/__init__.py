"""x86-64 primitive generators (AVX-512 and AVX2): `brgemm`, `unary`, `binary`, and `gemv`
(the BRGEMM of one column, which `brgemm.generate` returns for N = 1).

Each ``generate(...)`` returns a native `minijit.runtime.kernel.Kernel` that
carries its assembly listing; strides are in elements, matrices column-major
(see docs/decisions.md, "Kernel semantics: column-major, strides in elements").
"""
