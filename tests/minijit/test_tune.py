"""Cache geometry from sysfs (sharers of the L3), the model on an Intel Xeon's and this Zen 3's
caches, and the autotuner with its store (minijit.tune, minijit.tune_store)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from minijit import TensorOperation, blocking, tune, tune_store
from minijit import plan as plans
from minijit.ir import dim_t
from minijit.runtime import features
from minijit.runtime.features import CacheGeometry

KIB, MIB = 1024, 1024 * 1024

#: the Xeon of issue 36 (family 6 model 207): L1d 48 KiB, L2 2 MiB per core, L3 300 MiB; its
#: sysfs in a 16-CPU guest lists 16 sharers, on the bare host (60 cores, 2 threads each) 120
XEON_SYSFS = [
    ("index0", 1, "Data", "48K", 12, "0"),
    ("index1", 1, "Instruction", "32K", 8, "0"),
    ("index2", 2, "Unified", "2048K", 16, "0"),
    ("index3", 3, "Unified", "307200K", 15, "0-15"),
]
#: this project's Zen 3 guest: L3 32 MiB shared by its 2 CPUs
ZEN3_SYSFS = [
    ("index0", 1, "Data", "32K", 8, "0"),
    ("index1", 1, "Instruction", "32K", 8, "0"),
    ("index2", 2, "Unified", "512K", 8, "0"),
    ("index3", 3, "Unified", "32768K", 16, "0-1"),
]


def fake_sysfs(root, rows, shared_l3: str | None = None):
    """A cpu0/cache directory like Linux's, from (index, level, type, size, ways, shared_cpu_list)."""
    for index, level, kind, size, ways, shared in rows:
        d = root / index
        d.mkdir(parents=True)
        if level == 3 and shared_l3 is not None:
            shared = shared_l3
        for name, value in (
            ("level", level),
            ("type", kind),
            ("size", size),
            ("ways_of_associativity", ways),
            ("coherency_line_size", 64),
            ("shared_cpu_list", shared),
        ):
            (d / name).write_text(f"{value}\n")
    return str(root)


def use_caches(monkeypatch, caches: dict[int, CacheGeometry]) -> None:
    monkeypatch.setattr(features, "_sysfs_caches", lambda: dict(caches))


