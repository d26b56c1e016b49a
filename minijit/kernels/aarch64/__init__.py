"""AArch64 primitive generators (NEON and SVE): BRGEMM, unary and binary kernels.

Generators return a callable kernel made by `minijit.runtime.load`: native on
an AArch64 host, otherwise executed in the qemu emulation worker at the SVE
vector length ``sve_vl`` (bits).
"""
