"""The persistent code cache (`minijit.runtime.codecache`): a kernel generated in one process is
loaded in the next; an entry that is corrupt, truncated, of another user, writable by others, in a
directory writable by others or of other generator code is never executed but regenerated; the
size bound evicts the least recently used entries; ``MINIJIT_CACHE=off`` writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from minijit import kernels, targets
from minijit.runtime import codecache

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty cache directory of this test (not created yet), the counts and kernels reset."""
    path = tmp_path / "code"
    monkeypatch.setenv("MINIJIT_CACHE_DIR", str(path))
    monkeypatch.delenv("MINIJIT_CACHE", raising=False)
    monkeypatch.delenv("MINIJIT_CACHE_MAX_BYTES", raising=False)
    codecache.reset()
    kernels.cache_clear()
    yield path
    kernels.cache_clear()
    codecache.reset()


@pytest.fixture
def generated(monkeypatch):
    """The generator calls the native target makes (the names of its `_brgemm` / `_unary` /
    `_binary`), recorded."""
    calls: list[str] = []
    cls = type(targets.native())
    for name in ("_brgemm", "_unary", "_binary"):
        original = getattr(cls, name)

        def wrapper(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)
    return calls


@pytest.fixture
def loaded(monkeypatch):
    """The code of every entry that reached `minijit.runtime.load` (the executable-memory path)."""
    codes: list[bytes] = []
    original = codecache._instantiate

    def spy(meta, code):
        codes.append(code)
        return original(meta, code)

    monkeypatch.setattr(codecache, "_instantiate", spy)
    return codes


def relu(m: int = 24, n: int = 5):
    """A native relu kernel (the in-process cache emptied first: only the disk may remember it)."""
    kernels.cache_clear()
    return kernels.unary(m, n, ptype="relu", target="native")


def check_relu(kernel, m: int = 24, n: int = 5) -> None:
    a = np.linspace(-3, 3, m * n, dtype=np.float32)
    b = np.full(m * n, 7, np.float32)
    kernel(a, b, m, m)
    np.testing.assert_array_equal(b, np.maximum(a, 0))


def only_entry(cache_dir: Path) -> Path:
    (entry,) = cache_dir.glob("*" + codecache.SUFFIX)
    return entry


def code_offset(data: bytes) -> int:
    _, _, meta_len, _, _ = codecache.HEADER.unpack_from(data)
    return codecache.HEADER.size + meta_len


# -- across processes ---------------------------------------------------------------------------
SCRIPT = """
import hashlib, json, sys
import numpy as np
from minijit import kernels, targets
from minijit.runtime import codecache

if sys.argv[1] == "forbid":  # this process must not generate: the kernel comes from the disk
    def refuse(*args, **kwargs):
        raise AssertionError("generated in the second process")
    type(targets.native())._brgemm = refuse
k = kernels.brgemm(64, 64, 64, target="native")
rng = np.random.default_rng(1)
a = rng.standard_normal((64, 64)).astype(np.float32)
b = rng.standard_normal((64, 64)).astype(np.float32)
c = np.zeros((64, 64), np.float32)
k(a, b, c, 64, 64, 64, 0, 0)
sha = lambda x: hashlib.sha256(x).hexdigest()
state = codecache.info()
print(json.dumps({
    "c": sha(c.tobytes()), "code": sha(k.code), "listing": sha(k.listing.encode()), "name": k.name,
    "signature": str(k.signature), "type": type(k).__name__,
    "hits": state["hits"], "misses": state["misses"], "writes": state["writes"],
}))
"""


def test_a_kernel_generated_in_one_process_is_loaded_in_the_next(tmp_path):
    env = {**os.environ, "MINIJIT_CACHE_DIR": str(tmp_path / "code"), "PYTHONPATH": str(ROOT)}
    env.pop("MINIJIT_CACHE", None)

    def run(mode: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.splitlines()[-1])

    first = run("generate")
    assert (first["hits"], first["misses"], first["writes"]) == (0, 1, 1)
    second = run("forbid")
    assert (second["hits"], second["misses"], second["writes"]) == (1, 0, 0)
    for field in ("c", "code", "listing", "name", "signature", "type"):
        assert second[field] == first[field], field
    assert len(list((tmp_path / "code").glob("*" + codecache.SUFFIX))) == 1


