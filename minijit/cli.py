"""The ``minijit`` command line: ``bench``, ``disasm`` and ``info``.

    minijit bench                       # default suite (~1 min on 2 cores): GFLOPS next to numpy
    minijit bench --quick               # small suite (~15 s)
    minijit bench --config brgemm --threads 1,2 --reps 20 --json out.json --plot out.png
    minijit bench --config-file ops.json   # user-defined tensor operations (JSON, or YAML with PyYAML)
    minijit bench --target cuda         # GPU: tensor-core GEMM / seed configs vs torch (--size, --iters, --write)
    minijit bench --spmm                # SpMM: TCA-SpMM vs cuSPARSE on a GPU, CPU kernel vs scipy (--quick, --write)
    minijit disasm --config brgemm      # the generated kernels and loop nest as assembly
    minijit info                        # host features, targets, tools

Every GFLOPS number is measured in the same run as its peers (numpy matmul for
plain GEMMs, ``np.einsum(..., optimize=True)`` for tensor configurations,
``torch.einsum`` when torch is importable), after a warm-up, as the median of
``--reps`` timed calls (``time.perf_counter``); GFLOPS = ``TensorConfig.flops()``
/ time. Errors in the arguments or a config file print one line and exit 2.
``--target cuda`` and ``--spmm`` are implemented in `minijit.bench_cuda` and `minijit.bench_spmm`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import json
import os
import pathlib
import platform
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["main", "BUILTIN_CONFIGS", "OpSpec", "load_config_file"]

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
MAX_BUFFER_BYTES = 4 << 30
#: Pause before timing minijit: OpenBLAS worker threads keep spinning for a while after a call
#: and would take a core away from minijit's threads.
SETTLE_S = 0.1


#: Optimizer options of the square GEMMs: blocks up to 256 (the setup default) with a smaller
#: minimum (4) for the outer part, so 1024/2048 get 256^3 blocks (BR 4/8) instead of 64^3/128^3.
GEMM_OPTIONS = {"max_kernel_size": 256, "min_kernel_size": 4}


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------------------------
# configurations
# ---------------------------------------------------------------------------------------------
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
        return OpSpec(self.name, {**self.setup, "dtype": dtype}, dict(self.options), self.peer, self.description)


def _seed(name: str, exec_types: list[str], first: str, main: str, last: str, desc: str) -> OpSpec:
    return OpSpec(
        name,
        {
            "dtype": "fp32",
            "prim_first": first,
            "prim_main": main,
            "prim_last": last,
            "dim_types": ["m", "n", "k", "m", "n", "k"],
            "exec_types": exec_types,
            "dim_sizes": [32, 32, 8, 32, 32, 32],
            "strides_in0": [8192, 0, 1024, 1, 0, 32],
            "strides_in1": [0, 8192, 1024, 0, 32, 1],
            "strides_out": [32768, 1024, 0, 1, 32, 0],
        },
        description=desc,
    )


def _square_gemm(n: int, name: str | None = None, **options: Any) -> OpSpec:
    return OpSpec(
        name or f"gemm-{n}",
        {
            "dtype": "fp32",
            "prim_first": "none",
            "prim_main": "gemm",
            "prim_last": "none",
            "dim_types": ["m", "n", "k"],
            "exec_types": ["undefined"] * 3,
            "dim_sizes": [n, n, n],
            "strides_in0": [1, 0, n],
            "strides_in1": [0, n, 1],
            "strides_out": [1, n, 0],
        },
        options,
        peer="matmul",
        description=f"{n}^3 column-major GEMM, dims M, N, K undefined -> optimizer",
    )


def _mmnnkk() -> OpSpec:
    # M = (m0 64, m1 25), N = (n0 64, n1 25), K = (k0 64, k1 25): a 1600^3 GEMM in six dims,
    # column-major A (M x K), B (K x N), C (M x N) with the inner part of each pair innermost.
    return OpSpec(
        "mmnnkk",
        {
            "dtype": "fp32",
            "prim_first": "none",
            "prim_main": "gemm",
            "prim_last": "none",
            "dim_types": ["m", "m", "n", "n", "k", "k"],
            "exec_types": ["undefined"] * 6,
            "dim_sizes": [64, 25, 64, 25, 64, 25],
            "strides_in0": [25, 1, 0, 0, 40000, 1600],
            "strides_in1": [0, 0, 40000, 1600, 25, 1],
            "strides_out": [25, 1, 40000, 1600, 0, 0],
        },
        # min_kernel_size 26 (> 25) lets the optimizer fuse each pair to 1600 before splitting:
        # prims 32x40x50 (BR 32) instead of 25x25x25 (BR 64); ~1.25x faster on Zen 5
        {"max_kernel_size": 256, "min_kernel_size": 26},
        description="optimizer case: dims M,M,N,N,K,K sizes 64,25,64,25,64,25 (undefined -> optimizer)",
    )


def _builtin() -> dict[str, OpSpec]:
    seq3 = ["seq", "seq", "seq", "prim", "prim", "prim"]
    seq2 = ["seq", "seq", "prim", "prim", "prim", "prim"]
    specs = [
        _seed("gemm", seq3, "none", "gemm", "none", "seed 004: (M,N,K,M,N,K) 32,32,8,32,32,32, GEMM prim"),
        _seed("brgemm", seq2, "none", "brgemm", "none", "seed 004: same dims, BRGEMM prim (BR 8)"),
        _seed("zero-brgemm-relu", seq2, "zero", "brgemm", "relu", "seed 004: zero first touch, BRGEMM, ReLU last"),
        _square_gemm(256, max_kernel_size=128, min_kernel_size=4),  # 2 M blocks: something to share
        *(_square_gemm(n, **GEMM_OPTIONS) for n in (512, 1024, 2048)),
        _square_gemm(1600, "matmul-1600"),
        _mmnnkk(),
    ]
    specs[-2].description = "optimizer case: 1600^3 matmul (undefined -> optimizer)"
    return {s.name: s for s in specs}


BUILTIN_CONFIGS: dict[str, OpSpec] = _builtin()
DEFAULT_SUITE = ("gemm", "brgemm", "zero-brgemm-relu", "gemm-256", "gemm-512", "gemm-1024", "gemm-2048")
DEFAULT_SUITE += ("matmul-1600", "mmnnkk")
QUICK_SUITE = ("gemm", "brgemm", "zero-brgemm-relu", "gemm-512", "gemm-1024")


def _spec_from_dict(d: Any, where: str) -> OpSpec:
    if not isinstance(d, dict):
        raise CliError(f"{where}: a configuration must be a mapping, got {type(d).__name__}")
    known = {"name", "description", "peer", *SETUP_KEYS, *OPT_KEYS}
    unknown = sorted(set(d) - known)
    if unknown:
        raise CliError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    name = d.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CliError(f"{where}: every configuration needs a non-empty string 'name'")
    where = f"{where} ({name!r})"
    required = ("prim_main", "dim_types", "dim_sizes", "strides_in0", "strides_in1", "strides_out")
    missing = [k for k in required if k not in d]
    if missing:
        raise CliError(f"{where}: missing key(s) {', '.join(missing)}")
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
            raise CliError(f"{where}: {k} must be a list, got {type(v).__name__}")
        setup[k] = v
    setup.setdefault("exec_types", ["undefined"] * len(setup["dim_types"]))
    for k in ("dim_sizes", "strides_in0", "strides_in1", "strides_out"):
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in setup[k]):
            raise CliError(f"{where}: {k} must be a list of integers, got {setup[k]!r}")
    options = {k: d[k] for k in OPT_KEYS if k in d and d[k] is not None}
    peer = d.get("peer", "einsum")
    if peer not in ("einsum", "matmul"):
        raise CliError(f"{where}: peer must be 'einsum' or 'matmul', got {peer!r}")
    if peer == "matmul" and _matmul_n(setup) is None:
        raise CliError(f"{where}: peer 'matmul' needs a square column-major GEMM (dims M, N, K)")
    return OpSpec(name, setup, options, peer, str(d.get("description", "user configuration")))


def load_config_file(path: str) -> list[OpSpec]:
    """User configurations from a JSON (or, with PyYAML, YAML) file.

    The file holds one configuration, a list of them, or ``{"configs": [...]}``. A
    configuration has ``name`` and setup()'s argument names (``dtype``, ``prim_first``,
    ``prim_main``, ``prim_last``, ``dim_types``, ``exec_types``, ``dim_sizes``,
    ``strides_in0``, ``strides_in1``, ``strides_out``; ``exec_types`` defaults to undefined,
    touches to none, dtype to fp32) and optionally ``optimize``, ``max_kernel_size``,
    ``min_kernel_size``, ``thread_target`` and ``description``.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"cannot read config file {path}: {e.strerror or e}") from None
    is_yaml = path.lower().endswith((".yaml", ".yml"))
    if is_yaml:
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise CliError(f"{path}: YAML config files need PyYAML (pip install pyyaml); or use JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise CliError(f"{path}: invalid YAML: {str(e).splitlines()[0]}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CliError(f"{path}: invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if isinstance(data, dict) and "configs" in data:
        data = data["configs"]
    items = data if isinstance(data, list) else [data]
    if not items:
        raise CliError(f"{path}: no configurations")
    specs = [_spec_from_dict(d, f"{path}: config {i}") for i, d in enumerate(items)]
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CliError(f"{path}: duplicate configuration name(s) {', '.join(dup)}")
    return specs


def _select(args: argparse.Namespace, default: Sequence[str]) -> list[OpSpec]:
    user = load_config_file(args.config_file) if args.config_file else []
    pool = {**BUILTIN_CONFIGS, **{s.name: s for s in user}}
    if args.config:
        names = [n for item in args.config for n in item.split(",") if n]
        unknown = [n for n in names if n not in pool]
        if unknown:
            raise CliError(f"unknown config {', '.join(map(repr, unknown))}; choose from {', '.join(pool)}")
        chosen = [pool[n] for n in dict.fromkeys(names)]
    elif user:
        chosen = user
    else:
        chosen = [BUILTIN_CONFIGS[n] for n in default]
    return [s.with_dtype(args.dtype) for s in chosen]


# ---------------------------------------------------------------------------------------------
# operations, arrays and peers
# ---------------------------------------------------------------------------------------------
def _matmul_n(setup: dict[str, Any]) -> int | None:
    """n when the setup is the square column-major GEMM of `_square_gemm`, else None."""
    if [str(t) for t in setup["dim_types"]] != ["m", "n", "k"]:
        return None
    n = setup["dim_sizes"][0]
    want = ([n] * 3, [1, 0, n], [0, n, 1], [1, n, 0])
    got = tuple(list(setup[k]) for k in ("dim_sizes", "strides_in0", "strides_in1", "strides_out"))
    return n if got == want else None


def _make_op(spec: OpSpec, threads: int, target: str):
    """A set-up TensorOperation for ``spec`` (CliError on any setup failure)."""
    from minijit import SetupError, TensorOperation

    opts = dict(spec.options)
    opt = opts.pop("optimize", None)
    has_prims = any(str(e).lower() == "prim" for e in spec.setup["exec_types"])
    if opt is None and has_prims and threads > 1:
        opt = True  # given prims: the optimizer keeps them and adds the shared loops
    opts.setdefault("thread_target", threads)
    try:
        op = TensorOperation(target=target, num_threads=threads)
        op.setup(**spec.setup, optimize=opt, **opts)
    except SetupError as e:
        raise CliError(f"config {spec.name!r}: setup failed: {e}") from None
    except (ValueError, TypeError, NotImplementedError) as e:
        raise CliError(f"config {spec.name!r}: {e}") from None
    return op


@dataclass
class Operands:
    """Flat buffers of the three tensors and numpy views over the elements the op touches."""

    flats: dict[str, np.ndarray]
    base: dict[str, int]
    views: dict[str, np.ndarray]
    subscripts: dict[str, str]
    dims: list[Any]

    def array(self, t: str) -> np.ndarray:
        """The buffer handed to execute(): the flat array from the tensor's first element on."""
        return self.flats[t][self.base[t] :]


def _operands(config, seed: int = 0) -> Operands:
    from minijit.ir import offset_range

    dt = config.dtype.numpy
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if len(config.dims) > len(letters):
        raise CliError(f"too many dims ({len(config.dims)}) for an einsum peer")
    flats, base, views, subs = {}, {}, {}, {}
    total = 0
    for t in ("in0", "in1", "out"):
        lo, hi = offset_range(config, t)
        n = hi - lo + 1
        total += n * dt.itemsize
        if total > MAX_BUFFER_BYTES:
            raise CliError(f"the tensors need more than {MAX_BUFFER_BYTES >> 30} GiB")
        flat = np.zeros(n, dt) if t == "out" else rng.uniform(-1, 1, n).astype(dt)
        flats[t], base[t] = flat, -lo
        used = [(i, d) for i, d in enumerate(config.dims) if d.stride(t) != 0]
        shape = tuple(d.size for _, d in used)
        strides = tuple(d.stride(t) * dt.itemsize for _, d in used)
        views[t] = np.lib.stride_tricks.as_strided(flat[-lo:], shape, strides, writeable=t == "out")
        subs[t] = "".join(letters[i] for i, _ in used)
    return Operands(flats, base, views, subs, list(config.dims))


def _reference(config, ops: Operands) -> Callable[[], np.ndarray]:
    """numpy computing what execute() writes into the out view (from a zeroed out)."""
    from minijit.ir import ptype_t

    main, v, s = config.prim_main, ops.views, ops.subscripts
    if main in (ptype_t.gemm, ptype_t.brgemm):
        expr = f"{s['in0']},{s['in1']}->{s['out']}"

        def f() -> np.ndarray:
            r = np.einsum(expr, v["in0"], v["in1"], optimize=True)
            return np.maximum(r, 0) if config.prim_last is ptype_t.relu else r

        return f
    full = {}
    for t in ("in0", "in1"):  # broadcast views over every dim, in the out view's dim order
        order = [ops.subscripts[t].find(c) for c in ops.subscripts["out"]]
        arr = v[t]
        full[t] = np.lib.stride_tricks.as_strided(
            arr, v["out"].shape, tuple(arr.strides[j] if j >= 0 else 0 for j in order)
        )
    ufuncs = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum}
    ufuncs["max"] = np.maximum
    if main.name in ufuncs:
        return lambda: ufuncs[main.name](full["in0"], full["in1"])
    if main is ptype_t.zero:
        return lambda: np.zeros(v["out"].shape, v["out"].dtype)
    if main is ptype_t.relu:
        return lambda: np.maximum(full["in0"], 0)
    return lambda: full["in0"].copy()


class _BlasThreads:
    """Set numpy's BLAS thread count (threadpoolctl, else the OpenBLAS symbol of the loaded library)."""

    def __init__(self) -> None:
        self._set: Callable[[int], None] | None = None
        self._get: Callable[[], int] | None = None
        self.how = "unavailable"
        try:
            import threadpoolctl  # type: ignore[import-not-found]

            ctl = threadpoolctl.ThreadpoolController()
            blas = ctl.select(user_api="blas")
            if blas.lib_controllers:
                self._set = lambda n: [c.set_num_threads(n) for c in blas.lib_controllers] and None
                self._get = lambda: blas.lib_controllers[0].num_threads
                self.how = "threadpoolctl"
                return
        except Exception:
            pass
        lib = self._openblas()
        if lib is None:
            return
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", "_64_", ""):
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                    self._set, self._get, self.how = setter, getter, "openblas"
                    return

    @staticmethod
    def _openblas() -> ctypes.CDLL | None:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
        except OSError:
            return None
        for p in sorted(paths):
            try:
                return ctypes.CDLL(p)
            except OSError:
                continue
        return None

    @contextlib.contextmanager
    def limit(self, n: int) -> Iterator[bool]:
        """Run the block with ``n`` BLAS threads; yields whether the limit could be set."""
        if self._set is None or self._get is None:
            yield False
            return
        old = self._get()
        self._set(n)
        try:
            yield True
        finally:
            self._set(old)


def _torch():
    try:
        import torch  # type: ignore[import-not-found]
    except Exception:
        return None
    return torch


def _timeit(fn: Callable[[], object], reps: int, warmup: int = 1, min_warm_s: float = 0.05) -> float:
    """Median of ``reps`` timed calls after ``warmup`` calls (more while under ``min_warm_s``)."""
    t0 = time.perf_counter()
    for _ in range(max(warmup, 1)):
        fn()
    while time.perf_counter() - t0 < min_warm_s:
        fn()
    times = []
    for _ in range(max(reps, 1)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------
def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _bench_one(spec: OpSpec, threads: int, args: argparse.Namespace, blas: _BlasThreads) -> dict[str, Any]:
    t0 = time.perf_counter()
    op = _make_op(spec, threads, args.target)
    setup_s = time.perf_counter() - t0
    cfg = op.config
    ops = _operands(cfg)
    a0, a1, ao = ops.array("in0"), ops.array("in1"), ops.array("out")
    flops = cfg.flops()

    # correctness once: out zeroed, one execute, compared with numpy
    ops.flats["out"][:] = 0
    op.execute(a0, a1, ao)
    ref = _reference(cfg, ops)()
    got = ops.views["out"]
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    tol = (1e-4 if cfg.dtype.name == "fp32" else 1e-10) * max(scale, 1.0)
    check = {"max_abs_err": err, "max_abs_ref": scale, "ok": bool(err <= tol)}

    time.sleep(SETTLE_S)  # let the previous peer's BLAS threads stop spinning
    t_mj = _timeit(lambda: op.execute(a0, a1, ao), args.reps)
    row: dict[str, Any] = {
        "config": spec.name,
        "description": spec.description,
        "dtype": cfg.dtype.name,
        "threads": threads,
        "target": op.target,
        "flops": flops,
        "setup_s": round(setup_s, 4),
        "time_s": t_mj,
        "gflops": flops / t_mj / 1e9 if flops else None,
        "check": check,
        "optimized_config": str(cfg),
        "peers": [],
    }

    def add_peer(name: str, fn: Callable[[], object], peer_threads: int | str) -> None:
        t = _timeit(fn, args.reps)
        row["peers"].append(
            {
                "name": name,
                "threads": peer_threads,
                "time_s": t,
                "gflops": flops / t / 1e9 if flops else None,
                "ratio": t / t_mj,  # minijit GFLOPS / peer GFLOPS
            }
        )

    v = ops.views
    with blas.limit(threads) as limited:
        peer_threads: int | str = threads if limited else "default"
        time.sleep(SETTLE_S)
        n = _matmul_n(spec.setup) if spec.peer == "matmul" else None
        if n is not None:
            # column-major C = A B is row-major c = b @ a over the same buffers
            a2 = ops.array("in0")[: n * n].reshape(n, n)
            b2 = ops.array("in1")[: n * n].reshape(n, n)
            c2 = ops.array("out")[: n * n].reshape(n, n)
            add_peer("numpy.matmul", lambda: np.matmul(b2, a2, out=c2), peer_threads)
        elif cfg.prim_main.name in ("gemm", "brgemm"):
            expr = f"{ops.subscripts['in0']},{ops.subscripts['in1']}->{ops.subscripts['out']}"
            add_peer("numpy.einsum", lambda: np.einsum(expr, v["in0"], v["in1"], optimize=True), peer_threads)
        else:
            add_peer("numpy", _reference(cfg, ops), peer_threads)
    torch = _torch()
    if torch is not None and cfg.prim_main.name in ("gemm", "brgemm"):
        expr = f"{ops.subscripts['in0']},{ops.subscripts['in1']}->{ops.subscripts['out']}"
        x, y = torch.from_numpy(np.ascontiguousarray(v["in0"])), torch.from_numpy(np.ascontiguousarray(v["in1"]))
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            add_peer("torch.einsum", lambda: torch.einsum(expr, x, y), threads)
        finally:
            torch.set_num_threads(old)
    return row


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table (peers in the order they were measured)."""
    peer_names = list(dict.fromkeys(p["name"].split(".")[0] for r in rows for p in r["peers"]))
    head = ["config", "dtype", "threads", "time ms", "minijit GFLOPS"]
    for pn in peer_names:
        head += [f"{pn} GFLOPS", f"minijit/{pn}"]
    head.append("check")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["config"], r["dtype"], str(r["threads"]), f"{r['time_s'] * 1e3:.3f}", _fmt(r["gflops"])]
        for pn in peer_names:
            p = next((p for p in r["peers"] if p["name"].split(".")[0] == pn), None)
            if p is None:
                cells += ["-", "-"]
            else:
                label = p["name"].split(".")[-1] if "." in p["name"] else ""
                g = p["gflops"] if p["gflops"] is not None else None
                cells += [f"{_fmt(g)}" + (f" ({label})" if label else ""), f"{p['ratio']:.2f}x"]
        cells.append("ok" if r["check"]["ok"] else f"ERR {r['check']['max_abs_err']:.2g}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _hardware() -> dict[str, Any]:
    from minijit.kernels import native_target
    from minijit.runtime.features import cpu_name, host, num_cpus

    h = host()
    flags = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "neon", "sve", "bf16") if getattr(h, f)]
    info: dict[str, Any] = {
        "cpu": cpu_name(),
        "cores": num_cpus(),
        "isa": h.isa,
        "os": h.os,
        "flags": flags,
        "native_target": native_target(),
    }
    if h.sve:
        info["sve_vl_bits"] = h.sve_vl_bits
    return info


def _versions() -> dict[str, Any]:
    import minijit

    v: dict[str, Any] = {"minijit": minijit.__version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.26
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        v["blas"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:
        pass
    torch = _torch()
    if torch is not None:
        v["torch"] = torch.__version__
    return v


def _threads_list(values: list[str] | None) -> list[int]:
    from minijit import parallel

    if not values:
        all_ = parallel.default_threads()
        return [all_, 1] if all_ > 1 else [1]
    out = []
    for item in values:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                out.append(parallel.default_threads())
                continue
            try:
                n = int(part)
            except ValueError:
                raise CliError(f"--threads takes positive integers or 'all', got {part!r}") from None
            if n < 1:
                raise CliError(f"--threads takes positive integers, got {n}")
            out.append(n)
    return list(dict.fromkeys(out))


def _check_native(target: str) -> str:
    from minijit.kernels import check_target
    from minijit.runtime import runs_natively

    try:
        resolved = check_target(target)
    except ValueError as e:
        raise CliError(str(e)) from None
    if not runs_natively(resolved.split("-")[0]):
        raise CliError(f"bench needs a target this host runs natively; {resolved} would be emulated")
    if resolved == "x86_64-avx512":
        from minijit.runtime import host

        if not host().avx512:
            raise CliError("target x86_64-avx512 needs AVX-512 F/BW/VL, which this CPU lacks")
    return resolved


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """A grouped bar chart of minijit and peer GFLOPS per (config, threads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['config']}\n{r['threads']}T" for r in rows]
    series = {"minijit": [r["gflops"] or 0.0 for r in rows]}
    for r in rows:
        for p in r["peers"]:
            series.setdefault(p["name"], [0.0] * len(rows))
    for i, r in enumerate(rows):
        for p in r["peers"]:
            series[p["name"]][i] = p["gflops"] or 0.0
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    for j, (name, vals) in enumerate(series.items()):
        ax.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(rows))], vals, width, label=name)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("GFLOPS")
    ax.set_title("minijit vs. peers (same run)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    """Date and command of a result."""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": "minijit " + shlex.join(args.argv),
    }


def _write_json(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if not args.json:
        return
    try:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise CliError(f"cannot write {args.json}: {e.strerror or e}") from None
    _progress(f"wrote {args.json}", args.quiet)


def results_dir() -> pathlib.Path:
    """``bench/results`` of the source tree minijit runs from, else ``./bench/results``."""
    tree = pathlib.Path(__file__).resolve().parents[1] / "bench"
    return (tree if tree.is_dir() else pathlib.Path.cwd() / "bench") / "results"


def _write_results(args: argparse.Namespace, name: str, title: str, facts: list[str], body: list[str]) -> None:
    """With ``--write``: ``results_dir()/name`` as Markdown (title, ``- fact`` lines, the report)."""
    if not args.write:
        return
    path = results_dir() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join([f"# {title}", "", *(f"- {f}" for f in facts), "", *body, ""]), encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None
    _progress(f"wrote {path}", args.quiet)


def _bench_mode(args: argparse.Namespace) -> str:
    """The bench mode: cpu, cuda (``--target cuda``) or spmm (``--spmm``); CliError for options it does not take."""
    mode = "spmm" if args.spmm else "cuda" if args.target == "cuda" else "cpu"
    if mode == "spmm" and args.target != "native":
        raise CliError(
            f"--spmm chooses its devices itself (the GPU when one answers, and the CPU); drop --target {args.target}"
        )
    if mode != "cpu":
        flag = "--target cuda" if mode == "cuda" else "--spmm"
        opts = {"--config": args.config, "--config-file": args.config_file, "--dtype": args.dtype, "--plot": args.plot}
        if mode == "cuda":
            opts["--threads"] = args.threads
        given = [o for o, v in opts.items() if v]
        if given:
            raise CliError(f"{flag} runs its own cases; it does not take {', '.join(given)}")
    if args.size is not None and mode != "cuda":
        raise CliError("--size (the GEMM size) applies only to --target cuda")
    if args.spmm_n is not None and mode != "spmm":
        raise CliError("--spmm-n applies only to --spmm")
    if args.write and mode == "cpu":
        raise CliError("--write applies to --target cuda and --spmm; the CPU suite writes --json PATH")
    return mode


def _default_reps(args: argparse.Namespace) -> int:
    if args.spmm:
        return 3 if args.quick else 5
    if args.target == "cuda":
        return 10 if args.quick else 20
    return 5 if args.quick else 10


def _bench_cuda(args: argparse.Namespace) -> int:
    from minijit import bench_cuda

    size = args.size if args.size is not None else bench_cuda.QUICK_SIZE if args.quick else bench_cuda.SIZE
    if not bench_cuda.MIN_SIZE <= size <= bench_cuda.MAX_SIZE:
        raise CliError(f"--size must be in {bench_cuda.MIN_SIZE}..{bench_cuda.MAX_SIZE}, got {size}")
    why = bench_cuda.missing()
    if why:
        raise CliError(f"--target cuda: {why}")
    started = time.perf_counter()
    rows = bench_cuda.run(size, args.reps, lambda msg: _progress(msg, args.quiet))
    env = bench_cuda.environment()
    print(f"# minijit bench --target cuda: {env['device']}, driver {env['driver']}, size {size}, iters {args.reps}")
    table = bench_cuda.table(rows)
    print(table)
    meta = _meta(args)
    settings = {"size": size, "iters": args.reps, "warmup": bench_cuda.WARMUP, "measurement": bench_cuda.TIMING}
    result = {**meta, "device": env, "versions": _versions(), "settings": settings}
    _write_json(args, {**result, "elapsed_s": round(time.perf_counter() - started, 2), "results": rows})
    facts = [f"{k}: {v}" for k, v in env.items()]
    facts += [f"date: {meta['date']}", f"command: `{meta['command']}`", f"timing: {bench_cuda.TIMING}"]
    facts.append("fp32 rows: minijit tf32 (cvt.rna, fp32 C) vs torch with allow_tf32; torch's C has the input dtype")
    date = meta["date"][:10]
    _write_results(args, f"cuda_{date}.md", "CUDA GEMM/BRGEMM: minijit vs torch (cuBLAS)", facts, [table])
    return 0 if all(r["check"]["ok"] for r in rows) else 1


def _spmm_ns(args: argparse.Namespace) -> list[int]:
    from minijit.sparse.cpu import MAX_N

    if args.spmm_n is None:
        return [64, 128] if args.quick else [128, 256, 512]
    out = []
    for part in args.spmm_n.split(","):
        try:
            n = int(part)
        except ValueError:
            raise CliError(f"--spmm-n takes comma-separated integers, got {part.strip()!r}") from None
        if not 1 <= n <= MAX_N:
            raise CliError(f"--spmm-n values must be in 1..{MAX_N}, got {n}")
        out.append(n)
    return list(dict.fromkeys(out))


def _bench_spmm(args: argparse.Namespace) -> int:
    from minijit.parallel import default_threads

    ns = _spmm_ns(args)
    threads = _threads_list(args.threads) if args.threads else [default_threads()]
    if len(threads) != 1:
        raise CliError(f"--spmm takes one --threads value, got {','.join(map(str, threads))}")
    try:
        import scipy  # type: ignore[import-untyped]
    except ImportError:
        raise CliError("--spmm needs scipy (the CPU peer and the check): pip install scipy") from None
    from minijit import bench_spmm
    from ptx import driver

    def progress(msg: str) -> None:
        _progress(msg, args.quiet)

    started = time.perf_counter()
    mats = bench_spmm.matrices(np.random.default_rng(2026), quick=args.quick)
    gpu, note, device = None, "", None
    if not driver.available():
        note = "GPU rows pending: no CUDA device here (ptx.driver.available() is False); CPU section only."
    elif bench_spmm.gpu_peer() is None:
        note = "GPU rows skipped: no cuSPARSE peer (torch with CUDA, or cupy) is importable; CPU section only."
    else:
        device = f"{driver.device().name} ({driver.device().arch})"
        gpu = bench_spmm.gpu_rows(mats, ns, args.reps, progress)
    cpu = bench_spmm.cpu_rows(mats, ns, args.reps, threads[0], progress)
    body = bench_spmm.sections(gpu, cpu, note)
    hw = _hardware()
    how = f"best of {args.reps} after a warm-up; GFLOPS = 2 nnz N / time"
    print(
        f"# minijit bench --spmm: {hw['cpu'] or hw['isa']}, minijit threads {threads[0]} (scipy single-threaded),"
        f" N {','.join(map(str, ns))}, {'quick ' if args.quick else ''}matrices, {how}"
    )
    print("\n".join(body))
    meta = _meta(args)
    rows = [*(gpu or []), *cpu]
    settings = {"n": ns, "reps": args.reps, "threads": threads[0], "quick": args.quick, "measurement": how}
    versions = {**_versions(), "scipy": scipy.__version__}
    result = {**meta, "hardware": hw, "gpu": device or note, "versions": versions, "settings": settings}
    parts = (("gpu", gpu or []), ("cpu", cpu))
    result["geomean_speedup"] = {k: bench_spmm.geomean([r["speedup"] for r in v]) for k, v in parts if v}
    _write_json(args, {**result, "elapsed_s": round(time.perf_counter() - started, 2), "results": rows})
    facts = [f"CPU: {hw['cpu'] or hw['isa']} ({hw['isa']}), minijit threads: {threads[0]}; scipy is single-threaded"]
    facts += [f"GPU: {device}"] if device else []
    facts += [f"date: {meta['date']}", f"command: `{meta['command']}`", f"timing: {how}"]
    facts.append("CPU: fp32 S (CSR) x fp32 B (row-major) -> fp32 C; GPU: fp16 S and B -> fp32 C")
    name = f"spmm_{meta['date'][:10]}.md" if gpu else f"spmm_cpu_{meta['date'][:10]}.md"
    _write_results(args, name, "SpMM: minijit vs cuSPARSE (GPU) and scipy (CPU)", facts, body)
    return 0 if all(r["check"]["ok"] for r in rows) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    mode = _bench_mode(args)
    if args.reps < 1:
        raise CliError(f"--reps must be >= 1, got {args.reps}")
    if mode == "cuda":
        return _bench_cuda(args)
    if mode == "spmm":
        return _bench_spmm(args)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot needs matplotlib: pip install matplotlib (or 'minijit[plot]')") from None
    target = _check_native(args.target)
    specs = _select(args, QUICK_SUITE if args.quick else DEFAULT_SUITE)
    threads = _threads_list(args.threads)
    blas = _BlasThreads()
    rows = []
    total = len(specs) * len(threads)
    started = time.perf_counter()
    for spec in specs:
        for th in threads:
            _progress(f"[{len(rows) + 1}/{total}] {spec.name} {spec.setup['dtype']} threads={th} ...", args.quiet)
            row = _bench_one(spec, th, args, blas)
            rows.append(row)
            peers = ", ".join(f"{p['name']} {_fmt(p['gflops'])} ({p['ratio']:.2f}x)" for p in row["peers"])
            status = "" if row["check"]["ok"] else f"  WRONG RESULT (max err {row['check']['max_abs_err']:.3g})"
            _progress(f"    minijit {_fmt(row['gflops'])} GFLOPS; {peers}{status}", args.quiet)
    hw = _hardware()
    print(f"# minijit bench: {hw['cpu'] or hw['isa']}, {hw['cores']} cores, {target}, reps {args.reps} (median)")
    if blas.how == "unavailable":
        print("# note: numpy's BLAS thread count could not be set; peers used their default threads")
    print(format_table(rows))
    result = {
        **_meta(args),
        "hardware": hw,
        "versions": _versions(),
        "settings": {
            "target": target,
            "reps": args.reps,
            "threads": threads,
            "blas_threads_control": blas.how,
            "measurement": "warm-up, then median of reps time.perf_counter() calls; GFLOPS = TensorConfig.flops()/time",
        },
        "elapsed_s": round(time.perf_counter() - started, 2),
        "results": rows,
    }
    _write_json(args, result)
    if args.plot:
        plot(rows, args.plot)
        _progress(f"wrote {args.plot}", args.quiet)
    return 0 if all(r["check"]["ok"] for r in rows) else 1


# ---------------------------------------------------------------------------------------------
# disasm, info
# ---------------------------------------------------------------------------------------------
def cmd_disasm(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.kernels import check_target

    try:
        check_target(args.target)
    except ValueError as e:
        raise CliError(str(e)) from None
    specs = _select(args, ())
    if not specs:
        raise CliError("disasm needs --config NAME (or --config-file PATH)")
    threads = args.threads_n or parallel.default_threads()
    for spec in specs:
        op = _make_op(spec, threads, args.target)
        print(f"// ==== {spec.name}: {spec.description}")
        print(op.listing())
    return 0


TOOLS = ("llvm-mc", "llvm-mc-19", "llvm-mca", "llvm-mca-19", "qemu-aarch64", "ptxas")


def cmd_info(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.kernels import TARGETS
    from minijit.runtime import host, runs_natively

    hw = _hardware()
    h = host()
    qemu = shutil.which("qemu-aarch64")
    targets = {}
    for t in TARGETS:
        isa = t.split("-")[0]
        if runs_natively(isa):
            ok = not (t == "x86_64-avx512" and not h.avx512) and not (t == "aarch64-sve" and not h.sve)
            targets[t] = "native" if ok else "not supported by this CPU"
        elif isa == "aarch64":
            targets[t] = "emulated (qemu-aarch64)" if qemu else "unavailable (no qemu-aarch64)"
        else:
            targets[t] = "unavailable on this host"
    info = {
        "hardware": hw,
        "default_threads": parallel.default_threads(),
        "targets": targets,
        "tools": {tool: shutil.which(tool) for tool in TOOLS},
        "versions": _versions(),
        "optional": {m: _importable(m) for m in ("torch", "matplotlib", "yaml", "threadpoolctl")},
    }
    if args.json_out:
        print(json.dumps(info, indent=2))
        return 0
    print(f"CPU:      {hw['cpu'] or '?'} ({hw['isa']}, {hw['os']}), {hw['cores']} cores")
    print(f"features: {' '.join(hw['flags']) or '-'}")
    print(f"threads:  {info['default_threads']} (MINIJIT_NUM_THREADS / OMP_NUM_THREADS / CPU count)")
    print(f"native:   {hw['native_target']}")
    print("targets:")
    for t, s in targets.items():
        print(f"  {t:<15} {s}")
    print("tools:")
    for tool, p in info["tools"].items():
        print(f"  {tool:<15} {p or 'not found'}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print("optional: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in info["optional"].items()))
    return 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ---------------------------------------------------------------------------------------------
# argument parsing
# ---------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise CliError(message)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    names = ", ".join(BUILTIN_CONFIGS)
    p.add_argument(
        "--config",
        action="append",
        metavar="NAME",
        help=f"configuration (repeatable, or comma-separated): {names}, or a name from --config-file",
    )
    p.add_argument("--config-file", metavar="PATH", help="JSON (or YAML) file of user tensor operations")
    p.add_argument("--dtype", choices=("fp32", "fp64"), help="element type (default: fp32 / the file's)")
    p.add_argument(
        "--target",
        default="native",
        help="native (default), x86_64-avx512, x86_64-avx2, aarch64-...; bench: cuda (GPU GEMM rows vs torch)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minijit", description="minijit: JIT tensor operations; benchmark, listings, host info")
    sub = parser.add_subparsers(dest="command", metavar="{bench,disasm,info}", parser_class=_Parser)
    sub.required = True

    b = sub.add_parser("bench", help="GFLOPS of tensor operations next to numpy (and torch) in the same run")
    _add_config_args(b)
    b.add_argument("--threads", action="append", metavar="N", help="threads (repeatable or list: 1,2; default all,1)")
    b.add_argument(
        "--reps",
        "--iters",
        dest="reps",
        type=int,
        default=None,
        help="timed repetitions per measurement (CPU: median, default 10; cuda: mean of CUDA-event-timed"
        " iterations, default 20; --spmm: best of, default 5)",
    )
    b.add_argument(
        "--quick", action="store_true", help="a small suite (~15 s); cuda: size 4096; --spmm: small matrices (s)"
    )
    b.add_argument("--size", type=int, default=None, help="--target cuda: M = N = K of the GEMM (default 8192)")
    b.add_argument(
        "--spmm",
        action="store_true",
        help="SpMM rows: TCA-SpMM vs cuSPARSE on a GPU (when one answers), the CPU kernel vs scipy",
    )
    b.add_argument("--spmm-n", metavar="N,N,...", help="--spmm: dense column counts N (default 128,256,512)")
    b.add_argument("--write", action="store_true", help="cuda / --spmm: also write a Markdown file to bench/results/")
    b.add_argument("--json", metavar="PATH", help="write the results (with hardware, date, command, versions)")
    b.add_argument("--plot", metavar="PATH", help="bar chart PNG (needs matplotlib)")
    b.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    b.set_defaults(func=cmd_bench)

    d = sub.add_parser("disasm", help="set up a configuration and print its kernels and loop nest")
    _add_config_args(d)
    d.add_argument("--threads", dest="threads_n", type=int, default=None, help="thread target of the optimizer")
    d.set_defaults(func=cmd_disasm)

    i = sub.add_parser("info", help="host features, targets and tools")
    i.add_argument("--json", dest="json_out", action="store_true", help="print as JSON")
    i.set_defaults(func=cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv
        if args.command == "bench" and args.reps is None:
            args.reps = _default_reps(args)
        if args.command == "disasm" and args.threads_n is not None and args.threads_n < 1:
            raise CliError(f"--threads must be >= 1, got {args.threads_n}")
        return int(args.func(args) or 0)
    except CliError as e:
        print(f"minijit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("minijit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `minijit disasm ... | head`
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