def gemm_args(n: int, dtype: str = "fp32") -> tuple:
    """numpy's C-order ``C = A @ B`` of n x n matrices, as `TensorOperation.setup` arguments."""
    return (dtype, "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (n, 0, 1), (0, 1, n), (n, 1, 0))


def call_b_bytes(op: TensorOperation) -> int:
    """Bytes of B one compiled kernel call reads (BR steps x prim K x prim N), from the listing."""
    line = next(ln for ln in op.listing().splitlines() if ln.startswith("// compiled"))
    return int(re.search(r"B block (\d+) B", line).group(1))


# -- sysfs ----------------------------------------------------------------------------------------
def test_cpu_lists_count_their_cpus():
    assert [features.parse_cpu_list(t) for t in ("0", "0-1", "0-15", "0-1,4,6-7", "0-59,120-179")] == [1, 2, 16, 5, 120]
    for bad in ("", "3-1", "a", "-1"):
        with pytest.raises(ValueError, match="CPU list|invalid literal"):
            features.parse_cpu_list(bad)


@pytest.mark.parametrize("shared,count", [("0-15", 16), ("0-119", 120)])
def test_sysfs_gives_the_xeons_caches_and_the_l3_sharers(tmp_path, shared, count):
    caches = features.read_sysfs_caches(fake_sysfs(tmp_path, XEON_SYSFS, shared))
    assert caches == {
        1: CacheGeometry(48 * KIB, 12, 64, 1),
        2: CacheGeometry(2 * MIB, 16, 64, 1),
        3: CacheGeometry(300 * MIB, 15, 64, count),
    }
    assert caches[3].per_cpu == 300 * MIB // count


def test_sysfs_without_a_sharers_file_or_with_junk_is_read_defensively(tmp_path):
    root = fake_sysfs(tmp_path, ZEN3_SYSFS)
    os.remove(os.path.join(root, "index3", "shared_cpu_list"))  # an old kernel: a private cache
    (tmp_path / "index2" / "size").write_text("lots\n")  # unreadable: that level is left out
    caches = features.read_sysfs_caches(root)
    assert caches[3] == CacheGeometry(32 * MIB, 16, 64, 1) and 2 not in caches and caches[1].size == 32 * KIB
    assert features.read_sysfs_caches(str(tmp_path / "absent")) == {}
    with pytest.raises(ValueError, match="shared"):
        CacheGeometry(32 * KIB, 8, 64, 0)


def test_the_hosts_llc_sharers_come_from_sysfs(monkeypatch, tmp_path):
    caches = features.read_sysfs_caches(fake_sysfs(tmp_path, XEON_SYSFS, "0-119"))
    use_caches(monkeypatch, caches)
    assert features.last_level_cache_bytes() == 300 * MIB and features.last_level_cache_sharing() == 120
    use_caches(monkeypatch, {})
    assert features.last_level_cache_sharing() == 1


# -- the model on the Xeon's and the Zen 3's caches ---------------------------------------------------
@pytest.mark.parametrize("threads", [1, 16])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_on_the_xeons_geometry_every_calls_b_stays_within_l2(monkeypatch, tmp_path, dtype, threads):
    """2048^3 on the bare Xeon (L3 300 MiB over 120 CPUs: 2.5 MiB each): the listing of issue 36
    said ``B block 4194304 B beyond L2 (2097152 B)``; the B of one call now fits L2, and the
    model's reason names the slice it counted on."""
    use_caches(monkeypatch, features.read_sysfs_caches(fake_sysfs(tmp_path, XEON_SYSFS, "0-119")))
    op = TensorOperation("x86_64-avx512", num_threads=threads)
    op.setup(*gemm_args(2048, dtype))
    assert call_b_bytes(op) <= 2 * MIB
    compiled = next(ln for ln in op.listing().splitlines() if ln.startswith("// compiled"))
    assert "B block" in compiled and "fits L2 (2097152 B)" in compiled.split("B block")[1]
    assert "2621440 B per sharing CPU (120)" in op.blocking.reason
    # what the model says of the caches holds: A micro-panel within L1, B block within its L2 share
    b, item = op.blocking, 4 if dtype == "fp32" else 8
    assert 256 * b.k <= 48 * KIB and b.k * b.n * item <= 2 * MIB // 4


@pytest.mark.parametrize("threads", [1, 16])
def test_in_a_guest_that_shows_16_sharers_the_budget_holds_and_the_tuner_tries_b_within_l2(
    monkeypatch, tmp_path, threads
):
    """The 16-CPU guest's sysfs says 300 MiB over 16 CPUs (18.75 MiB each): the model keeps every
    thread's call B within a quarter of that, and `tune.candidates` adds the variant whose call B
    fits L2, which the tuner then measures."""
    use_caches(monkeypatch, features.read_sysfs_caches(fake_sysfs(tmp_path, XEON_SYSFS, "0-15")))
    for dtype in ("fp32", "fp64"):
        op = TensorOperation("x86_64-avx512", num_threads=threads)
        op.setup(*gemm_args(2048, dtype))
        assert call_b_bytes(op) <= blocking.LLC_B_SHARE * 300 * MIB // 16
        cands = tune.candidates(tune.gemm_config(dtype, 2048, "CCC"), "x86_64-avx512", threads)
        item = 4 if dtype == "fp32" else 8
        assert (cands[0].m, cands[0].n, cands[0].k) == (op.blocking.m, op.blocking.n, op.blocking.k)
        in_l2 = [c for c in cands if c.br is not None and c.br * c.k * c.n * item <= 2 * MIB]
        assert in_l2 and "within L2 (2097152 B)" in in_l2[-1].reason


ZEN3 = {1: CacheGeometry(32 * KIB, 8, 64), 2: CacheGeometry(512 * KIB, 8, 64), 3: CacheGeometry(32 * MIB, 16, 64, 2)}


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
def test_on_this_zen3s_geometry_the_blocks_are_what_they_were(monkeypatch, tmp_path, target):
    """The Zen 3 guest (L3 32 MiB shared by its 2 CPUs): the sysfs tree gives that geometry, and
    the blocks are those of the model before the L3 was counted per sharer (the whole L3 for the
    team, a quarter of it split over the threads) at 2 threads, and at 1 thread up to 2048^3 (every
    `minijit bench` GEMM row). Past that one thread now keeps its call's B within a quarter of its
    own 16 MiB, as each of 2 threads did before: the same prim sizes, fewer BR steps per call."""
    caches = features.read_sysfs_caches(fake_sysfs(tmp_path, ZEN3_SYSFS))
    assert caches == ZEN3
    use_caches(monkeypatch, caches)
    l12 = (ZEN3[1], ZEN3[2])
    for item in (4, 8):
        for n in (256, 384, 512, 1024, 2048, 3072, 4096):
            for threads in (1, 2):
                now = blocking.choose((n, n, n), item, target, threads=threads)
                before = blocking.choose((n, n, n), item, target, threads=threads, caches=l12, llc_bytes=32 * MIB)
                if threads == 2 or n <= 2048:
                    assert (now.m, now.n, now.k, now.br) == (before.m, before.n, before.k, before.br), (item, n)
                else:
                    assert (now.m, now.n, now.k) == (before.m, before.n, before.k)
                    steps = now.br or n // now.k
                    assert steps * now.k * now.n * item <= 16 * MIB * blocking.LLC_B_SHARE


def test_ranked_gives_distinct_blocks_best_first_and_choose_is_the_first():
    caches = (ZEN3[1], ZEN3[2])
    ranked = blocking.ranked((1024, 1024, 1024), 4, "x86_64-avx2", caches=caches, llc_bytes=32 * MIB, count=5)
    assert len(ranked) == 5 and len({(b.m, b.n, b.k) for b in ranked}) == 5
    best = blocking.choose((1024, 1024, 1024), 4, "x86_64-avx2", caches=caches, llc_bytes=32 * MIB)
    assert ranked[0] == best
    cycles = [sum(blocking.transfer_cycles((1024,) * 3, (b.m, b.n, b.k), 16, 4)) for b in ranked]
    assert cycles == sorted(cycles)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="count"):
            blocking.ranked((64, 64, 64), 4, "x86_64-avx2", count=bad)
    with pytest.raises(ValueError, match="llc_shared"):
        blocking.choose((64, 64, 64), 4, "x86_64-avx2", llc_bytes=MIB, llc_shared=0)


