"""ptxas: locate it, assemble PTX to a cubin, parse its resource report, cache results.

``ptxas`` is searched for, in order: ``$MINIJIT_PTXAS``, ``PATH``,
``$CUDA_HOME/bin`` (also ``$CUDA_PATH``), then the ``nvidia-cuda-nvcc`` wheel in any
site-packages or ``sys.path`` directory: ``nvidia/cu13/bin/ptxas`` (CUDA 13 wheels,
``nvidia-cuda-nvcc`` 13.x) or ``nvidia/cuda_nvcc/bin/ptxas`` (CUDA 12 wheels,
``nvidia-cuda-nvcc-cu12``). Results are
cached by a hash of the ptxas version, the arguments and the PTX text under
``$MINIJIT_CACHE_DIR`` or ``~/.cache/minijit``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import PtxError

_TIMEOUT_S = 120


@dataclass
class FunctionInfo:
    """Resources of one function from ``ptxas -v``."""

    name: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_bytes: int = 0
    barriers: int = 0
    cmem: dict[int, int] = field(default_factory=dict)

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass
class Cubin:
    """An assembled module: ``data`` (ELF bytes) plus the parsed ``ptxas -v`` report."""

    data: bytes
    arch: str
    log: str
    functions: dict[str, FunctionInfo]
    ptxas: str = ""
    cached: bool = False
    ptx: str = ""  #: the PTX text it was assembled from (what :mod:`ptx.simdriver` runs)

    def __getitem__(self, name: str) -> FunctionInfo:
        return self.functions[name]

    @property
    def spill_bytes(self) -> int:
        return sum(f.spills for f in self.functions.values())


# --------------------------------------------------------------------------- locating ptxas


# where the nvidia-cuda-nvcc wheels put ptxas, relative to site-packages (newest CUDA first)
_WHEEL_PTXAS = (("nvidia", "cu13", "bin", "ptxas"), ("nvidia", "cuda_nvcc", "bin", "ptxas"))


def _wheel_candidates() -> list[Path]:
    dirs: list[str] = []
    try:
        dirs.extend(site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv without getsitepackages
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    dirs.extend(p for p in sys.path if p)  # also `pip install --target DIR` on PYTHONPATH
    seen, out = set(), []
    for rel in _WHEEL_PTXAS:
        for d in dirs:
            p = Path(d).joinpath(*rel)
            if str(p) not in seen:
                seen.add(str(p))
                out.append(p)
    return out


def find_ptxas() -> str | None:
    """Path of ptxas, or None (search order in the module docstring)."""
    env = os.environ.get("MINIJIT_PTXAS")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    found = shutil.which("ptxas")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            p = Path(root) / "bin" / "ptxas"
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    for p in _wheel_candidates():
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


_VERSION_CACHE: dict[tuple[str, float], str] = {}


def ptxas_version(path: str | None = None) -> str:
    """ptxas' ``--version`` text, e.g. '... release 13.0, V13.0.88'."""
    path = path or _require_ptxas()
    key = (path, os.path.getmtime(path))
    if key not in _VERSION_CACHE:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=_TIMEOUT_S)
        _VERSION_CACHE[key] = r.stdout.strip()
    return _VERSION_CACHE[key]


def _require_ptxas() -> str:
    p = find_ptxas()
    if p is None:
        raise PtxError(
            "ptxas not found: set MINIJIT_PTXAS, put it on PATH, set CUDA_HOME, or pip install nvidia-cuda-nvcc"
        )
    return p


