"""The tuned-blocking store (FFTW's "wisdom"): what `minijit.tune` measured, per CPU and shape class.

One JSON file per user: ``$MINIJIT_TUNE_FILE``, else ``$XDG_CACHE_HOME/minijit/tuned.json``, else
``~/.cache/minijit/tuned.json`` (`path`). It maps a CPU key (`cpu_key`: vendor, family/model,
cache sizes and sharers, target ISA) to shape classes (`class_key`: dtype, M/N/K size buckets,
the C/F order of each operand, threads) and each to the blocking that measured fastest::

    {"format": "minijit-tuned", "version": 1,
     "cpus": {"<cpu key>": {"<class key>": {"m": 512, "n": 512, "k": 128, "br": 2,
                                             "gflops": 61.2, "model": [m, n, k, br],
                                             "model_gflops": 55.0, "date": "..."}}}}

The file is data only: it is parsed with `json` and every field is checked; a file that does not
parse or has the wrong shape is ignored with a warning (never executed, never fatal), and an entry
whose fields are not positive ints is skipped. Writes go to a temporary file in the same folder,
then `os.replace` (atomic). ``MINIJIT_TUNE_FILE`` set to the empty string turns the store off.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minijit.blocking import Blocking
from minijit.ir import TensorConfig, dim_t
from minijit.runtime import features

FORMAT, VERSION = "minijit-tuned", 1
ENV_VAR = "MINIJIT_TUNE_FILE"
#: the fields of an entry that make its `Blocking` (``br`` may be null: no cap)
BLOCK_FIELDS = ("m", "n", "k", "br")

_lock = threading.RLock()
_loaded: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}  # path -> ((mtime_ns, size), data)


def path() -> Path | None:
    """The store's file (see the module docstring); None when ``MINIJIT_TUNE_FILE`` is empty."""
    env = os.environ.get(ENV_VAR)
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "minijit" / "tuned.json"


def cpu_key(target: str) -> str:
    """The CPU a tuned entry holds for: vendor, family/model/stepping, L1d/L2/L3 sizes with the
    CPUs sharing the L3, and the target (``"x86_64-avx512"``); one line of text."""
    found = features._sysfs_caches()
    l1, l2 = features.cache_geometries()
    llc, shared = features.last_level_cache_bytes(), features.last_level_cache_sharing()
    levels = f"L1d {l1.size} L2 {l2.size} L{max(found) if found else 3} {llc}/{shared}"
    return " | ".join((features.cpu_vendor() or "unknown", features.cpu_id() or features.cpu_name(), levels, target))


def bucket(size: int) -> int:
    """The size class of a dim of ``size`` elements: the next power of two (384 -> 512)."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"bucket: size must be a positive int, got {size!r}")
    return 1 << (size - 1).bit_length()


#: the two dims of each GEMM operand in the caller's row/column view: (rows, columns)
_VIEW = {"in0": (dim_t.m, dim_t.k), "in1": (dim_t.k, dim_t.n), "out": (dim_t.m, dim_t.n)}


def orders(config: TensorConfig) -> str:
    """The order of each GEMM operand of ``config`` (in0 = M x K, in1 = K x N, out = M x N):
    "C" where its unit-stride dim is its column dim (row-major), "F" where it is its row dim,
    "-" otherwise (no unit stride, or a batch dim); e.g. "CCC" for numpy's ``A @ B``."""
    out = []
    for tensor in ("in0", "in1", "out"):
        rows, cols = _VIEW[tensor]
        unit = [d.type for d in config.dims if getattr(d, f"stride_{tensor}") == 1]
        out.append("C" if unit == [cols] else "F" if unit == [rows] else "-")
    return "".join(out)


def class_key(dtype: str, shape: tuple[int, int, int], order: str, threads: int) -> str:
    """The shape class of a GEMM: dtype, M/N/K buckets (`bucket`), operand orders, threads."""
    m, n, k = (bucket(s) for s in shape)
    return f"{dtype} m{m} n{n} k{k} {order} t{threads}"


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _valid(data: Any, where: Path) -> dict[str, Any]:
    """``data`` if it has the store's shape, else {} with a warning naming ``where``."""
    if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("cpus"), dict)):
        warnings.warn(f"minijit: ignoring {where}: not a minijit tuned-blocking file", stacklevel=3)
        return {}
    if data.get("version") != VERSION:
        warnings.warn(f"minijit: ignoring {where}: version {data.get('version')!r}, not {VERSION}", stacklevel=3)
        return {}
    return data


