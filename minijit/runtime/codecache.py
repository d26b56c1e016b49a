"""A persistent code cache: generated kernels kept on disk, loaded instead of regenerated
(docs/decisions.md, "A persistent code cache").

`minijit.kernels` (`brgemm`, `unary`, `binary`, `generic_gemm`) asks `cached` before it runs a
generator: a kernel generated once is written to ``$MINIJIT_CACHE_DIR`` (default
``$XDG_CACHE_HOME/minijit/code``, else ``~/.cache/minijit/code``) and later processes load its
bytes instead of generating them again (native kernels, and AArch64 kernels run in the emulator).
``MINIJIT_CACHE=off`` (or an empty ``MINIJIT_CACHE_DIR``) turns it off.

One entry is one file, named by the sha256 of its key: the generator's name, the target (class,
name and fields, so ``sve_vl`` too), every generator argument, and `generator_version` (a hash of
the source of ``asm/``, ``minijit/kernels/``, ``minijit/targets/`` and this module, with the minijit
version), so an entry of other generator code is never looked up. A process hashes the sources
(~3 ms) only where the directory's version record (``version-<folders>.json``, read as an entry
is) does not hold the version for their stamp: the path, size, mtime_ns, ctime_ns and inode of
every source file and folder, taken before any file is read. A write to a file changes its stat, a
file added, removed or renamed its folder's; sources written in the last `SETTLE_NS` are hashed but
not recorded (a second write within the file system's timestamp granularity could leave the stat
unchanged). The file is data only::

    header  "MJITCODE", u32 format, u32 metadata bytes, u32 code bytes, 32-byte sha256 of the rest
    JSON    key, version, name, signature, isa, sve_vl, unchecked, listing, attrs
    bytes   the machine code

It is loaded only when the directory and the file belong to this user and nobody else may write
them, the sizes match the header, the sha256 matches and the metadata repeats the key; the bytes
then go through `minijit.runtime.load`, the one W^X path every generated kernel takes. Anything
else is warned about (`CodeCacheWarning`), never executed, regenerated and written anew. Writes
go to a temporary file in the same directory, then `os.replace`. The directory holds at most
``MINIJIT_CACHE_MAX_BYTES`` (default `MAX_BYTES`): a load touches its entry, and a write that
goes over the bound deletes the least recently used entries.

Compiled loop nests are not cached here: their code embeds the addresses of the kernels they call
(and generating one takes about a millisecond).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import importlib.util
import json
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CodeCacheWarning",
    "MAX_BYTES",
    "cached",
    "clear",
    "describe",
    "directory",
    "generator_version",
    "info",
]

#: the default bound on the bytes of all entries (``MINIJIT_CACHE_MAX_BYTES`` overrides)
MAX_BYTES = 64 << 20
MAGIC = b"MJITCODE"
FORMAT = 1
HEADER = struct.Struct("<8sIII32s")
SUFFIX = ".mjc"
STATS_FILE = "stats.json"
#: the version records' file names: this, 16 hex digits of the source folders, ".json"
VERSION_RECORD = "version-"
#: the largest version record read (bytes; one lists a few hundred source files)
RECORD_MAX_BYTES = 1 << 20
#: a source file written less than this long ago (ns) keeps the version from being recorded
SETTLE_NS = 2_000_000_000
#: the kernel classes whose entries `cached` writes (module, class) and their own attributes
_KERNEL_CLASSES = {("minijit.runtime.kernel", "Kernel"), ("minijit.runtime.emulator", "EmulatedKernel")}
_OWN_ATTRIBUTES = {"code", "signature", "name", "listing", "isa", "unchecked", "worker"}
_PLAIN = (type(None), bool, int, str)


class CodeCacheWarning(UserWarning):
    """An entry or directory of the code cache that is not trusted, or not readable: ignored."""


class _Rejected(Exception):
    """An entry that must not be loaded (the message says why)."""


_lock = threading.Lock()
#: this process's counts: entry hits, misses, writes, rejected and evicted entries, and how the
#: generator version was found (``source_hashes``: hashed from the sources; ``version_records``:
#: read from the directory's version record)
_stats = {"hits": 0, "misses": 0, "writes": 0, "rejected": 0, "evicted": 0, "source_hashes": 0, "version_records": 0}
_flushed = {"hits": 0, "misses": 0}  # the part of _stats already added to the stats file
_estimates: dict[str, int] = {}  # directory -> bytes of its entries, as this process last knew
_warned: set[tuple[str, str]] = set()
_version: str | None = None
_atexit_registered = False


def _euid() -> int:
    """The user entries must belong to (the effective uid)."""
    return os.geteuid()


def _warn(path: Path | str, reason: str) -> None:
    """Warn once per process about ``path`` (an entry or the directory) being ignored."""
    with _lock:
        if (str(path), reason) in _warned:
            return
        _warned.add((str(path), reason))
    warnings.warn(f"minijit code cache: ignoring {path}: {reason}", CodeCacheWarning, stacklevel=4)


# -- configuration ------------------------------------------------------------------------------
def configured_directory() -> Path | None:
    """The cache directory the environment names (whether or not it exists or is trusted); None
    when the cache is off."""
    if os.environ.get("MINIJIT_CACHE", "").strip().lower() in ("off", "0", "false", "no"):
        return None
    env = os.environ.get("MINIJIT_CACHE_DIR")
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "minijit" / "code"


def max_bytes() -> int:
    """The bound on the bytes of all entries (``MINIJIT_CACHE_MAX_BYTES``, else `MAX_BYTES`)."""
    env = os.environ.get("MINIJIT_CACHE_MAX_BYTES", "").strip()
    try:
        return max(0, int(env)) if env else MAX_BYTES
    except ValueError:
        return MAX_BYTES


def _trusted(path: Path) -> str | None:
    """Why the directory ``path`` is not trusted (None: it is)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat it ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != _euid():
        return f"owned by uid {st.st_uid}, not by this user (uid {_euid()})"
    if st.st_mode & 0o022:
        return f"group- or world-writable (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def directory(create: bool = True) -> Path | None:
    """The cache directory when the cache is on and the directory trusted (created 0700 with
    ``create`` where missing), else None (with a `CodeCacheWarning` when it is not trusted)."""
    path = configured_directory()
    if path is None:
        return None
    if not path.exists():
        if not create:
            return None
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as e:
            _warn(path, f"cannot create it ({e.strerror})")
            return None
    why = _trusted(path)
    if why is not None:
        _warn(path, why)
        return None
    return path


