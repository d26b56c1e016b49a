"""The GPU kernel families and whether each runs on the present device (``minijit info``).

A family is a kernel generator with its variants (input types): the mma.sync GEMM
(`minijit.cuda.gemm`, with the split-K reduction), the sm_90a wgmma/TMA GEMM
(`minijit.cuda.gemm_sm90`), the elementwise kernels (`minijit.cuda.elementwise`), and the two
SpMM kernels (`minijit.sparse.tca`: seed 003's TCA-SpMM with its reduction;
`minijit.sparse.window_kernel`: row windows). What a variant needs is read from the PTX the
generator emits for a small problem (``.target`` and ``.version``, which `ptx.builder` infers
from the instructions used), so this listing follows the generators.

A variant runs when the driver answers with a device (`driver_problem`), the device's compute
capability reaches the PTX target (an ``sm_90a`` target needs exactly 9.0: architecture-specific
code runs on no later chip), and, on a real driver, ptxas is found and is new enough for the
PTX ISA version (`ptx.toolchain.ptxas_version`). The simulator (`ptx.simdriver`) runs PTX text
itself: it needs no ptxas.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = ["FAMILIES", "Family", "FamilyStatus", "driver_problem", "status"]

NO_PTXAS = "ptxas not found (set MINIJIT_PTXAS or CUDA_HOME, or pip install nvidia-cuda-nvcc)"

#: first CUDA release whose ptxas knows each PTX ISA version (PTX ISA release notes); versions
#: not listed map to the release of the next lower listed version's successor
PTX_TO_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    (6, 0): (9, 0), (6, 1): (9, 1), (6, 2): (9, 2), (6, 3): (10, 0), (6, 4): (10, 1), (6, 5): (10, 2),
    **{(7, m): (11, m) for m in range(9)},
    **{(8, m): (12, m) for m in range(6)},
    (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9), (9, 0): (13, 0),
}  # fmt: skip


@dataclass(frozen=True)
class Family:
    """A kernel family: ``name`` as listed, the ``module`` that generates it, and ``variants``:
    variant name -> a function returning the PTX text of one small kernel of that variant."""

    name: str
    module: str
    variants: dict[str, Callable[[], str]]


def _gemm_texts(kind: str) -> dict[str, Callable[[], str]]:
    def make(dtype: str) -> Callable[[], str]:
        def text() -> str:
            from minijit.cuda import gemm, gemm_sm90
            from minijit.cuda.operation import CudaTensorOperation

            op = CudaTensorOperation(family=kind)
            n = 64  # K-major A and B: the layout every family and dtype takes
            op.setup(dtype, "zero", "gemm", "none", "mnk", ("prim",) * 3, (n, n, n), (n, 0, 1), (0, n, 1), (1, n, 0))
            if kind == "sm90a":
                return gemm_sm90.generate(op.sm90_spec()).module.text()
            return gemm.generate(op.kernel_spec()).module.text()

        return text

    return {dt: make(dt) for dt in ("fp16", "bf16", "fp32")}


def _elementwise_text() -> str:
    from minijit.cuda import elementwise
    from minijit.cuda.operation import CudaTensorOperation

    op = CudaTensorOperation()
    op.setup("fp32", "none", "min", "none", "mn", ("prim",) * 2, (8, 8), (8, 1), (8, 1), (1, 8))
    return elementwise.generate(op.kernel_spec()).text


def _sparse_texts(module: str) -> dict[str, Callable[[], str]]:
    def make(dtype: str) -> Callable[[], str]:
        def text() -> str:
            import importlib

            return importlib.import_module(f"minijit.sparse.{module}").build(8, dtype=dtype).text()

        return text

    return {dt: make(dt) for dt in ("fp16", "bf16", "tf32")}


FAMILIES: tuple[Family, ...] = (
    Family("mma.sync GEMM", "minijit.cuda.gemm", _gemm_texts("mma.sync")),
    Family("sm90a GEMM (wgmma/TMA)", "minijit.cuda.gemm_sm90", _gemm_texts("sm90a")),
    Family("elementwise", "minijit.cuda.elementwise", {"fp32": _elementwise_text}),
    Family("SpMM TCA (seed 003)", "minijit.sparse.tca", _sparse_texts("tca")),
    Family("SpMM row windows", "minijit.sparse.window_kernel", _sparse_texts("window_kernel")),
)


@cache
def requirement(family: str, variant: str) -> tuple[str, tuple[int, int]]:
    """(PTX ``.target``, PTX ISA version) of ``family``'s ``variant``, read from its PTX."""
    fam = next(f for f in FAMILIES if f.name == family)
    text = fam.variants[variant]()
    target = re.search(r"^\.target\s+(\S+)", text, re.M)
    version = re.search(r"^\.version\s+(\d+)\.(\d+)", text, re.M)
    if target is None or version is None:
        raise RuntimeError(f"{family} {variant}: generated PTX has no .target/.version line")
    return target.group(1), (int(version.group(1)), int(version.group(2)))