# -- the store and the tuner -------------------------------------------------------------------------
@pytest.fixture
def store_file(tmp_path, monkeypatch):
    file = tmp_path / "wisdom" / "tuned.json"
    monkeypatch.setenv("MINIJIT_TUNE_FILE", str(file))
    return file


def test_the_store_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("MINIJIT_TUNE_FILE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tune_store.path() == tmp_path / "minijit" / "tuned.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tune_store.path() == tune_store.Path.home() / ".cache" / "minijit" / "tuned.json"
    monkeypatch.setenv("MINIJIT_TUNE_FILE", "")
    assert tune_store.path() is None and tune_store.lookup("x86_64-avx2", "fp32", (8, 8, 8), "CCC", 1) is None


def test_shape_classes_bucket_sizes_and_name_each_operands_order():
    assert [tune_store.bucket(s) for s in (1, 2, 3, 384, 512, 513, 4096)] == [1, 2, 4, 512, 512, 1024, 4096]
    for order in ("CCC", "FFF", "CFC", "FCF"):
        assert tune_store.orders(tune.gemm_config("fp32", (24, 40, 56), order)) == order
    assert tune_store.class_key("fp64", (384, 1000, 64), "CFC", 2) == "fp64 m512 n1024 k64 CFC t2"


N, REPS = 96, 0.05


def test_a_candidate_replaces_the_models_choice_only_when_clearly_faster():
    model, close, clear, slow = (
        tune.Timed(blocking.Blocking(m, 16, 16, "r"), sec, 1 / sec, 2)
        for m, sec in ((16, 1.0), (32, 1.0 / (1 + tune.MIN_GAIN / 2)), (48, 1.0 / (1 + 2 * tune.MIN_GAIN)), (64, 2.0))
    )
    assert tune.winner([model, close, slow]) is model
    assert tune.winner([model, close, clear, slow]) is clear
    assert tune.winner([model]) is model


def test_the_tuner_stores_its_choice_and_the_next_setup_uses_it(store_file):
    config = tune.gemm_config("fp32", N, "CCC")
    op = TensorOperation("native", num_threads=1)
    env = plans.Env(op.target_info, 1, op.native)
    result = tune.tune_config(config, env, 1, budget_s=REPS, count=3)
    assert result.file == store_file and store_file.exists()
    assert result.best in result.timed and result.model.blocking == result.timed[0].blocking
    assert result.best == tune.winner(result.timed) and all(t.runs >= tune.MIN_ROUNDS for t in result.timed)
    data = json.loads(store_file.read_text())
    entry = data["cpus"][tune_store.cpu_key(op.target)][result.key]
    assert [entry[f] for f in ("m", "n", "k", "br")] == [
        result.best.blocking.m,
        result.best.blocking.n,
        result.best.blocking.k,
        result.best.blocking.br,
    ]
    assert not [p for p in store_file.parent.iterdir() if p.name != "tuned.json"]  # no temporary file left

    # a stored choice that is not the model's: the next setup takes it, and it stays correct
    entry = {"m": 32, "n": 48, "k": 32, "br": 1, "gflops": 1.0}
    tune_store.store(op.target, result.key, entry)
    again = TensorOperation("native", num_threads=1)
    again.setup(*gemm_args(N))
    assert (again.blocking.m, again.blocking.n, again.blocking.k, again.blocking.br) == (32, 48, 32, 1)
    assert "tuned (" in again.blocking.reason and "tuned (" in again.listing()
    assert {d.type: d.size for d in again.config.dims if d.exec.value == "prim" and d.type is not dim_t.k} == {
        dim_t.m: 32,
        dim_t.n: 48,
    }
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (N, N)).astype(np.float32), rng.uniform(-1, 1, (N, N)).astype(np.float32)
    c = np.full((N, N), np.nan, np.float32)
    again.execute(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_tune_true_tunes_at_setup_once_and_stays_correct(store_file):
    op = TensorOperation("native", num_threads=1, tune=REPS)
    n = 80
    args = ("fp64", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0))
    op.setup(*args)  # F-order A, B and C
    key = tune_store.class_key("fp64", (n, n, n), "FFF", 1)
    stored = tune_store.entries(op.target)[key]
    assert "tuned at setup" in op.blocking.reason
    assert (op.blocking.m, op.blocking.n, op.blocking.k, op.blocking.br) == tuple(stored[f] for f in "mnk") + (
        stored["br"],
    )
    rng = np.random.default_rng(2)
    a, b = np.asfortranarray(rng.uniform(-1, 1, (n, n))), np.asfortranarray(rng.uniform(-1, 1, (n, n)))
    c = np.asfortranarray(np.full((n, n), np.nan))
    op.execute(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-10, atol=1e-10)
    before = store_file.stat().st_mtime_ns
    later = TensorOperation("native", num_threads=1, tune=True)
    later.setup(*args)  # the entry exists: read, not tuned again
    assert store_file.stat().st_mtime_ns == before and "tuned (" in later.blocking.reason
    for bad in (0, -1.0, "yes"):
        with pytest.raises(ValueError, match="tune must be"):
            TensorOperation("native", tune=bad)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"format": "something-else", "version": 1, "cpus": {}}),
        json.dumps({"format": "minijit-tuned", "version": 99, "cpus": {}}),
    ],
)
def test_a_corrupt_or_foreign_file_is_ignored_with_a_warning(store_file, text):
    store_file.parent.mkdir(parents=True)
    store_file.write_text(text)
    op = TensorOperation("native", num_threads=1)
    with pytest.warns(UserWarning, match="ignoring"):
        op.setup(*gemm_args(64))
    assert "tuned" not in op.blocking.reason and op.blocking.reason.startswith("prims up to")


