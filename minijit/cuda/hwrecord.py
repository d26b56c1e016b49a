"""Record a GPU's results for the simulator to be held to: the float-op corpus of
`ptx.hwcorpus` and one small launch per kernel family, in ``tests/data/hw/<arch>.npz``.

    python -m minijit.cuda.hwrecord --out tests/data/hw     # on a GPU (scripts/gpu-check --record)

`LAUNCHES` holds the launches: the mma.sync GEMM and the sm_90a GEMM in fp16, bf16 and tf32
(C = A B with K-major A and B; the tf32 operands sit between two tf32 values, 3/4 of a tf32 ulp
above the lower, so a chip that truncates them and a simulator that rounds them apart differ by
far more than the accumulation bound), the elementwise kernels (``min`` with a broadcast input
and a transposed output, ``relu``; NaN payloads, signed zeros, infinities, subnormals) and both
SpMM kernels (TCA-SpMM in fp16, bf16 and tf32 with a row long enough for its reduction kernel;
row windows of 16 and 8 rows). Inputs come from fixed seeds and are stored with the results, so a
record stays checkable when the generators change.

`check_launch` reruns a recorded launch in the simulator: the elementwise kernels must give the
same bits; GEMM and SpMM outputs accumulate in fp32 in an order the hardware chooses, so they
must agree within twice `accumulation_bound` (each side within it of the exact sum of the
products of the operands as the kernel rounds them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ptx import hwcorpus as H

__all__ = [
    "LAUNCHES",
    "LaunchCase",
    "FALSE_ALARM",
    "accumulation_bound",
    "check_launch",
    "gamma",
    "launch_entry",
    "record",
]

#: unit roundoff of one fp32 accumulation step of a tensor core: 2^-23, not IEEE's 2^-24, since
#: the tensor cores align the significands of a block's products and truncate the bits shifted
#: out (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021)
U_ACC = 2.0**-23
#: the smallest fp32 subnormal: the absolute error one rounding may add below the normal range
TINY = 2.0**-149
#: probability that a correct launch has any of its ``checked`` elements outside the bound, under
#: the rounding-error model of `accumulation_bound`
FALSE_ALARM = 1e-6


def gamma(n: np.ndarray | int, u: float = U_ACC) -> np.ndarray:
    """gamma_n = n u / (1 - n u): the relative error bound of n roundings (Higham, ASNA 3.1)."""
    nu = np.asarray(n, np.float64) * u
    if np.any(nu >= 1):
        raise ValueError(f"gamma_n needs n u < 1, got n = {np.max(n)}, u = {u}")
    return nu / (1 - nu)


def accumulation_bound(terms: np.ndarray | int, scale: np.ndarray, checked: int | None = None) -> np.ndarray:
    """The bound on |computed - exact| per element of an fp32 accumulation of ``terms`` exact
    products (C counted as one) whose absolute values sum to ``scale`` (float64, any shape), in
    any order and blocking, when ``checked`` elements are compared (None: any number). The one
    bound every GPU and simulator result is held to (docs/decisions.md, "One accumulation bound").

    Model: n = 2 ``terms`` roundings (each product when a block aligns it, each block sum when it
    joins the accumulator), rounding i adding e_i with |e_i| <= `U_ACC` |S_i| <= `U_ACC` scale
    (plus `TINY` below the normal range). Worst case: gamma_n scale. Statistically, e_i
    independent with E[e_i^2] <= (`U_ACC` scale)^2 / 3 (uniform in +-u, or truncation's [-u, 0]
    with its mean: both have that second moment): the sum is about normal with sigma =
    `U_ACC` sqrt(n / 3) scale, and z sigma with z = sqrt(2 ln(2 ``checked`` / `FALSE_ALARM`))
    is crossed by any of ``checked`` correct elements with probability under `FALSE_ALARM`; plus
    one ulp for the final store. The bound is the smaller of the two; products of fp16, bf16 and
    tf32 operands are exact in fp32."""
    n = 2 * np.maximum(np.asarray(terms), 1)
    scale = np.asarray(scale, np.float64)
    worst = gamma(n) * scale
    if checked is not None:
        z = math.sqrt(2.0 * math.log(2.0 * max(int(checked), 1) / FALSE_ALARM))
        worst = np.minimum(worst, (z * np.sqrt(n / 3.0) + 1.0) * U_ACC * scale)
    return worst + n * TINY


# --------------------------------------------------------------------------- launch cases


@dataclass(frozen=True)
class LaunchCase:
    """One launch of a kernel family: ``make()`` gives its fixed inputs (arrays) and parameters
    (JSON); ``execute(driver, arrays, params)`` runs it and returns C (float32); ``terms(arrays,
    params)`` gives, per element of C, the number of products and the sum of their absolute
    values (None: the kernel computes each element exactly once, bits must match)."""

    name: str
    family: str  #: a `minijit.cuda.families.FAMILIES` name
    variant: str  #: the family's variant it runs
    make: Callable[[], tuple[dict[str, np.ndarray], dict[str, Any]]]
    execute: Callable[[Any, dict[str, np.ndarray], dict[str, Any]], np.ndarray]
    terms: Callable[[dict[str, np.ndarray], dict[str, Any]], tuple[np.ndarray, np.ndarray]] | None


def _as_float(dtype: str, x: np.ndarray) -> np.ndarray:
    """Stored operand values as float64 (bf16 arrays hold uint16 bit patterns)."""
    from ptx.mma import bf16_bits_to_f32

    return (bf16_bits_to_f32(x) if dtype == "bf16" else np.asarray(x, np.float32)).astype(np.float64)


def _quantized(dtype: str, x: np.ndarray) -> np.ndarray:
    """Operand values as the kernel multiplies them (tf32: cvt.rna.tf32.f32 of the fp32 value)."""
    from ptx.mma import round_tf32

    v = _as_float(dtype, x)
    return round_tf32(v.astype(np.float32)).astype(np.float64) if dtype in ("fp32", "tf32") else v


def _tf32_off_grid(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Positive fp32 values 3/4 of a tf32 ulp above a tf32 value: rounding to nearest goes up,
    truncation down, on every element."""
    x = (np.abs(rng.standard_normal(shape)) + 0.25).astype(np.float32)
    u = (x.view(np.uint32) & np.uint32(0xFFFFE000)) | np.uint32(0x1800)
    return u.view(np.float32)