def test_a_loaded_kernel_is_the_generated_one(cache_dir, generated, loaded):
    fresh = relu()
    assert generated == ["_unary"] and loaded == []
    again = relu()
    assert generated == ["_unary"] and loaded == [fresh.code]
    assert again is not fresh and type(again) is type(fresh)
    for field in ("code", "listing", "name", "signature", "isa", "unchecked"):
        assert getattr(again, field) == getattr(fresh, field), field
    check_relu(again)
    state = codecache.info()
    assert (state["hits"], state["misses"], state["writes"], state["entries"]) == (1, 1, 1, 1)
    assert state["hit_rate"] == 0.5 and state["trusted"] and state["directory"] == str(cache_dir)
    assert "1 entries" in codecache.describe(state)


def test_the_directory_and_entries_are_this_users_alone(cache_dir):
    relu()
    assert (cache_dir.stat().st_mode & 0o777) == 0o700
    entry = only_entry(cache_dir)
    assert (entry.stat().st_mode & 0o777) == 0o600 and entry.stat().st_uid == os.geteuid()
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]


def test_an_entry_is_data_a_header_json_and_the_code(cache_dir):
    kernel = relu()
    data = only_entry(cache_dir).read_bytes()
    magic, fmt, meta_len, code_len, _ = codecache.HEADER.unpack_from(data)
    assert (magic, fmt) == (codecache.MAGIC, codecache.FORMAT)
    meta = json.loads(data[codecache.HEADER.size : codecache.HEADER.size + meta_len])
    assert meta["name"] == kernel.name and meta["listing"] == kernel.listing and meta["version"]
    assert json.loads(meta["key"])["args"] == {"m": 24, "n": 5, "trans_b": False, "dtype": "fp32", "ptype": "relu"} | {
        "dense_b": False
    }
    assert data[-code_len:] == kernel.code


# -- never executed, regenerated ------------------------------------------------------------------
def rejected(cache_dir: Path, generated: list, loaded: list, match: str) -> None:
    """The next lookup warns (``match``), loads nothing, regenerates, and rewrites a good entry."""
    before = len(generated)
    with pytest.warns(codecache.CodeCacheWarning, match=match):
        kernel = relu()
    assert loaded == [] and len(generated) == before + 1
    check_relu(kernel)
    assert codecache.info()["rejected"] == 1
    entry = only_entry(cache_dir)
    assert entry.stat().st_uid == os.geteuid() and (entry.stat().st_mode & 0o777) == 0o600
    relu()  # the rewritten entry loads
    assert loaded == [kernel.code] and len(generated) == before + 1


def test_a_corrupted_entry_is_not_executed(cache_dir, generated, loaded):
    relu()
    entry = only_entry(cache_dir)
    data = bytearray(entry.read_bytes())
    data[code_offset(data)] ^= 0xFF  # one byte of the code
    entry.write_bytes(bytes(data))
    rejected(cache_dir, generated, loaded, "integrity hash mismatch")


def test_corrupted_metadata_is_not_read(cache_dir, generated, loaded):
    relu()
    entry = only_entry(cache_dir)
    data = entry.read_bytes()
    at = data.index(b'"name": "unary_relu') + 9  # the kernel's name
    entry.write_bytes(data[:at] + b"U" + data[at + 1 :])
    rejected(cache_dir, generated, loaded, "integrity hash mismatch")


@pytest.mark.parametrize("keep", [10, -1, 0], ids=["header-only", "one-byte-short", "empty"])
def test_a_truncated_entry_is_not_executed(cache_dir, generated, loaded, keep):
    relu()
    entry = only_entry(cache_dir)
    data = entry.read_bytes()
    entry.write_bytes(data[:keep])
    rejected(cache_dir, generated, loaded, "truncated")


def test_an_entry_of_another_user_is_not_executed(cache_dir, generated, loaded, monkeypatch):
    relu()
    entry = only_entry(cache_dir)
    if os.geteuid() == 0:
        os.chown(entry, 65534, 65534)
        match = "owned by uid 65534"
    else:  # simulated: this process's uid is another one, the directory trusted as before
        mine = os.geteuid()
        monkeypatch.setattr(codecache, "_trusted", lambda path: None)
        monkeypatch.setattr(codecache, "_euid", lambda: mine + 1)
        match = f"owned by uid {mine}"
    before = len(generated)
    with pytest.warns(codecache.CodeCacheWarning, match=match):
        kernel = relu()
    assert loaded == [] and len(generated) == before + 1
    check_relu(kernel)
    monkeypatch.undo()
    assert only_entry(cache_dir).stat().st_uid == os.geteuid()  # replaced by this user's