def test_entries_for_another_cpu_or_with_bad_fields_are_not_used(store_file):
    key = tune_store.class_key("fp32", (64, 64, 64), "CCC", 1)
    op = TensorOperation("native", num_threads=1)
    other = tune_store.cpu_key(op.target).replace(op.target, "x86_64-other")
    mine = tune_store.cpu_key(op.target)
    data = {
        "format": "minijit-tuned",
        "version": 1,
        "cpus": {other: {key: {"m": 16, "n": 16, "k": 16, "br": None}}, mine: {key: {"m": 0, "n": "x", "k": 16}}},
    }
    store_file.parent.mkdir(parents=True)
    store_file.write_text(json.dumps(data))
    op.setup(*gemm_args(64))
    assert op.blocking.reason.startswith("prims up to")
    with pytest.raises(ValueError, match="positive ints"):
        tune_store.store(op.target, key, {"m": 16, "n": 16, "k": -1, "br": None})


def test_cli_tune_prints_model_and_tuned_choices_and_info_counts_them(store_file, capsys):
    from minijit import cli

    rc = cli.main(["tune", "--budget", "0.05", "--size", "64", "--dtype", "fp32", "--order", "CFC", "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "fp32 m64 n64 k64 CFC t1" in out and "model " in out and "tuned " in out and "GFLOPS" in out
    assert cli.main(["info"]) == 0
    assert f"tuned:    {store_file}: 1 entries for this CPU" in capsys.readouterr().out
    assert cli.main(["tune", "--budget", "1", "--order", "CXC"]) == 2
    assert "order must be" in capsys.readouterr().err


# -- where each class's blocking comes from (`minijit info`) -------------------------------------------
def test_class_choices_say_model_or_tuned_and_info_suggests_tune_only_without_a_tuned_file(store_file, capsys):
    from minijit import cli, targets

    classes = tune.default_classes(threads=[1], sizes=[512, 1024], dtypes=["fp32"], orders=["CCC"])
    native = targets.native().name
    first = tune.class_choices(classes, native)
    assert [c.source for c in first] == ["model", "model"]
    for c in first:  # the model's choice is what setup would use
        config = tune.gemm_config(c.shape_class.dtype, c.shape_class.size, c.shape_class.order)
        op = TensorOperation("native", num_threads=1)
        dims = config.dims
        strides = [[getattr(d, f"stride_{t}") for d in dims] for t in ("in0", "in1", "out")]
        op.setup("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [d.size for d in dims], *strides)
        assert (op.blocking.m, op.blocking.n, op.blocking.k) == (c.blocking.m, c.blocking.n, c.blocking.k)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "GEMM blockings on" in out and "every class uses the cache model; `minijit tune` (about" in out
    assert "fp32  1024 CCC t1" in out

    key = tune_store.class_key("fp32", (1024, 1024, 1024), "CCC", 1)
    tune_store.store(native, key, {"m": 256, "n": 256, "k": 512, "br": 1, "gflops": 1.0})
    second = tune.class_choices(classes, native)
    assert [c.source for c in second] == ["model", "tuned"]
    assert (second[1].blocking.m, second[1].blocking.n, second[1].blocking.k, second[1].blocking.br) == (
        256,
        256,
        512,
        1,
    )
    assert cli.main(["info", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["gemm_blockings"]
    tuned = [r for r in rows if r["source"] == "tuned"]
    assert [(r["dtype"], r["size"], r["order"], r["threads"], r["m"]) for r in tuned] == [("fp32", 1024, "CCC", 1, 256)]
    assert cli.main(["info"]) == 0
    assert "every class uses the cache model" not in capsys.readouterr().out


def test_the_tune_estimate_counts_setup_per_class():
    assert tune.estimated_seconds(32, 120.0) == 120.0 + 32 * tune.SETUP_S_PER_CLASS
