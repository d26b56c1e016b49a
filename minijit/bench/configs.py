"""Benchmark configurations: `OpSpec`, the built-in configurations and suites, user config files.

The built-in rows run with `TensorOperation.setup`'s optimizer defaults (GEMM prims from
`minijit.blocking`, other dims `minijit.optimizer.DEFAULT_MAX_KERNEL_SIZE` /
`DEFAULT_MIN_KERNEL_SIZE`), so ``minijit bench`` measures what a default API call gets; a row that
sets optimizer options says so in its description.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from minijit.bench import UserError

__all__ = [
    "BUILTIN_CONFIGS",
    "DEFAULT_SUITE",
    "QUICK_SUITE",
    "OpSpec",
    "load_config_file",
    "LAYOUTS",
    "gemm_strides",
    "matmul_layout",
    "matmul_n",
    "select",
]

SETUP_KEYS = (
    "dtype",
    "prim_first",
    "prim_main",
    "prim_last",
    "dim_types",
    "exec_types",
    "dim_sizes",
    "strides_in0",
    "strides_in1",
    "strides_out",
)
LIST_KEYS = SETUP_KEYS[4:]
OPT_KEYS = ("optimize", "max_kernel_size", "min_kernel_size", "thread_target")


@dataclass
class OpSpec:
    """One benchmark configuration: setup() arguments plus optimizer options and the peer kind."""

    name: str
    setup: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    peer: str = "einsum"  # "matmul" (square column-major GEMM) or "einsum" (generic)
    description: str = ""

    def with_dtype(self, dtype: str | None) -> OpSpec:
        if dtype is None:
            return self
        return replace(self, setup={**self.setup, "dtype": dtype}, options=dict(self.options))


def _gemm_setup(dim_types: list[str], sizes: list[int], s0: list[int], s1: list[int], so: list[int], **kw) -> dict:
    return {
        "dtype": "fp32",
        "prim_first": kw.get("first", "none"),
        "prim_main": kw.get("main", "gemm"),
        "prim_last": kw.get("last", "none"),
        "dim_types": dim_types,
        "exec_types": kw.get("exec_types", ["undefined"] * len(dim_types)),
        "dim_sizes": sizes,
        "strides_in0": s0,
        "strides_in1": s1,
        "strides_out": so,
    }


def _seed(name: str, exec_types: list[str], first: str, main: str, last: str, desc: str) -> OpSpec:
    # seed 004: A[m0,k0,k1,m1], B[n0,k0,n1,k1], C[m0,n0,n1,m1]
    setup = _gemm_setup(
        ["m", "n", "k", "m", "n", "k"],
        [32, 32, 8, 32, 32, 32],
        [8192, 0, 1024, 1, 0, 32],
        [0, 8192, 1024, 0, 32, 1],
        [32768, 1024, 0, 1, 32, 0],
        first=first,
        main=main,
        last=last,
        exec_types=exec_types,
    )
    return OpSpec(name, setup, description=desc)


#: (M, N, K) strides of a square n^3 GEMM's A, B and C per storage order: "F" column-major
#: (mini_jit's layout), "C" row-major (C-order numpy arrays)
_OPERAND_STRIDES = (
    {"F": lambda n: [1, 0, n], "C": lambda n: [n, 0, 1]},  # A (M x K)
    {"F": lambda n: [0, n, 1], "C": lambda n: [0, 1, n]},  # B (K x N)
    {"F": lambda n: [1, n, 0], "C": lambda n: [n, 1, 0]},  # C (M x N)
)
#: the storage orders of the square GEMM rows: all F, all C, and the six mixes of A, B, C
LAYOUTS = ("F", "C", "CCF", "CFC", "CFF", "FCC", "FCF", "FFC")


def gemm_strides(order: str, n: int) -> tuple[list[int], list[int], list[int]]:
    """(in0, in1, out) element strides of dims M, N, K for ``order``: "F" / "C" (every operand)
    or three letters, the orders of A, B and C."""
    letters = order * 3 if len(order) == 1 else order
    a, b, c = (table[x](n) for table, x in zip(_OPERAND_STRIDES, letters, strict=True))
    return a, b, c


def _square_gemm(n: int, name: str | None = None, description: str = "", order: str = "F") -> OpSpec:
    setup = _gemm_setup(["m", "n", "k"], [n, n, n], *gemm_strides(order, n))
    if len(order) == 1:
        major = "column-major (F-order)" if order == "F" else "row-major (C-order numpy arrays)"
        suffix = "" if order == "F" else "-c"
    else:
        major = f"mixed-layout (A {order[0]}-order, B {order[1]}-order, C {order[2]}-order)"
        suffix = f"-{order.lower()}"
    desc = description or f"{n}^3 {major} GEMM, dims M, N, K undefined -> optimizer (setup() defaults)"
    return OpSpec(name or f"gemm-{n}{suffix}", setup, peer="matmul", description=desc)


def _mmnnkk() -> OpSpec:
    # M = (m0 64, m1 25), N = (n0 64, n1 25), K = (k0 64, k1 25): a 1600^3 GEMM in six dims,
    # column-major A (M x K), B (K x N), C (M x N) with the inner part of each pair innermost.
    setup = _gemm_setup(
        ["m", "m", "n", "n", "k", "k"],
        [64, 25, 64, 25, 64, 25],
        [25, 1, 0, 0, 40000, 1600],
        [0, 0, 40000, 1600, 25, 1],
        [25, 1, 40000, 1600, 0, 0],
    )
    # min_kernel_size 26 (> 25) lets the optimizer fuse each pair to 1600 before splitting:
    # prims 32x40x50 (BR 32) instead of 25x25x25 (BR 64); ~1.25x faster on Zen 5
    desc = (
        "optimizer case: dims M,M,N,N,K,K sizes 64,25,64,25,64,25 (undefined -> optimizer);"
        " non-default optimizer option min_kernel_size=26 (fuses each pair before splitting)"
    )
    return OpSpec("mmnnkk", setup, {"min_kernel_size": 26}, description=desc)


def _builtin() -> dict[str, OpSpec]:
    seq3 = ["seq", "seq", "seq", "prim", "prim", "prim"]
    seq2 = ["seq", "seq", "prim", "prim", "prim", "prim"]
    specs = [
        _seed("gemm", seq3, "none", "gemm", "none", "seed 004: (M,N,K,M,N,K) 32,32,8,32,32,32, GEMM prim"),
        _seed("brgemm", seq2, "none", "brgemm", "none", "seed 004: same dims, BRGEMM prim (BR 8)"),
        _seed("zero-brgemm-relu", seq2, "zero", "brgemm", "relu", "seed 004: zero first touch, BRGEMM, ReLU last"),
        *(_square_gemm(n) for n in (256, 512, 1024, 2048, 4096)),
        *(_square_gemm(n, order="C") for n in (256, 512, 1024, 2048, 4096)),
        *(_square_gemm(1024, order=o) for o in LAYOUTS[2:]),
        _square_gemm(1600, "matmul-1600", "optimizer case: 1600^3 matmul (undefined -> optimizer, setup() defaults)"),
        _mmnnkk(),
    ]
    return {s.name: s for s in specs}


BUILTIN_CONFIGS: dict[str, OpSpec] = _builtin()
DEFAULT_SUITE = ("gemm", "brgemm", "zero-brgemm-relu", "gemm-256", "gemm-512", "gemm-1024", "gemm-2048")
DEFAULT_SUITE += ("gemm-512-c", "gemm-2048-c", "matmul-1600", "mmnnkk")
QUICK_SUITE = ("gemm", "brgemm", "zero-brgemm-relu", "gemm-512", "gemm-1024", "gemm-1024-c")


def matmul_layout(setup: dict[str, Any]) -> tuple[int, str] | None:
    """(n, order) when the setup is a square GEMM of `_square_gemm` (order one of `LAYOUTS`: "F",
    "C", or the three letters of a mix), else None."""
    if [str(t) for t in setup["dim_types"]] != ["m", "n", "k"]:
        return None
    n = setup["dim_sizes"][0]
    got = tuple(list(setup[k]) for k in ("dim_sizes", "strides_in0", "strides_in1", "strides_out"))
    for order in LAYOUTS:
        if got == ([n] * 3, *gemm_strides(order, n)):
            return n, order
    return None


def matmul_n(setup: dict[str, Any]) -> int | None:
    """n when the setup is a square GEMM of `_square_gemm` (either storage order), else None."""
    layout = matmul_layout(setup)
    return None if layout is None else layout[0]


def _spec_from_dict(d: Any, where: str) -> OpSpec:
    if not isinstance(d, dict):
        raise UserError(f"{where}: a configuration must be a mapping, got {type(d).__name__}")
    known = {"name", "description", "peer", *SETUP_KEYS, *OPT_KEYS}
    unknown = sorted(set(d) - known)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    name = d.get("name")
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{where}: every configuration needs a non-empty string 'name'")
    where = f"{where} ({name!r})"
    required = ("prim_main", "dim_types", "dim_sizes", "strides_in0", "strides_in1", "strides_out")
    missing = [k for k in required if k not in d]
    if missing:
        raise UserError(f"{where}: missing key(s) {', '.join(missing)}")
    setup = {
        "dtype": d.get("dtype", "fp32"),
        "prim_first": d.get("prim_first", "none"),
        "prim_main": d["prim_main"],
        "prim_last": d.get("prim_last", "none"),
    }
    for k in LIST_KEYS:
        if k == "exec_types" and k not in d:
            continue
        v = d[k]
        if not isinstance(v, list):
            raise UserError(f"{where}: {k} must be a list, got {type(v).__name__}")
        setup[k] = v
    setup.setdefault("exec_types", ["undefined"] * len(setup["dim_types"]))
    for k in ("dim_sizes", "strides_in0", "strides_in1", "strides_out"):
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in setup[k]):
            raise UserError(f"{where}: {k} must be a list of integers, got {setup[k]!r}")
    options = {k: d[k] for k in OPT_KEYS if k in d and d[k] is not None}
    peer = d.get("peer", "einsum")
    if peer not in ("einsum", "matmul"):
        raise UserError(f"{where}: peer must be 'einsum' or 'matmul', got {peer!r}")
    if peer == "matmul" and matmul_n(setup) is None:
        raise UserError(f"{where}: peer 'matmul' needs a square column- or row-major GEMM (dims M, N, K)")
    return OpSpec(name, setup, options, peer, str(d.get("description", "user configuration")))


def _parse(path: str, text: str) -> Any:
    if path.lower().endswith((".yaml", ".yml")):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise UserError(f"{path}: YAML config files need PyYAML (pip install pyyaml); or use JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UserError(f"{path}: invalid YAML: {str(e).splitlines()[0]}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def load_config_file(path: str) -> list[OpSpec]:
    """User configurations from a JSON (or, with PyYAML, YAML) file.

    The file holds one configuration, a list of them, or ``{"configs": [...]}``. A
    configuration has ``name`` and setup()'s argument names (``dtype``, ``prim_first``,
    ``prim_main``, ``prim_last``, ``dim_types``, ``exec_types``, ``dim_sizes``,
    ``strides_in0``, ``strides_in1``, ``strides_out``; ``exec_types`` defaults to undefined,
    touches to none, dtype to fp32) and optionally ``optimize``, ``max_kernel_size``,
    ``min_kernel_size``, ``thread_target``, ``peer`` and ``description``.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror or e}") from None
    data = _parse(path, text)
    if isinstance(data, dict) and "configs" in data:
        data = data["configs"]
    items = data if isinstance(data, list) else [data]
    if not items:
        raise UserError(f"{path}: no configurations")
    specs = [_spec_from_dict(d, f"{path}: config {i}") for i, d in enumerate(items)]
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"{path}: duplicate configuration name(s) {', '.join(dup)}")
    return specs


def select(
    names: Sequence[str] | None, config_file: str | None, default: Sequence[str], dtype: str | None = None
) -> list[OpSpec]:
    """The configurations to run: ``names`` (each may be comma-separated) from the built-ins and
    ``config_file``; else every configuration of the file; else the built-ins ``default``; each
    at ``dtype`` (None: its own; "fp32,fp64": each configuration at both)."""
    user = load_config_file(config_file) if config_file else []
    pool = {**BUILTIN_CONFIGS, **{s.name: s for s in user}}
    if names:
        wanted = [n for item in names for n in item.split(",") if n]
        unknown = [n for n in wanted if n not in pool]
        if unknown:
            raise UserError(f"unknown config {', '.join(map(repr, unknown))}; choose from {', '.join(pool)}")
        chosen = [pool[n] for n in dict.fromkeys(wanted)]
    elif user:
        chosen = user
    else:
        chosen = [BUILTIN_CONFIGS[n] for n in default]
    if dtype and "," in dtype:  # every configuration at each element type, in the order given
        return [s.with_dtype(d) for s in chosen for d in dtype.split(",")]
    return [s.with_dtype(dtype) for s in chosen]