@pytest.mark.parametrize("mode", [0o646, 0o620, 0o666])
def test_an_entry_others_may_write_is_not_executed(cache_dir, generated, loaded, mode):
    relu()
    only_entry(cache_dir).chmod(mode)
    rejected(cache_dir, generated, loaded, "group- or world-writable")


def test_a_symbolic_link_is_not_followed(cache_dir, generated, loaded, tmp_path):
    relu()
    entry = only_entry(cache_dir)
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    rejected(cache_dir, generated, loaded, "cannot open it")


@pytest.mark.parametrize("mode", [0o707, 0o770, 0o777])
def test_a_directory_others_may_write_is_ignored(cache_dir, generated, loaded, mode):
    relu()
    entry = only_entry(cache_dir)
    stamp = entry.stat().st_mtime_ns
    files = sorted(cache_dir.iterdir())  # the entry, the stats and version records
    cache_dir.chmod(mode)
    try:
        with pytest.warns(codecache.CodeCacheWarning, match="group- or world-writable"):
            kernel = relu()
        assert loaded == [] and generated == ["_unary", "_unary"]
        check_relu(kernel)
        # nothing read (not even touched), nothing written
        assert sorted(cache_dir.iterdir()) == files and entry.stat().st_mtime_ns == stamp
        assert not codecache.info()["trusted"] and "ignored" in codecache.describe()
    finally:
        cache_dir.chmod(0o700)


def test_a_directory_of_another_user_is_ignored(cache_dir, generated, loaded, monkeypatch):
    relu()
    mine = os.geteuid()
    monkeypatch.setattr(codecache, "_euid", lambda: mine + 1)
    with pytest.warns(codecache.CodeCacheWarning, match=f"owned by uid {mine}, not by this user"):
        relu()
    assert loaded == [] and generated == ["_unary", "_unary"]


def test_an_entry_of_other_generator_code_is_not_looked_up(cache_dir, generated, loaded, monkeypatch):
    real = codecache.generator_version()
    monkeypatch.setattr(codecache, "generator_version", lambda: "0" * 64)
    relu()
    old = only_entry(cache_dir)
    monkeypatch.setattr(codecache, "generator_version", lambda: real)
    relu()  # another key: a plain miss, no warning
    assert loaded == [] and generated == ["_unary", "_unary"]
    assert len(list(cache_dir.glob("*" + codecache.SUFFIX))) == 2
    # the other version's entry under this version's name: its metadata says what it is
    (new,) = set(cache_dir.glob("*" + codecache.SUFFIX)) - {old}
    old.replace(new)
    rejected(cache_dir, generated, loaded, "another key or generator version")


def test_the_generator_version_hashes_the_generators_source():
    version = codecache.generator_version()
    assert len(version) == 64 and version == codecache._source_hash()


# -- the generator version record ----------------------------------------------------------------
@pytest.fixture
def sources(tmp_path, monkeypatch, cache_dir):
    """Stand-ins for the generators' source folders (two files each, one in a subfolder) that
    `codecache._roots` names, the clock 10 s ahead (the files just written count as settled),
    and the cache directory created."""
    roots = []
    for name in ("minijit/kernels", "minijit/targets", "asm"):
        root = tmp_path / "src" / name.replace("/", "_")
        (root / "sub").mkdir(parents=True)
        (root / "a.py").write_text("A = 1\n")
        (root / "sub" / "b.py").write_text("B = 2\n")
        roots.append((name, str(root)))
    monkeypatch.setattr(codecache, "_roots", lambda: roots)
    real = codecache._now_ns
    monkeypatch.setattr(codecache, "_now_ns", lambda: real() + 5 * codecache.SETTLE_NS)
    assert codecache.directory() == cache_dir
    return [Path(root) for _, root in roots]


def version_of_a_new_process() -> tuple[str, int, int]:
    """(generator version, sources hashed, versions read from the record) as a new process finds
    them (this process's memo and counts reset)."""
    codecache.reset()
    version = codecache.generator_version()
    state = codecache.info()
    return version, state["source_hashes"], state["version_records"]


def hash_of_sources(roots: list[Path]) -> str:
    """The version the sources under ``roots`` hash to now (no record involved)."""
    return codecache._source_hash(codecache._sources(codecache._roots())[0])