def _gemm_case(family: str, dtype: str, m: int, n: int, k: int, seed: int) -> LaunchCase:
    def make() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        from ptx.mma import f32_to_bf16_bits

        rng = np.random.default_rng(seed)
        if dtype == "fp32":
            a, b = _tf32_off_grid(rng, (m, k)), _tf32_off_grid(rng, (n, k))
        else:
            a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
            a, b = (x.astype(np.float16) if dtype == "fp16" else f32_to_bf16_bits(x) for x in (a, b))
        return {"a": a, "b": b}, {"family": family, "dtype": dtype, "m": m, "n": n, "k": k}

    fam = {"mma.sync": "mma.sync GEMM", "sm90a": "sm90a GEMM (wgmma/TMA)"}[family]
    return LaunchCase(f"gemm.{family}.{dtype}", fam, dtype, make, _gemm_execute, _gemm_terms)


def _gemm_execute(driver: Any, arrays: dict[str, np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """C (N x M, C[n, m]) = sum_k A[m, k] B[n, k] through `CudaTensorOperation` of the family."""
    from minijit.cuda.operation import CudaTensorOperation

    m, n, k = p["m"], p["n"], p["k"]
    op = CudaTensorOperation(driver=driver, family=p["family"])
    op.setup(p["dtype"], "zero", "gemm", "none", "mnk", ("prim",) * 3, (m, n, k), (k, 0, 1), (0, k, 1), (1, m, 0))
    if op.family_for(driver.device().arch) != p["family"]:
        raise RuntimeError(f"gemm {p}: the operation would run the {op.family_for(driver.device().arch)} family")
    c = np.full((n, m), np.nan, np.float32)
    op.execute(arrays["a"], arrays["b"], c)
    return c


def _gemm_terms(arrays: dict[str, np.ndarray], p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    a, b = (np.abs(_quantized(p["dtype"], arrays[x])) for x in ("a", "b"))
    scale = b @ a.T  # (n, m), as C
    return np.full(scale.shape, p["k"]), scale


def _spmm_case(strategy: str, dtype: str, lengths: list[int], k: int, n: int, seed: int, window=None) -> LaunchCase:
    def make() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        rng = np.random.default_rng(seed)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        indices = np.concatenate([np.sort(rng.choice(k, ln, replace=False)) for ln in lengths]).astype(np.int32)
        data = rng.standard_normal(int(indptr[-1])).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        params = {"strategy": strategy, "dtype": dtype, "shape": [len(lengths), k], "n": n, "window_rows": window}
        return {"indptr": indptr, "indices": indices, "data": data, "b": b}, params

    name = f"spmm.{strategy}{window or ''}.{dtype}"
    family = "SpMM TCA (seed 003)" if strategy == "tca" else "SpMM row windows"
    return LaunchCase(name, family, dtype, make, _spmm_execute, _spmm_terms)


def _spmm_execute(driver: Any, arrays: dict[str, np.ndarray], p: dict[str, Any]) -> np.ndarray:
    from minijit.sparse import SpMM

    csr = (arrays["indptr"], arrays["indices"], arrays["data"], tuple(p["shape"]))
    kw = {"window_rows": p["window_rows"]} if p.get("window_rows") else {}
    op = SpMM(csr, p["n"], dtype=p["dtype"], target="cuda", driver=driver, strategy=p["strategy"], **kw)
    c = np.full((p["shape"][0], p["n"]), np.nan, np.float32)
    op.execute(arrays["b"], c)
    return c


def _spmm_terms(arrays: dict[str, np.ndarray], p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    from minijit.sparse.precision import precision

    prec = precision(p["dtype"])
    m, k = p["shape"]
    s = np.zeros((m, k))
    rows = np.repeat(np.arange(m), np.diff(arrays["indptr"]))
    np.add.at(s, (rows, arrays["indices"]), np.abs(prec.quantize(arrays["data"])))
    scale = s @ np.abs(prec.quantize(arrays["b"]))
    return np.repeat(np.diff(arrays["indptr"])[:, None], p["n"], axis=1), scale


def _special_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random fp32 values with every `ptx.hwcorpus.F32_EDGES` pattern spread among them."""
    x = rng.standard_normal(shape).astype(np.float32).reshape(-1)
    edges = H.F32_EDGES.view(np.float32)
    x[rng.choice(x.size, edges.size, replace=False)] = edges
    return x.reshape(shape)


def _elementwise_case(prim: str, seed: int) -> LaunchCase:
    rows, cols = 9, 44

    def make() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        rng = np.random.default_rng(seed)
        x = _special_values(rng, (rows, cols))
        y = _special_values(rng, (cols,))
        return {"x": x, "y": y}, {"prim": prim, "rows": rows, "cols": cols}

    return LaunchCase(f"elementwise.{prim}", "elementwise", "fp32", make, _elementwise_execute, None)


def _elementwise_execute(driver: Any, arrays: dict[str, np.ndarray], p: dict[str, Any]) -> np.ndarray:
    """out[c, r] = prim(x[r, c], y[c]) (binary; y broadcast over rows) or prim(x[r, c]) (unary)."""
    from minijit.cuda.operation import CudaTensorOperation

    r, c = p["rows"], p["cols"]
    unary = p["prim"] in ("relu", "copy")
    op = CudaTensorOperation(driver=driver)
    op.setup("fp32", "none", p["prim"], "none", "cc", ("prim", "prim"), (r, c), (c, 1), (0, 0) if unary else (0, 1),
             (1, r))  # fmt: skip
    out = np.full((c, r), np.nan, np.float32)
    op.execute(arrays["x"], None if unary else arrays["y"], out)
    return out


def _cases() -> dict[str, LaunchCase]:
    cs = []
    for family in ("mma.sync", "sm90a"):
        for i, dtype in enumerate(("fp16", "bf16", "fp32")):
            k = 32 if dtype == "fp32" else 64  # tf32: short sums, so operand rounding shows
            cs.append(_gemm_case(family, dtype, 40, 24, k, seed=100 + i))
    cs += [_elementwise_case("min", 110), _elementwise_case("relu", 111)]
    lengths = [0, 3, 17, 300, 1, 0, 40, 9, 64, 65]  # empty rows; 300 nnz: three blocks and the reduction
    for i, dtype in enumerate(("fp16", "bf16", "tf32")):
        cs.append(_spmm_case("tca", dtype, lengths, 320, 24, seed=120 + i))
    windows = [5, 0, 12, 30, 2, 7, 0, 16, 3, 1, 9, 22, 4, 8, 0, 11, 6, 19, 2, 25, 1, 3, 14, 5]
    cs.append(_spmm_case("window", "fp16", windows, 96, 24, seed=130, window=16))
    cs.append(_spmm_case("window", "bf16", windows, 96, 13, seed=131, window=8))
    cs.append(_spmm_case("window", "tf32", windows, 96, 24, seed=132, window=16))
    return {c.name: c for c in cs}


#: every launch of the record, by name
LAUNCHES: dict[str, LaunchCase] = _cases()


# --------------------------------------------------------------------------- entries and checks


def launch_entry(case: LaunchCase, arrays: dict[str, np.ndarray], params: dict, out: np.ndarray, info: dict,
                 label: str = "", known: np.ndarray | None = None) -> H.Entry:  # fmt: skip
    """The record `ptx.hwcorpus.Entry` of ``case`` run on ``arrays`` with result ``out``."""
    stored = dict(arrays, out=np.asarray(out, np.float32))
    if known is not None:
        stored["known"] = np.asarray(known, bool)
    return H.Entry(f"launch:{case.name}" + (f"#{label}" if label else ""), stored, {**info, "params": params})


def check_launch(entry: H.Entry, driver: Any = None, limit: int = 8) -> list[str]:
    """Rerun launch ``entry`` on its recorded inputs (default: in `ptx.simdriver`) and list the
    recorded outputs it misses: elementwise kernels by bits, accumulations by more than twice
    `accumulation_bound` (non-finite values must be the same); at most ``limit`` lines."""
    if driver is None:
        from ptx import simdriver as driver
    if entry.base not in LAUNCHES:
        return [f"{entry.name}: no launch {entry.base!r} in minijit.cuda.hwrecord.LAUNCHES"]
    case = LAUNCHES[entry.base]
    params = entry.info["params"]
    arrays = {k: v for k, v in entry.arrays.items() if k not in ("out", "known")}
    got = case.execute(driver, arrays, params)
    want, known = entry.arrays["out"], entry.known
    if got.shape != want.shape:
        return [f"{entry.name}: the simulator's C has shape {got.shape}, the record's {want.shape}"]
    if case.terms is None:
        bad = known & (got.view(np.uint32) != want.view(np.uint32))
        bound = np.zeros(want.shape)
    else:
        terms, scale = case.terms(arrays, params)
        bound = 2 * accumulation_bound(terms, scale, int(known.sum()))
        with np.errstate(invalid="ignore"):
            diff = np.abs(got.astype(np.float64) - want)
            finite = np.isfinite(want) & np.isfinite(got)
            same = (got == want) | (np.isnan(got) & np.isnan(want))
            bad = known & np.where(finite, diff > bound, ~same)
    idx = np.argwhere(bad)
    lines = []
    for i in idx[:limit]:
        t = tuple(int(v) for v in i)
        w, g = want[t], got[t]
        if case.terms is None:
            lines.append(f"{entry.name}{list(t)}: hardware 0x{int(w.view(np.uint32)):08x}, "
                         f"simulator 0x{int(g.view(np.uint32)):08x}")  # fmt: skip
        else:
            lines.append(f"{entry.name}{list(t)}: hardware {float(w)!r}, simulator {float(g)!r}, "
                         f"|difference| {abs(float(w) - float(g)):.3g} > bound {float(bound[t]):.3g}")  # fmt: skip
    if len(idx) > limit:
        lines.append(f"{entry.name}: {len(idx) - limit} more of {int(known.sum())} recorded outputs differ")
    return lines


# --------------------------------------------------------------------------- recording


def _git_commit() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                           cwd=Path(__file__).resolve().parent)  # fmt: skip
        return r.stdout.strip() if r.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _nvidia_driver() -> str:
    """The kernel driver's version line (Linux), or "unknown"."""
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return "unknown"


def run_info(driver: Any, command: str) -> dict[str, Any]:
    """Provenance of a recording on ``driver``'s device: device, drivers, ptxas, date, commit, command."""
    from ptx import toolchain

    dev = driver.device()
    ptxas = toolchain.find_ptxas()
    version = getattr(driver, "version", None)
    return {
        "device": dev.name,
        "arch": dev.arch,
        "cuda_driver_api": version() if callable(version) else None,
        "nvidia_driver": _nvidia_driver(),
        "ptxas": toolchain.ptxas_version(ptxas).strip().splitlines()[-1] if ptxas else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "host": platform.node(),
        "command": command,
    }


def record(driver: Any, out_dir: str | Path, command: str = "", ops=None, launches=None) -> tuple[Path, list[str]]:
    """Run the op corpus and the launches (or the names ``ops``/``launches``) on ``driver``'s
    device and merge them into ``out_dir/<arch>.npz`` (same-named entries replaced, others
    kept; the file is rewritten after each launch, the sm90a family last). Launches of families
    that do not run on the device, and launches that fail, are left out, each with a line saying
    why (returned with the path)."""
    from minijit.cuda import families

    run = run_info(driver, command)
    arch = run["arch"]
    path = Path(out_dir) / f"{arch}.npz"
    rec = H.load(path) if path.exists() else H.Record(arch)
    if rec.arch != arch:
        raise ValueError(f"{path} records {rec.arch}, this device is {arch}")
    rec.runs.append(run)
    info = {"source": f"recorded on {run['device']} ({arch}) at {run['date']}", "run": len(rec.runs) - 1}
    for e in H.record_ops(driver, info, ops, arch):
        rec.add(e)
    H.save(path, rec)  # the ops are kept even if a launch below kills the context
    runs = {s.family.name: s for s in families.status(driver)}
    skipped = []
    names = list(launches if launches is not None else LAUNCHES)
    names.sort(key=lambda n: LAUNCHES[n].family.startswith("sm90a"))  # the newest family last
    for name in names:
        case = LAUNCHES[name]
        st = runs[case.family]
        if case.variant not in st.runs:
            skipped.append(f"{name}: not run: {st.why}")
            continue
        arrays, params = case.make()
        try:
            out = case.execute(driver, arrays, params)
        except Exception as e:  # a fault: record the rest, name the failure
            skipped.append(f"{name}: failed: {type(e).__name__}: {e}")
            continue
        rec.add(launch_entry(case, arrays, params, out, info))
        H.save(path, rec)
    return path, skipped


def main(argv: list[str] | None = None) -> int:
    """``python -m minijit.cuda.hwrecord --out DIR``: record on the GPU (ptx.driver)."""
    p = argparse.ArgumentParser(prog="python -m minijit.cuda.hwrecord", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="tests/data/hw", help="directory of the <arch>.npz records (default tests/data/hw)")
    args = p.parse_args(argv)
    from ptx import driver

    if not driver.available():
        from minijit.cuda.families import driver_problem

        print(f"hwrecord: no GPU to record: {driver_problem()}", file=sys.stderr)
        return 2
    command = " ".join(["python -m minijit.cuda.hwrecord", *(argv if argv is not None else sys.argv[1:])])
    path, skipped = record(driver, args.out, command)
    rec = H.load(path)
    print(f"hwrecord: wrote {path}: {len(rec.entries)} entries ({json.dumps(rec.runs[-1])})")
    for line in skipped:
        print(f"hwrecord: {line}")
    return 1 if any(": failed: " in line for line in skipped) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
