"""minijit: a pure-Python JIT for tensor operations."""