def only_record(cache_dir: Path) -> Path:
    (record,) = cache_dir.glob(codecache.VERSION_RECORD + "*.json")
    return record


def test_a_warm_process_reads_the_version_from_the_record(cache_dir, sources):
    version, hashed, read = version_of_a_new_process()
    assert (hashed, read) == (1, 0) and version == hash_of_sources(sources)
    record = only_record(cache_dir)
    assert (record.stat().st_mode & 0o777) == 0o600 and record.stat().st_uid == os.geteuid()
    assert version_of_a_new_process() == (version, 0, 1)


def _rewrite_keeping_size_and_mtime(path: Path, text: str) -> None:
    """``text`` (as long as the old one) into ``path``, its mtime set back: only the ctime tells,
    and the loop waits until it does (a write in the same tick of the file system's clock)."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    while True:
        path.write_text(text)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        if path.stat().st_ctime_ns != before.st_ctime_ns:
            return
        time.sleep(0.005)


CHANGES = {
    "rewritten, same size and mtime": lambda r: _rewrite_keeping_size_and_mtime(r / "a.py", "A = 9\n"),
    "appended to": lambda r: (r / "sub" / "b.py").write_text("B = 2\nC = 3\n"),
    "file added": lambda r: (r / "sub" / "c.py").write_text("C = 3\n"),
    "file removed": lambda r: (r / "sub" / "b.py").unlink(),
    "file renamed": lambda r: (r / "sub" / "b.py").rename(r / "sub" / "d.py"),
    "folder added": lambda r: ((r / "new").mkdir(), (r / "new" / "e.py").write_text("E = 5\n")),
}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("root", [0, 2], ids=["minijit-kernels", "asm"])
def test_a_changed_source_is_hashed_again(cache_dir, sources, change, root):
    """A stale version must never look up the entries of other generator code: any change to a
    source file or folder changes the stamp, so the sources are hashed again (and recorded anew)."""
    old, _, _ = version_of_a_new_process()
    assert version_of_a_new_process() == (old, 0, 1)
    CHANGES[change](sources[root])
    new, hashed, read = version_of_a_new_process()
    assert (hashed, read) == (1, 0) and new == hash_of_sources(sources)
    assert version_of_a_new_process() == (new, 0, 1)
    assert new != old


def test_sources_written_just_now_are_hashed_but_not_recorded(cache_dir, sources, monkeypatch):
    """Files changed within `SETTLE_NS` of the stamp could change again within the file system's
    timestamp granularity without their stat telling: no record is written for them."""
    monkeypatch.setattr(codecache, "_now_ns", lambda: os.stat(sources[1] / "a.py").st_ctime_ns + 1)
    version, hashed, read = version_of_a_new_process()
    assert (hashed, read) == (1, 0) and not list(cache_dir.glob(codecache.VERSION_RECORD + "*"))
    assert version_of_a_new_process() == (version, 1, 0)


def _chmod_record(record: Path) -> None:
    record.chmod(0o666)


def _symlink_record(record: Path) -> None:
    elsewhere = record.with_name("elsewhere")
    record.rename(elsewhere)
    record.symlink_to(elsewhere)


def _edit_record(record: Path, **fields) -> None:
    record.write_text(json.dumps({**json.loads(record.read_text()), **fields}))


BAD_RECORDS = {
    "world-writable": (_chmod_record, "group- or world-writable"),
    "a symbolic link": (_symlink_record, "cannot open it"),
    "not JSON": (lambda r: r.write_text("{"), "cannot read it"),
    "a short version": (lambda r: _edit_record(r, version="ab"), "not a version record"),
    "files of the wrong type": (lambda r: _edit_record(r, files=[[1, 2]]), "not a version record"),
}


@pytest.mark.parametrize("bad", list(BAD_RECORDS))
def test_a_record_that_is_not_trusted_is_ignored_and_rewritten(cache_dir, sources, bad):
    version, _, _ = version_of_a_new_process()
    spoil, match = BAD_RECORDS[bad]
    spoil(only_record(cache_dir))
    with pytest.warns(codecache.CodeCacheWarning, match=match):
        assert version_of_a_new_process() == (version, 1, 0)
    record = only_record(cache_dir)
    assert not record.is_symlink() and (record.stat().st_mode & 0o777) == 0o600
    assert version_of_a_new_process() == (version, 0, 1)


def test_a_record_of_another_user_is_ignored(cache_dir, sources, monkeypatch):
    version, _, _ = version_of_a_new_process()
    if os.geteuid() == 0:
        os.chown(only_record(cache_dir), 65534, 65534)
    else:  # simulated, as for entries
        mine = os.geteuid()
        monkeypatch.setattr(codecache, "_trusted", lambda path: None)
        monkeypatch.setattr(codecache, "_euid", lambda: mine + 1)
    with pytest.warns(codecache.CodeCacheWarning, match="owned by uid"):
        assert version_of_a_new_process() == (version, 1, 0)


WARM = """
import json, sys
import numpy as np
import minijit
from minijit import targets
from minijit.runtime import codecache