_version_lock = threading.Lock()


def generator_version() -> str:
    """A hash of the generators' source (``asm/``, ``minijit/kernels/``, ``minijit/targets/``, this
    module) and the minijit version, once per process; "" when the source cannot be found (the
    cache is then off). Read from the cache directory's version record where the record's stamp
    (the stat of every source file and folder) still matches, else hashed from the file bytes and
    recorded (`_find_version`)."""
    global _version
    if _version is None:
        with _version_lock:
            if _version is None:
                _version = _find_version()
    return _version


def _now_ns() -> int:
    """The wall clock in ns (what file times are compared with; tests move it)."""
    return time.time_ns()


def _roots() -> list[tuple[str, str]] | None:
    """(name, folder) of the generators' source folders, as this process imports them (the `asm`
    package an import would find); None when `asm` cannot be found."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    module = sys.modules.get("asm")
    locations = getattr(module, "__path__", None) if module is not None else None
    if not locations:
        spec = importlib.util.find_spec("asm")
        locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        return None
    return [
        ("minijit/kernels", os.path.join(package, "kernels")),
        ("minijit/targets", os.path.join(package, "targets")),
        ("asm", next(iter(locations))),
    ]


def _sources(roots: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]] | None:
    """The source files under ``roots`` and this module as (name, path), sorted, and every folder
    walked (``__pycache__`` left out); None when a root holds no ``.py`` file."""
    files = [("minijit/runtime/codecache.py", os.path.abspath(__file__))]
    folders = []
    for name, root in roots:
        found = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            folders.append(folder)
            rel = os.path.relpath(folder, root).replace(os.sep, "/")
            found += [(f"{name}/{n}" if rel == "." else f"{name}/{rel}/{n}", os.path.join(folder, n)) for n in names]
        found = sorted(f for f in found if f[0].endswith(".py"))
        if not found:
            return None
        files += found
    return files, folders


def _prefix() -> str:
    """What the version hashes before the sources: the minijit version and the entry format."""
    import minijit

    return f"minijit {getattr(minijit, '__version__', '?')} format {FORMAT}\0"


def _source_hash(files: list[tuple[str, str]] | None = None) -> str:
    """sha256 of `_prefix` and every source file's name, length and bytes ("" when one cannot be
    read); ``files`` as `_sources` lists them (found here when None)."""
    if files is None:
        roots = _roots()
        found = _sources(roots) if roots is not None else None
        if found is None:
            return ""
        files = found[0]
    h = hashlib.sha256(_prefix().encode())
    try:
        for name, path in files:
            with open(path, "rb") as f:
                data = f.read()
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
    except OSError:
        return ""
    _count("source_hashes")
    return h.hexdigest()


def _stamp(files: list[tuple[str, str]], folders: list[str]) -> tuple[str, bool] | None:
    """(sha256 of `_prefix`, every file's name and path, and the size, mtime_ns, ctime_ns, device
    and inode of every file and folder; whether all are settled: mtime and ctime older than
    `SETTLE_NS`), or None when one cannot be stat'ed. A write to a file changes its ctime (which no
    user can set), a file added, removed or renamed its folder's; a change within the file
    system's timestamp granularity of the stat is caught by the settling."""
    stats = []
    try:
        for label, path in [*files, *(("", f) for f in folders)]:
            st = os.stat(path)
            stats.append((label, path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_dev, st.st_ino))
    except OSError:
        return None
    newest = max(max(s[3], s[4]) for s in stats)
    digest = hashlib.sha256((_prefix() + repr(stats)).encode()).hexdigest()
    return digest, newest < _now_ns() - SETTLE_NS