def cache_dir() -> Path:
    root = os.environ.get("MINIJIT_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "minijit"


# --------------------------------------------------------------------------- parsing


_RE_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_RE_PROPS = re.compile(r"Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")
_RE_BARRIERS = re.compile(r"used (\d+) barriers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_log(log: str) -> dict[str, FunctionInfo]:
    """Per-function resources from a ``ptxas -v`` log."""
    funcs: dict[str, FunctionInfo] = {}
    cur: FunctionInfo | None = None
    for line in log.splitlines():
        m = _RE_COMPILING.search(line) or _RE_PROPS.search(line)
        if m:
            name = m.group(1)
            cur = funcs.setdefault(name, FunctionInfo(name))
            continue
        if cur is None:
            continue
        m = _RE_FRAME.search(line)
        if m:
            cur.stack_frame, cur.spill_stores, cur.spill_loads = (int(x) for x in m.groups())
        m = _RE_USED.search(line)
        if m:
            cur.registers = int(m.group(1))
            b = _RE_BARRIERS.search(line)
            cur.barriers = int(b.group(1)) if b else 0
            s = _RE_SMEM.search(line)
            cur.shared_bytes = int(s.group(1)) if s else 0
            cur.cmem = {int(bank): int(n) for n, bank in _RE_CMEM.findall(line)}
    return funcs


_RE_ERRLINE = re.compile(r", line (\d+); (error|fatal|warning)\s*:\s*(.*)")


def _error(ptx_text: str, log: str, arch: str) -> PtxError:
    src = ptx_text.splitlines()
    lines: dict[int, str] = {}
    quoted = []
    for m in _RE_ERRLINE.finditer(log):
        if m.group(2) == "warning":
            continue
        n = int(m.group(1))
        text = src[n - 1] if 0 < n <= len(src) else ""
        if n not in lines:
            lines[n] = text
        quoted.append(f"  line {n}: {m.group(3).strip()}\n      | {text.strip()}")
    msg = f"ptxas failed for {arch}"
    if quoted:
        msg += ":\n" + "\n".join(quoted)
    else:
        msg += ":\n" + log.strip()
    return PtxError(msg, log=log, lines=lines)


# --------------------------------------------------------------------------- compile


def compile(ptx_text: str, arch: str = "sm_80", opt_level: int = 3, extra_args=(), cache: bool = True) -> Cubin:
    """Assemble ``ptx_text`` with ``ptxas -v -arch=ARCH``; raise :class:`PtxError` on failure."""
    if not re.match(r"^sm_\d+[af]?$", arch):
        raise ValueError(f"arch {arch!r} is not of the form sm_NN")
    ptxas = _require_ptxas()
    args = [f"-arch={arch}", f"-O{int(opt_level)}", "-v", *map(str, extra_args)]
    version = ptxas_version(ptxas)
    key = hashlib.sha256("\0".join([version, *args, ptx_text]).encode()).hexdigest()
    cdir = cache_dir() / "ptxas"
    entry_bin, entry_meta = cdir / f"{key}.cubin", cdir / f"{key}.json"
    if cache and entry_bin.is_file() and entry_meta.is_file():
        try:
            meta = json.loads(entry_meta.read_text())
            funcs = {
                n: FunctionInfo(**{**f, "cmem": {int(k): v for k, v in f["cmem"].items()}})
                for n, f in meta["functions"].items()
            }
            return Cubin(entry_bin.read_bytes(), arch, meta["log"], funcs, ptxas, cached=True, ptx=ptx_text)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # corrupt entry: rebuild
    with tempfile.TemporaryDirectory(prefix="minijit-ptxas-") as tmp:
        src = Path(tmp) / "module.ptx"
        out = Path(tmp) / "module.cubin"
        src.write_text(ptx_text)
        try:
            r = subprocess.run(
                [ptxas, *args, str(src), "-o", str(out)], capture_output=True, text=True, timeout=_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as e:
            raise PtxError(f"ptxas timed out after {_TIMEOUT_S} s for {arch}") from e
        log = (r.stdout or "") + (r.stderr or "")
        if r.returncode != 0 or not out.is_file():
            raise _error(ptx_text, log, arch)
        data = out.read_bytes()
    cub = Cubin(data, arch, log, parse_log(log), ptxas, ptx=ptx_text)
    if cache:
        try:
            cdir.mkdir(parents=True, exist_ok=True)
            meta = {"arch": arch, "log": log, "functions": {n: asdict(f) for n, f in cub.functions.items()}}
            for path, payload in ((entry_bin, data), (entry_meta, json.dumps(meta).encode())):
                fd, tmpname = tempfile.mkstemp(dir=cdir, prefix=".tmp-")
                with os.fdopen(fd, "wb") as f:
                    f.write(payload)
                os.replace(tmpname, path)
        except OSError:
            pass  # a read-only cache is not an error
    return cub


# --------------------------------------------------------------------------- SASS (cuobjdump)


def find_cuobjdump() -> str | None:
    """Path of a cuobjdump that has an nvdisasm beside it or on PATH (it needs one for -sass):
    ``$MINIJIT_CUOBJDUMP``, PATH, ``$CUDA_HOME/bin``, then the ``nvidia-cuda-cuobjdump`` wheel
    (with ``nvidia-cuda-nvdisasm``)."""
    env = os.environ.get("MINIJIT_CUOBJDUMP")
    cands = [env] if env else []
    if shutil.which("cuobjdump"):
        cands.append(shutil.which("cuobjdump"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(str(Path(os.environ[var]) / "bin" / "cuobjdump"))
    cands += [str(p.parent / "cuobjdump") for p in _wheel_candidates()]
    for c in cands:
        p = Path(c)
        if p.is_file() and os.access(p, os.X_OK) and ((p.parent / "nvdisasm").is_file() or shutil.which("nvdisasm")):
            return str(p)
    return None


def sass(cubin: Cubin | bytes) -> str:
    """The SASS listing of a cubin (``cuobjdump -sass``); PtxError when cuobjdump is missing or fails."""
    tool = find_cuobjdump()
    if tool is None:
        raise PtxError("cuobjdump (with nvdisasm) not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    data = cubin.data if isinstance(cubin, Cubin) else bytes(cubin)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(data)
        env = dict(os.environ)
        env["PATH"] = str(Path(tool).parent) + os.pathsep + env.get("PATH", "")
        r = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, timeout=_TIMEOUT_S, env=env)
    if r.returncode != 0:
        raise PtxError(f"cuobjdump -sass failed: {r.stderr.strip()}")
    return r.stdout