if sys.argv[1] == "settled":  # the copy of the sources was just written: count it as settled
    codecache._now_ns = lambda: 2**62
if sys.argv[2] == "forbid":  # this process must not generate: the kernel comes from the disk
    def refuse(*args, **kwargs):
        raise AssertionError("generated the generic kernel")
    type(targets.native()).generic_gemm = refuse
rng = np.random.default_rng(5)
a = rng.standard_normal((64, 48), dtype=np.float32)
b = rng.standard_normal((48, 40), dtype=np.float32)
before = set(sys.modules)
c = minijit.einsum("ij,jk->ik", a, b)
imported = sorted(set(sys.modules) - before)
state = codecache.info()
print(json.dumps({
    "minijit": minijit.__file__, "asm": codecache._roots()[2][1], "imported": imported,
    "ok": bool(np.allclose(c, a @ b, rtol=1e-5, atol=1e-4)), "version": codecache.generator_version(),
    **{k: state[k] for k in ("hits", "misses", "writes", "source_hashes", "version_records")},
}))
"""


def test_a_warm_process_loads_the_generic_kernel_without_hashing_or_generating(tmp_path):
    """Fresh processes on a copy of the sources: the first generates the generic kernel, hashes
    the sources and records the version; the second reads the record, loads the kernel and
    imports nothing on its first einsum; after a source changes, the next hashes again and
    generates anew (counters, not times)."""
    import shutil

    copy = tmp_path / "src"
    for package in ("minijit", "asm"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "MINIJIT_CACHE_DIR": str(tmp_path / "code"), "PYTHONPATH": str(copy)}
    env.pop("MINIJIT_CACHE", None)
    env["MINIJIT_JIT"] = "tiered"

    def run(clock: str, generate: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", WARM, clock, generate],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.splitlines()[-1])
        assert out["ok"] and out["minijit"].startswith(str(copy)) and out["asm"].startswith(str(copy))
        return out

    counts = ("hits", "misses", "writes", "source_hashes", "version_records")
    cold = run("settled", "allow")
    assert [cold[k] for k in counts] == [0, 1, 1, 1, 0]
    warm = run("real", "forbid")
    assert [warm[k] for k in counts] == [1, 0, 0, 0, 1]
    assert warm["version"] == cold["version"] and warm["imported"] == []
    with open(copy / "minijit" / "kernels" / "generic.py", "a") as f:
        f.write("# a change to a generator source\n")
    changed = run("real", "allow")
    assert [changed[k] for k in counts] == [0, 1, 1, 1, 0]
    assert changed["version"] != cold["version"]


# -- bound, switch, other kernels -----------------------------------------------------------------
def test_the_size_bound_evicts_the_least_recently_used(cache_dir, monkeypatch, generated):
    shapes = [(8, 3), (16, 3), (24, 3), (48, 9)]  # a, b, c, then d (the largest)
    for shape in shapes:
        relu(*shape)
    sizes = {}
    for entry in cache_dir.glob("*" + codecache.SUFFIX):
        meta = json.loads(codecache.decode(entry.read_bytes(), _key_of(entry))[0]["key"])["args"]
        sizes[(meta["m"], meta["n"])] = entry.stat().st_size
    a, b, c, d = (sizes[s] for s in shapes)
    assert d >= b
    codecache.clear()
    codecache.reset()
    monkeypatch.setenv("MINIJIT_CACHE_MAX_BYTES", str(a + c + d))
    for t, shape in enumerate(shapes[:3]):  # a, b, c: they fit
        relu(*shape)
        os.utime(_entry_of(cache_dir, shape), ns=(10**18 + t * 10**9,) * 2)
    relu(*shapes[0])  # a loaded: touched, now the most recent
    assert codecache.info()["hits"] == 1
    relu(*shapes[3])  # d: over the bound by b, the least recently used
    assert {s for s in shapes if _entry_of(cache_dir, s).exists()} == {shapes[0], shapes[2], shapes[3]}
    state = codecache.info()
    assert state["evicted"] == 1 and state["bytes"] == a + c + d <= state["max_bytes"]


def _key_of(entry: Path) -> str:
    data = entry.read_bytes()
    _, _, meta_len, _, _ = codecache.HEADER.unpack_from(data)
    return json.loads(data[codecache.HEADER.size : codecache.HEADER.size + meta_len])["key"]


def _entry_of(cache_dir: Path, shape: tuple[int, int]) -> Path:
    args = {"m": shape[0], "n": shape[1], "trans_b": False, "dtype": "fp32", "ptype": "relu", "dense_b": False}
    key = codecache.entry_key("unary", targets.native(), args)
    return cache_dir / codecache.entry_name(key)


def test_off_writes_nothing(cache_dir, monkeypatch, generated, loaded):
    monkeypatch.setenv("MINIJIT_CACHE", "off")
    check_relu(relu())
    check_relu(relu())
    assert generated == ["_unary", "_unary"] and loaded == []
    assert not cache_dir.exists()
    state = codecache.info()
    assert not state["enabled"] and state["directory"] is None and (state["hits"], state["misses"]) == (0, 0)
    assert codecache.describe(state).startswith("off")


def test_an_empty_directory_setting_is_off_too(cache_dir, monkeypatch, generated):
    monkeypatch.setenv("MINIJIT_CACHE_DIR", "")
    relu()
    relu()
    assert generated == ["_unary", "_unary"] and codecache.directory() is None


def test_the_default_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("MINIJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert codecache.configured_directory() == tmp_path / "minijit" / "code"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert codecache.configured_directory() == Path.home() / ".cache" / "minijit" / "code"


def test_brgemm_and_binary_kernels_are_cached_too(cache_dir, generated, loaded):
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    for _ in range(2):
        kernels.cache_clear()
        add = kernels.binary(8, 5, ptype="add", target="native")
        out = np.zeros(40, np.float32)
        add(x, y, out, 8, 8, 8)
        np.testing.assert_array_equal(out, x + y)
        gemm = kernels.brgemm(8, 4, 6, 2, trans_b=True, zero_c=True, dtype="fp64", target="native")
    assert generated == ["_binary", "_brgemm"] and len(loaded) == 2
    assert gemm.name.startswith(("brgemm", "neon_brgemm", "sve_brgemm"))


def test_emulated_aarch64_kernels_are_cached_too(cache_dir, loaded):
    first = kernels.unary(8, 3, ptype="relu", target="aarch64-neon")
    kernels.cache_clear()
    second = kernels.unary(8, 3, ptype="relu", target="aarch64-neon")
    assert loaded == [first.code] and type(second) is type(first) and second.name == first.name
    a = np.linspace(-1, 1, 24, dtype=np.float32)
    b = np.zeros(24, np.float32)
    second(a, b, 8, 8)
    np.testing.assert_array_equal(b, np.maximum(a, 0))
    assert codecache.info()["entries"] == 1


def test_arguments_json_cannot_spell_have_no_key():
    native = targets.native()
    assert codecache.entry_key("unary", native, {"m": 8, "n": 3, "ptype": "relu"}) is not None
    assert codecache.entry_key("unary", native, {"m": np.int64(8), "n": 3}) is None
    assert codecache.entry_key("unary", native, {"m": 8, "n": 3, "x": (1, 2)}) is None


def test_the_hit_rate_outlives_the_process(cache_dir):
    relu()
    relu()
    codecache._flush_stats()
    assert json.loads((cache_dir / codecache.STATS_FILE).read_text()) == {"hits": 1, "misses": 1}
    codecache.reset()
    state = codecache.info()
    assert (state["hits"], state["recorded"]["hits"], state["recorded"]["hit_rate"]) == (0, 1, 0.5)
    assert "50 % hit rate (1 hits, 1 misses)" in codecache.describe(state)


def test_minijit_info_shows_the_code_cache(cache_dir, capsys):
    from minijit import cli

    relu()
    assert cli.main(["info", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["code_cache"]
    assert state["directory"] == str(cache_dir) and state["entries"] == 1 and state["misses"] == 1
    assert cli.main(["info"]) == 0
    assert f"code cache: {cache_dir}: 1 entries" in capsys.readouterr().out