def _version_record(where: Path, roots: list[tuple[str, str]]) -> Path:
    """The version record of the sources under ``roots`` (one per installation) in ``where``."""
    text = "\0".join([os.path.abspath(__file__), *(root for _, root in roots)])
    return where / f"{VERSION_RECORD}{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"


def _is_version(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and not value.strip("0123456789abcdef")


def _read_record(record: Path) -> tuple[str, str, list[tuple[str, str]], list[str]] | None:
    """(stamp, version, files, folders) of the version ``record`` (None: there is none); a record
    that is not this user's alone or not of that form is warned about and ignored."""
    try:
        data = _read(record, touch=False, limit=RECORD_MAX_BYTES)
        if data is None:
            return None
        value = json.loads(data)
    except _Rejected as e:
        _warn(record, f"{e}; the sources are hashed")
        return None
    except (OSError, ValueError) as e:
        _warn(record, f"cannot read it ({e}); the sources are hashed")
        return None
    ok = isinstance(value, dict) and _is_version(value.get("stamp")) and _is_version(value.get("version"))
    files, folders = (value.get("files"), value.get("folders")) if ok else (None, None)
    ok = ok and isinstance(files, list) and isinstance(folders, list)
    ok = ok and all(isinstance(f, list) and len(f) == 2 and all(type(x) is str for x in f) for f in files)
    ok = ok and all(type(f) is str for f in folders)
    if not ok:
        _warn(record, "not a version record; the sources are hashed")
        return None
    return value["stamp"], value["version"], [(n, p) for n, p in files], folders


def _find_version() -> str:
    """The generator version: the version record's when the stamp of the files and folders it
    lists matches their stat now, else the hash of the sources found by walking the folders
    (stamped before any file is read: a write after the stamp changes the stat), recorded when
    they are all settled and the directory exists and is trusted."""
    roots = _roots()
    if roots is None:
        return ""
    where = directory(create=False)
    record = _version_record(where, roots) if where is not None else None
    known = _read_record(record) if record is not None else None
    if known is not None:
        stamp, version, files, folders = known
        now = _stamp(files, folders)
        if now is not None and now[0] == stamp:
            _count("version_records")
            return version
    found = _sources(roots)
    if found is None:
        return ""
    files, folders = found
    stamped = _stamp(files, folders)
    version = _source_hash(files)
    if record is not None and version and stamped is not None and stamped[1]:
        text = {"stamp": stamped[0], "version": version, "files": files, "folders": folders}
        _write_atomic(where, record, json.dumps(text).encode())
    return version


def _write_atomic(where: Path, path: Path, payload: bytes) -> bool:
    """Write ``payload`` to ``path`` in ``where`` through a temporary file (mode 0600) and
    `os.replace`; False (with a warning) when that fails."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=where)  # mode 0600
    except OSError as e:
        _warn(where, f"cannot write there ({e.strerror})")
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except OSError as e:
        _warn(where, f"cannot write there ({e.strerror})")
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


# -- keys and entries ---------------------------------------------------------------------------
def entry_key(kind: str, target: Any, arguments: Mapping[str, Any]) -> str | None:
    """The canonical key (JSON text) of generator ``kind`` on ``target`` with ``arguments`` (the
    target argument left out); None when an argument is not a plain None/bool/int/str, or no
    generator version is known."""
    version = generator_version()
    if not version or not dataclasses.is_dataclass(target):
        return None
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(target)}
    args = {name: value for name, value in arguments.items() if name != "target"}
    if not all(type(v) in _PLAIN for v in (*fields.values(), *args.values())):
        return None
    key = {
        "version": version,
        "kind": kind,
        "target": getattr(target, "name", ""),
        "target_class": f"{type(target).__module__}.{type(target).__qualname__}",
        "target_fields": fields,
        "args": args,
    }
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def entry_name(key: str) -> str:
    """The file name of the entry of ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()[:40] + SUFFIX


def signature_text(c_signature: str) -> str:
    """The text an entry stores for the C signature ``c_signature`` (`load_code` compares it)."""
    from minijit.runtime.signature import Signature

    return _signature_text(Signature.parse(c_signature))


def _signature_text(sig: Any) -> str:
    """C text of a `minijit.runtime.signature.Signature`, with its parameter names."""
    args = ", ".join(a.ctype + (f" {a.name}" if a.name else "") for a in sig.args)
    return f"{sig.ret_ctype}{' ' + sig.name if sig.name else ''}({args})"


def encode(key: str, kernel: Any, sve_vl: int) -> bytes | None:
    """The entry of ``kernel`` under ``key``; None for a kernel the cache does not hold (not a
    plain `Kernel` / `EmulatedKernel`, or carrying attributes JSON cannot restore)."""
    from minijit.runtime.signature import Signature

    cls = type(kernel)
    if (cls.__module__, cls.__qualname__) not in _KERNEL_CLASSES or not kernel.code:
        return None
    attrs = {k: v for k, v in vars(kernel).items() if not k.startswith("_") and k not in _OWN_ATTRIBUTES}
    if not all(type(v) in _PLAIN for v in attrs.values()):
        return None
    signature = _signature_text(kernel.signature)
    if Signature.parse(signature) != kernel.signature:
        return None
    meta = {
        "key": key,
        "version": json.loads(key)["version"],
        "name": kernel.name,
        "signature": signature,
        "isa": kernel.isa,
        "sve_vl": sve_vl,
        "unchecked": bool(kernel.unchecked),
        "listing": kernel.listing,
        "attrs": attrs,
    }
    sme_vl = getattr(getattr(kernel, "worker", None), "sme_vl", None)
    if sme_vl is not None:  # an emulated kernel of a worker at a streaming vector length (SME)
        meta["sme_vl"] = sme_vl
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    code = bytes(kernel.code)
    digest = hashlib.sha256(meta_bytes + code).digest()
    return HEADER.pack(MAGIC, FORMAT, len(meta_bytes), len(code), digest) + meta_bytes + code


def decode(data: bytes, key: str, signature: str | None = None) -> tuple[dict[str, Any], bytes]:
    """The metadata and code of entry ``data``, checked against ``key`` (and, given, the exact C
    ``signature`` text the caller will call it with, instead of parsing the stored one);
    `_Rejected` naming what is wrong (nothing here runs or evaluates anything of the entry)."""
    if len(data) < HEADER.size:
        raise _Rejected(f"truncated ({len(data)} bytes, shorter than the header)")
    magic, fmt, meta_len, code_len, digest = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise _Rejected("not a minijit code cache entry")
    if fmt != FORMAT:
        raise _Rejected(f"entry format {fmt}, not {FORMAT}")
    if HEADER.size + meta_len + code_len != len(data):
        raise _Rejected(f"truncated or padded ({len(data)} bytes, the header says {HEADER.size + meta_len + code_len})")
    body = memoryview(data)[HEADER.size :]
    if hashlib.sha256(body).digest() != digest:
        raise _Rejected("integrity hash mismatch")
    try:
        meta = json.loads(bytes(body[:meta_len]))
    except ValueError as e:
        raise _Rejected(f"metadata is not JSON ({e})") from None
    want = {"key": str, "version": str, "name": str, "signature": str, "isa": str, "sve_vl": int}
    want.update(unchecked=bool, listing=str, attrs=dict)
    if not isinstance(meta, dict) or any(type(meta.get(k)) is not t for k, t in want.items()):
        raise _Rejected("metadata fields missing or of the wrong type")
    if meta["key"] != key or meta["version"] != json.loads(key)["version"]:
        raise _Rejected("the entry is of another key or generator version")
    if meta.get("sme_vl", None) not in (None, 128, 256, 512, 1024, 2048) or type(meta.get("sme_vl", 0)) is not int:
        raise _Rejected("metadata values out of range")
    if meta["isa"] not in ("x86_64", "aarch64") or not all(type(v) in _PLAIN for v in meta["attrs"].values()):
        raise _Rejected("metadata values out of range")
    if signature is not None:
        if meta["signature"] != signature:
            raise _Rejected(f"signature {meta['signature']!r}, not {signature!r}")
    else:
        from minijit.runtime.signature import Signature

        try:
            Signature.parse(meta["signature"])
        except ValueError as e:
            raise _Rejected(f"bad signature ({e})") from None
    code = bytes(body[meta_len:])
    if not code:
        raise _Rejected("no code")
    return meta, code


def _read(path: Path, touch: bool = True, limit: int | None = None) -> bytes | None:
    """The bytes of entry file ``path`` (None: there is none), its mtime set to now with
    ``touch`` (the LRU order); `_Rejected` when it is not a regular file of this user that nobody
    else may write, or larger than ``limit`` bytes (default: the cache's bound)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _Rejected(f"cannot open it ({e.strerror}; a symbolic link?)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Rejected("not a regular file")
        if st.st_uid != _euid():
            raise _Rejected(f"owned by uid {st.st_uid}, not by this user (uid {_euid()})")
        if st.st_mode & 0o022:
            raise _Rejected(f"group- or world-writable (mode {stat.S_IMODE(st.st_mode):o})")
        if st.st_size > (max(max_bytes(), HEADER.size) if limit is None else limit):
            raise _Rejected(f"larger than the cache's bound ({st.st_size} bytes)")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        if touch:
            try:
                os.utime(fd if os.utime in os.supports_fd else path)  # least recently used goes first
            except OSError:
                pass
        return data
    finally:
        os.close(fd)


def _instantiate(meta: Mapping[str, Any], code: bytes) -> Any:
    """The kernel of a checked entry: its bytes through `minijit.runtime.load` (W^X memory, or
    the emulator for AArch64 code on another host), as a generator's kernel."""
    from minijit.runtime import load

    kernel = load(
        code,
        meta["signature"],
        isa=meta["isa"],
        name=meta["name"],
        listing=meta["listing"],
        sve_vl=meta["sve_vl"],
        unchecked=meta["unchecked"],
        sme_vl=meta.get("sme_vl"),
    )
    for name, value in meta["attrs"].items():
        setattr(kernel, name, value)
    return kernel


def _count(name: str, n: int = 1) -> None:
    global _atexit_registered
    with _lock:
        _stats[name] += n
        if not _atexit_registered:
            _atexit_registered = True
            atexit.register(_flush_stats)


# -- the cache ----------------------------------------------------------------------------------
def cached(kind: str, target: Any, arguments: Mapping[str, Any], generate: Callable[[], Any]) -> Any:
    """The kernel of generator ``kind`` on ``target`` with ``arguments``: loaded from the cache,
    else ``generate()``d and written there. ``generate`` alone when the cache is off, its
    directory untrusted, or the arguments not plain values."""
    where = directory()
    key = entry_key(kind, target, arguments) if where is not None else None
    if where is None or key is None:
        return generate()
    path = where / entry_name(key)
    try:
        data = _read(path)
        if data is not None:
            meta, code = decode(data, key)
            kernel = _instantiate(meta, code)
            _count("hits")
            return kernel
    except _Rejected as e:
        _count("rejected")
        _warn(path, f"{e}; regenerated")
    except OSError as e:
        _warn(path, f"cannot read it ({e.strerror})")
    _count("misses")
    kernel = generate()
    _store(where, path, key, kernel, getattr(target, "sve_vl", 128))
    return kernel


def load_code(kind: str, target: Any, arguments: Mapping[str, Any], signature: str) -> bytes | None:
    """The checked code bytes of the entry of generator ``kind`` on ``target`` with ``arguments``
    whose C signature text is exactly ``signature``, without making a kernel of them (the caller
    maps them, `minijit.runtime.memory.ExecutableBuffer`); None where the cache is off, has no
    such entry, or rejects it (then with a warning, as `cached`). Counts a hit only."""
    where = directory()
    key = entry_key(kind, target, arguments) if where is not None else None
    if where is None or key is None:
        return None
    path = where / entry_name(key)
    try:
        data = _read(path)
        if data is None:
            return None
        _, code = decode(data, key, signature)
    except _Rejected as e:
        _count("rejected")
        _warn(path, f"{e}; regenerated")
        return None
    except OSError as e:
        _warn(path, f"cannot read it ({e.strerror})")
        return None
    _count("hits")
    return code


def _store(where: Path, path: Path, key: str, kernel: Any, sve_vl: int) -> None:
    """Write the entry of ``kernel`` atomically, then evict down to the bound."""
    payload = encode(key, kernel, sve_vl)
    bound = max_bytes()
    if payload is None or len(payload) > bound:
        return
    if not _write_atomic(where, path, payload):
        return
    _count("writes")
    with _lock:
        total = _estimates.get(str(where))
        if total is not None:
            _estimates[str(where)] = total = total + len(payload)
    if total is None or total > bound:
        _evict(where, bound)


def _entries(where: Path) -> list[tuple[int, int, Path]]:
    """(mtime_ns, bytes, path) of every entry file, least recently used first; temporary files
    an interrupted write left behind for an hour are removed."""
    found = []
    now = time.time()
    try:
        scan = list(os.scandir(where))
    except OSError:
        return []
    for e in scan:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if e.name.endswith(SUFFIX) and stat.S_ISREG(st.st_mode):
            found.append((st.st_mtime_ns, st.st_size, Path(e.path)))
        elif e.name.startswith(".tmp-") and now - st.st_mtime > 3600:
            try:
                os.unlink(e.path)
            except OSError:
                pass
    found.sort()
    return found


def _evict(where: Path, bound: int) -> None:
    """Delete the least recently used entries until the rest fit in ``bound`` bytes."""
    entries = _entries(where)
    total = sum(size for _, size, _ in entries)
    evicted = 0
    for _, size, path in entries:
        if total <= bound:
            break
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= size
        evicted += 1
    if evicted:
        _count("evicted", evicted)
    with _lock:
        _estimates[str(where)] = total


def clear() -> int:
    """Delete every entry of the (trusted) cache directory; returns how many."""
    where = directory(create=False)
    if where is None:
        return 0
    n = 0
    for _, _, path in _entries(where):
        try:
            os.unlink(path)
            n += 1
        except OSError:
            pass
    with _lock:
        _estimates.pop(str(where), None)
    return n


# -- statistics ---------------------------------------------------------------------------------
def _rate(hits: int, misses: int) -> float | None:
    return hits / (hits + misses) if hits + misses else None


def _recorded(where: Path) -> dict[str, int]:
    """Hits and misses that exited processes recorded in the directory's stats file (counts only:
    a file that is not this user's, or not two counts, is ignored)."""
    try:
        data = _read(where / STATS_FILE)
        counts = json.loads(data) if data else {}
    except (_Rejected, OSError, ValueError):
        return {"hits": 0, "misses": 0}
    if not isinstance(counts, dict):
        return {"hits": 0, "misses": 0}
    return {k: v if type(v) is int and v >= 0 else 0 for k in ("hits", "misses") for v in [counts.get(k, 0)]}


def _flush_stats() -> None:
    """Add this process's hits and misses to the stats file (at exit; concurrent exits may lose an
    update: the counts are a summary, not a ledger)."""
    where = directory(create=False)
    with _lock:
        new = {k: _stats[k] - _flushed[k] for k in _flushed}
        _flushed.update({k: _stats[k] for k in _flushed})
    if where is None or not any(new.values()):
        return
    counts = _recorded(where)
    counts = {k: counts[k] + new[k] for k in counts}
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=where)
        with os.fdopen(fd, "w") as f:
            json.dump(counts, f)
        os.replace(tmp, where / STATS_FILE)
    except OSError:
        pass