def load(file: Path | None = None) -> dict[str, Any]:
    """The store's data (``file``, default `path`); {} when it is absent, unreadable or foreign
    (with a warning for the last two). Cached by modification time."""
    file = path() if file is None else file
    if file is None:
        return {}
    try:
        stat = file.stat()
    except OSError:
        return {}
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _lock:
        cached = _loaded.get(str(file))
        if cached is not None and cached[0] == stamp:
            return cached[1]
    try:
        with open(file, encoding="utf-8") as f:
            data = _valid(json.load(f), file)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        warnings.warn(f"minijit: ignoring {file}: {type(exc).__name__}: {exc}", stacklevel=2)
        data = {}
    with _lock:
        _loaded[str(file)] = (stamp, data)
    return data


def entries(target: str, file: Path | None = None) -> dict[str, Mapping[str, Any]]:
    """This CPU's entries for ``target`` (class key -> entry), {} when there are none."""
    found = load(file).get("cpus", {}).get(cpu_key(target))
    return {k: v for k, v in found.items() if isinstance(v, Mapping)} if isinstance(found, Mapping) else {}


def to_blocking(entry: Mapping[str, Any], reason: str) -> Blocking | None:
    """The `Blocking` of a stored entry, or None where its fields are not positive ints."""
    m, n, k, br = (entry.get(f) for f in BLOCK_FIELDS)
    if not (_positive(m) and _positive(n) and _positive(k) and (br is None or _positive(br))):
        return None
    return Blocking(m, n, k, reason, br)


def lookup(target: str, dtype: str, shape: tuple[int, int, int], order: str, threads: int) -> Blocking | None:
    """The tuned blocking of this CPU for a GEMM of ``shape`` (M, N, K), or None."""
    file = path()
    if file is None:
        return None
    key = class_key(dtype, shape, order, threads)
    entry = entries(target, file).get(key)
    if entry is None:
        return None
    gflops = entry.get("gflops")
    measured = f", {gflops:.1f} GFLOPS when tuned" if isinstance(gflops, int | float) else ""
    sizes = f"{entry.get('m')} x {entry.get('n')} x {entry.get('k')}"
    reason = f"tuned ({file}, class {key}{measured}): prims up to {sizes}"
    found = to_blocking(entry, reason)
    if found is not None and found.br is not None:
        found = Blocking(found.m, found.n, found.k, f"{reason}, at most {found.br} BR steps per call", found.br)
    return found


def store(target: str, key: str, entry: Mapping[str, Any], file: Path | None = None) -> Path:
    """Add or replace ``entry`` (its `BLOCK_FIELDS` and figures) for class ``key`` of this CPU and
    ``target``; writes the file atomically (temporary file, then `os.replace`). A file that cannot
    be read as a store is replaced."""
    file = path() if file is None else file
    if file is None:
        raise ValueError(f"{ENV_VAR} is empty: the tuned-blocking store is off")
    if to_blocking(entry, "") is None:
        raise ValueError(f"store: entry needs positive ints m, n, k (and br or None), got {dict(entry)!r}")
    with _lock:
        data = load(file) if file.exists() else {}
        data = {"format": FORMAT, "version": VERSION, "cpus": dict(data.get("cpus", {}))}
        cpu = cpu_key(target)
        old = data["cpus"].get(cpu)
        data["cpus"][cpu] = {**(old if isinstance(old, dict) else {}), key: dict(entry)}
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tuned-", suffix=".json", dir=file.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, file)
        except BaseException:
            os.unlink(tmp)
            raise
        _loaded.pop(str(file), None)
    return file


def summary(target: str) -> dict[str, Any]:
    """What `minijit info` shows: the file, whether it exists, this CPU's key and entry count."""
    file = path()
    if file is None:
        return {"file": None, "exists": False, "cpu_key": cpu_key(target), "entries": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        count = len(entries(target, file))
    return {"file": str(file), "exists": file.exists(), "cpu_key": cpu_key(target), "entries": count}