def driver_problem(driver: Any = None) -> str | None:
    """Why ``driver`` (default `ptx.driver`) has no device: no bindings, no NVIDIA driver, no
    GPU; None when ``driver.available()`` is True."""
    import importlib.util

    from ptx import CudaError
    from ptx import driver as real

    drv = driver or real
    if drv.available():
        return None
    if drv is not real:
        return f"{getattr(drv, '__name__', drv)!r} reports no device"
    try:
        bindings = importlib.util.find_spec("cuda.bindings") or importlib.util.find_spec("cuda.cuda")
    except (ImportError, ValueError):
        bindings = None
    if bindings is None:
        return "no CUDA driver bindings (cuda-bindings not installed: pip install -e '.[gpu]')"
    try:
        real.init()
    except CudaError as e:
        if e.name == "CUDA_ERROR_NO_DEVICE":
            return "no GPU (cuInit: CUDA_ERROR_NO_DEVICE)"
        return f"no usable NVIDIA driver ({e})"
    except Exception as e:  # cuda-bindings raises when it cannot load libcuda
        return f"no NVIDIA driver (libcuda not loadable: {type(e).__name__})"
    return "no GPU (the NVIDIA driver reports no CUDA device)"


def _sm(arch: str) -> tuple[int, str]:
    m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    if m is None:
        raise ValueError(f"architecture {arch!r} is not of the form sm_NN")
    return int(m.group(1)), m.group(2)


def _cc(sm: int) -> str:
    return f"{sm // 10}.{sm % 10}"


def _release(version_text: str) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", version_text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _ptxas(path: str | None) -> tuple[str | None, tuple[int, int] | None]:
    """(why ptxas cannot assemble, or None; its CUDA release) for the ptxas at ``path``."""
    from ptx import toolchain

    if path is None:
        return NO_PTXAS, None
    try:
        text = toolchain.ptxas_version(path)
    except (OSError, subprocess.SubprocessError) as e:
        return f"ptxas {path} does not run ({type(e).__name__})", None
    release = _release(text)
    if release is None:
        return f"ptxas {path} gave no 'release X.Y' in its --version text", None
    return None, release


def _needed_release(version: tuple[int, int]) -> tuple[int, int]:
    known = [v for v in PTX_TO_CUDA if v <= version]
    return PTX_TO_CUDA[max(known)] if known else (9, 0)


def variant_problem(target: str, version: tuple[int, int], arch: str, ptxas_release: tuple[int, int] | None) -> str:
    """Why code for PTX ``target``/``version`` does not run on a device of ``arch`` with a ptxas
    of ``ptxas_release`` ((major, minor); None: no ptxas needed); "" when it runs."""
    need, suffix = _sm(target)
    have, _ = _sm(arch)
    if suffix and have != need:
        return (
            f"{target} code runs only on compute capability {_cc(need)} (architecture-specific features);"
            f" the device has {_cc(have)}"
        )
    if have < need:
        return f"needs compute capability {_cc(need)} ({target}); the device has {_cc(have)}"
    if ptxas_release is not None:
        rel = _needed_release(version)
        if ptxas_release < rel:
            v = f"{version[0]}.{version[1]}"
            return (
                f"ptxas {ptxas_release[0]}.{ptxas_release[1]} is too old for PTX {v} (CUDA {rel[0]}.{rel[1]} or newer)"
            )
    return ""


@dataclass(frozen=True)
class FamilyStatus:
    """One family on the present device: the ``variants`` that run, and ``why`` the others do
    not (``targets``: variant -> (PTX target, PTX version) it needs)."""

    family: Family
    device: str
    runs: tuple[str, ...]
    why: str
    targets: dict[str, tuple[str, str]]

    @property
    def state(self) -> str:
        """Whether the family runs: "yes", "partly" (some variants) or "no"."""
        if len(self.runs) == len(self.family.variants):
            return "yes"
        return "partly" if self.runs else "no"

    @property
    def needs(self) -> str:
        """The targets the variants need, e.g. "fp16: sm_75 (PTX 6.5); bf16, tf32: sm_80 (PTX 7.0)"."""
        groups: dict[tuple[str, str], list[str]] = {}
        for variant, tp in self.targets.items():
            groups.setdefault(tp, []).append(variant)
        return "; ".join(f"{', '.join(vs)}: {t} (PTX {p})" for (t, p), vs in groups.items())

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family.name,
            "module": self.family.module,
            "device": self.device,
            "runs": self.state,
            "variants_that_run": list(self.runs),
            "why_not": self.why,
            "needs": {v: {"target": t, "ptx": p} for v, (t, p) in self.targets.items()},
        }


def status(driver: Any = None) -> list[FamilyStatus]:
    """Every family in `FAMILIES` on ``driver``'s device (default `ptx.driver`)."""
    import ptx
    from ptx import driver as real

    drv = driver or real
    problem = driver_problem(drv)
    release, device, arch = None, "", ""
    if problem is None:
        dev = drv.device()
        arch = dev.arch
        device = f"{dev.name} ({arch})"
        if drv is real:
            problem, release = _ptxas(ptx.find_ptxas())
    out = []
    for fam in FAMILIES:
        targets, ok, reasons = {}, [], {}
        for variant in fam.variants:
            target, version = requirement(fam.name, variant)
            targets[variant] = (target, f"{version[0]}.{version[1]}")
            why = problem or variant_problem(target, version, arch, release)
            if why:
                reasons.setdefault(why, []).append(variant)
            else:
                ok.append(variant)
        if len(reasons) == 1 and not ok:
            why = next(iter(reasons))
        else:
            why = "; ".join(f"{', '.join(vs)}: {w}" for w, vs in reasons.items())
        out.append(FamilyStatus(fam, device, tuple(ok), why, targets))
    return out