def info() -> dict[str, Any]:
    """The cache's state: ``enabled``, ``directory`` (None when off), ``trusted`` and else the
    ``problem`` (not created yet, or why it is ignored), ``version``,
    ``entries`` and ``bytes`` on disk, ``max_bytes``, this process's ``hits``, ``misses``,
    ``writes``, ``rejected`` entries, ``evicted`` entries and ``hit_rate`` (None before any
    lookup), and ``recorded`` hits, misses and hit rate of every process that used the directory
    (exited ones and this one)."""
    path = configured_directory()
    problem = None if path is None else _trusted(path) if path.exists() else "not created yet"
    where = path if problem is None else None
    entries = _entries(where) if where is not None else []
    with _lock:
        stats = dict(_stats)
        pending = {k: _stats[k] - _flushed[k] for k in _flushed}
    recorded = _recorded(where) if where is not None else {"hits": 0, "misses": 0}
    recorded = {k: recorded[k] + pending[k] for k in recorded}
    return {
        "enabled": path is not None,
        "directory": str(path) if path is not None else None,
        "trusted": where is not None,
        "problem": problem,
        "version": generator_version()[:16],
        "entries": len(entries),
        "bytes": sum(size for _, size, _ in entries),
        "max_bytes": max_bytes(),
        **stats,
        "hit_rate": _rate(stats["hits"], stats["misses"]),
        "recorded": {**recorded, "hit_rate": _rate(recorded["hits"], recorded["misses"])},
    }


def describe(state: Mapping[str, Any] | None = None) -> str:
    """One line of `info` for ``minijit info``."""
    s = info() if state is None else state
    if not s["enabled"]:
        return "off (MINIJIT_CACHE=off or MINIJIT_CACHE_DIR empty)"
    if not s["trusted"]:
        return f"{s['directory']}: {s['problem']}" + ("" if s["problem"] == "not created yet" else " (ignored)")
    rec = s["recorded"]
    rate = "no lookups yet" if rec["hit_rate"] is None else f"{100 * rec['hit_rate']:.0f} % hit rate"
    return (
        f"{s['directory']}: {s['entries']} entries, {_size(s['bytes'])} of {_size(s['max_bytes'])};"
        f" {rate} ({rec['hits']} hits, {rec['misses']} misses)"
    )


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def reset() -> None:
    """Forget this process's counts, size estimates, warnings and generator version (tests)."""
    global _version
    with _lock:
        _stats.update(dict.fromkeys(_stats, 0))
        _flushed.update(dict.fromkeys(_flushed, 0))
        _estimates.clear()
        _warned.clear()
    _version = None
