"""Level formats as objects (issue 53 part 4): capabilities, names, round trips of every
combination to dense numpy, and a scan proving no source compares format names."""

from __future__ import annotations

import pickle
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minijit.sparseauto.formats import (
    COMPRESSED,
    DENSE,
    SINGLETON,
    Blocked,
    Compressed,
    Dense,
    LevelFormat,
    Singleton,
    as_format,
)
from minijit.sparseauto.nest import Operand
from minijit.sparseauto.tensor import Level, SparseTensor

ROOT = Path(__file__).resolve().parents[3]

#: a level format's name compared as a string: ``== "dense"``, ``in ("compressed", ...)``,
#: ``"singleton" !=``, ``case "blocked4"``
_NAME = r"""["'](?:dense|compressed|compressed_nonunique|singleton|blocked\d*)["']"""
_CONSTANT = r"\b(?:DENSE|COMPRESSED|SINGLETON)\b"  # the format constants: ask a capability instead
_COMPARISON = re.compile(
    rf"""(?:==|!=|\bin\b|\bis\b)\s*[(\[{{]?\s*(?:{_NAME}|{_CONSTANT})"""
    rf"""|(?:{_NAME}|{_CONSTANT})\s*[)\]}}]?\s*(?:==|!=|\bin\b|\bnot in\b|\bis\b)|\bcase\s+{_NAME}"""
)
#: lines allowed to compare a format name (path, exact text): none
_ALLOWED: set[tuple[str, str]] = set()


def _sources() -> list[str]:
    args = ["git", "ls-files", "--", "minijit", "bench", "asm", "ptx"]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [p for p in out if p.endswith(".py") and p != "minijit/sparseauto/formats.py"]


def _comparisons(path: str, text: str) -> list[str]:
    return [
        f"{path}:{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if _COMPARISON.search(line.split("#")[0]) and (path, line.strip()) not in _ALLOWED
    ]


def test_scan_finds_a_comparison_when_one_is_there():
    # the check itself: each form of comparison is found, constructions are not
    for bad in (
        'if lv.format == "dense":',
        "if f != 'compressed':",
        'ok = "singleton" in names',
        'if x in ("dense", "compressed"):',
        'if levels == ("dense", "compressed"):',
        '    case "blocked4":',
        "comp = [k for k, f in enumerate(o.levels) if f == COMPRESSED]",
        "if DENSE in levels:",
    ):
        assert _comparisons("x.py", bad), bad
    for fine in ('Level("dense", 3)', 'levels = ("compressed",) * 3', 'return ("dense", n)', "(DENSE,) * len(rest)"):
        assert not _comparisons("x.py", fine), fine


def test_no_format_name_comparison_outside_the_format_classes():
    found = []
    files = _sources()
    assert "minijit/sparseauto/execute.py" in files and "minijit/sparse/spmm_cpu.py" in files
    for path in files:
        found += _comparisons(path, (ROOT / path).read_text(encoding="utf-8"))
    assert not found, "format names compared as strings (ask the LevelFormat object):\n" + "\n".join(found)


def test_capabilities_and_names():
    assert DENSE.full and not DENSE.sparse and DENSE.compiled and DENSE.capabilities.locate
    assert COMPRESSED.sparse and COMPRESSED.compiled and COMPRESSED.capabilities.unique
    coo_top = Compressed(unique=False)
    assert coo_top.sparse and not coo_top.compiled and not coo_top.capabilities.unique
    assert SINGLETON.capabilities.branchless and not SINGLETON.compiled
    assert Blocked(4).name == "blocked4" and not Blocked(4).compiled and Blocked(4).pads
    for f in (DENSE, COMPRESSED, coo_top, SINGLETON, Blocked(3)):
        assert as_format(f.name) == f and f.lowered().compiled and pickle.loads(pickle.dumps(f)) == f
        assert f == f.name and hash(f) == hash(f.name)  # formats were strings once
    assert COMPRESSED.slots == ("pos", "crd", "size") and DENSE.slots == ()
    assert Blocked(4) != Blocked(2) and coo_top != COMPRESSED and Dense() != "compressed"


def test_bad_formats_are_refused_by_name():
    with pytest.raises(ValueError, match="levels\\[1\\] 'csr'"):
        SparseTensor.from_coo(np.zeros((2, 0), int), np.zeros(0), (2, 2), ("dense", "csr"))
    with pytest.raises(ValueError, match="block must be in"):
        Blocked(0)
    with pytest.raises(TypeError, match="block must be an int"):
        Blocked(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unique"):
        Compressed(unique=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one the codegen iterates"):
        Operand("B", ("i", "j"), (DENSE, SINGLETON))
    with pytest.raises(ValueError, match="level 1 crd has 1 entries, a singleton level one per parent"):
        SparseTensor(
            (2, 2),
            [Level(Compressed(unique=False), 2, np.array([0, 2]), np.array([0, 1])), Level(SINGLETON, 2, None, [1])],
            np.ones(2),
        )
    with pytest.raises(ValueError, match="out of range for block count 2"):
        SparseTensor((1, 4), [Level(DENSE, 1), Level(Blocked(2), 4, np.array([0, 1]), np.array([2]))], np.ones(2))
    with pytest.raises(ValueError, match="needs one entry per position of the level above"):
        SparseTensor.from_coo(np.array([[0, 0], [0, 1]]), np.ones(2), (1, 2), (COMPRESSED, SINGLETON))


def test_formats_are_level_format_objects():
    t = SparseTensor.from_dense(np.eye(3), ("dense", "compressed"))
    assert all(isinstance(f, LevelFormat) for f in t.levels)
    assert isinstance(t.storage[0].format, Dense) and isinstance(t.storage[1].format, Compressed)
    assert "levels=('dense', 'compressed')" in repr(t)


_LEVELS = st.sampled_from(
    (DENSE, COMPRESSED, Compressed(unique=False), SINGLETON, Blocked(1), Blocked(2), Blocked(3), Singleton())
)


def _build(c: np.ndarray, v: np.ndarray, shape: tuple[int, ...], levels: tuple, order: tuple) -> SparseTensor | None:
    """The tensor, or None where assembly refuses a singleton level whose level above does not
    give every entry a position of its own (a dense or unique compressed level shared by two
    entries): the one ValueError a valid input may meet here."""
    try:
        return SparseTensor.from_coo(c, v, shape, levels, order)
    except ValueError as e:
        assert any(f.capabilities.branchless for f in levels), e
        assert "singleton level needs one entry per position" in str(e)
        return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_format_combination_round_trips(data):
    nd = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 6), min_size=nd, max_size=nd)))
    levels = tuple(data.draw(st.lists(_LEVELS, min_size=nd, max_size=nd)))
    order = tuple(data.draw(st.permutations(range(nd))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    dense = np.where(rng.random(shape) < data.draw(st.sampled_from((0.1, 0.4, 0.9))), rng.uniform(-1, 1, shape), 0)
    coords = np.array(np.nonzero(dense)).reshape(nd, -1)
    dup = data.draw(st.booleans()) and coords.shape[1] > 0  # duplicates are summed
    c = np.concatenate([coords, coords[:, :1]], axis=1) if dup else coords
    v = np.concatenate([dense[tuple(coords)], [0.5]]) if dup else dense[tuple(coords)]
    want = dense.copy()
    if dup:
        want[tuple(coords[:, 0])] += 0.5
    if any(
        not f.capabilities.unique and not g.capabilities.branchless for f, g in zip(levels, levels[1:], strict=False)
    ):
        with pytest.raises(ValueError, match="repeats coordinates"):  # a coordinate stored twice: refused
            SparseTensor.from_coo(c, v, shape, levels, order)
        return
    t = _build(c[:, ::-1], v[::-1], shape, levels, order)  # unsorted input
    if t is None:
        return
    assert t.levels == levels and t.mode_order == order
    np.testing.assert_allclose(t.to_dense(), want, rtol=1e-12, atol=1e-12)
    again = SparseTensor(t.shape, t.storage, t.vals, t.mode_order)  # the checks accept what assembly built
    np.testing.assert_array_equal(again.to_dense(), t.to_dense())
    from minijit.sparseauto.convert import to_compiled

    low = to_compiled(t)
    assert all(f.compiled for f in low.levels) and low.levels == tuple(f.lowered() for f in levels)
    np.testing.assert_allclose(low.to_dense(), want, rtol=1e-12, atol=1e-12)


_EXPRESSIONS = (
    ("ij,jk->ik", ((5, 4), (4, 3))),
    ("ij,j->i", ((6, 5), (5,))),
    ("ij,ik,jk->ij", ((4, 5), (4, 3), (5, 3))),  # SDDMM: the output samples the sparse pattern
    ("ijk,jl,kl->il", ((3, 4, 5), (4, 2), (5, 2))),  # MTTKRP
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_EXPRESSIONS),
    st.sampled_from(("coo", "blocked")),
    st.integers(0, 2**31 - 1),
    st.sampled_from((0.2, 0.6)),
)
def test_einsum_on_singleton_and_blocked_inputs_matches_numpy(expr, kind, seed, density):
    from minijit.sparseauto import sparse_einsum

    subscripts, shapes = expr
    rng = np.random.default_rng(seed)
    dense = [rng.uniform(-1, 1, s) for s in shapes]
    dense[0] = np.where(rng.random(shapes[0]) < density, dense[0], 0)
    nd = len(shapes[0])
    if kind == "coo":  # COO: a non-unique compressed level, then singletons
        levels = (Compressed(unique=False),) + (SINGLETON,) * (nd - 1)
    else:  # blocked rows: the last level in blocks of 2 or 3 (BCSR with 1 x b blocks)
        levels = (DENSE,) * (nd - 1) + (Blocked(int(rng.integers(2, 4))),)
    s = SparseTensor.from_dense(dense[0], levels)
    assert s.levels == levels
    got = sparse_einsum(subscripts, s, *dense[1:])
    want = np.einsum(subscripts, *dense)
    got = got.to_dense() if isinstance(got, SparseTensor) else got
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_the_planner_takes_singleton_and_blocked_tensors_as_their_csf_form():
    from minijit.sparseauto.plan import sparse_plan

    d = np.zeros((6, 5, 4))
    d[0, 1, 2], d[3, 4, 0], d[3, 4, 3], d[5, 0, 1] = 1.0, 2.0, 3.0, 4.0
    coo = SparseTensor.from_dense(d, (Compressed(unique=False), SINGLETON, SINGLETON))
    csf = SparseTensor.from_dense(d)
    b, c = np.ones((5, 3)), np.ones((4, 3))
    assert str(sparse_plan("ijk,jl,kl->il", coo, b, c).chosen) == str(sparse_plan("ijk,jl,kl->il", csf, b, c).chosen)
    blocked = SparseTensor.from_dense(d, (DENSE, DENSE, Blocked(2)))
    plan = sparse_plan("ijk,jl,kl->il", blocked, b, c)
    assert plan.operands[0].levels == (DENSE, DENSE, COMPRESSED)


def test_scipy_compressed_layout_is_asked_of_the_formats():
    from minijit.sparseauto.formats import Blocked, Compressed, Dense, Singleton, is_scipy_compressed

    assert is_scipy_compressed((Dense(), Compressed()))
    for levels in (
        (Dense(), Compressed(unique=False)),  # repeated columns: not canonical CSR
        (Compressed(), Compressed()),  # DCSR
        (Dense(), Blocked(4)),  # block coordinates, not columns
        (Dense(), Singleton()),
        (Dense(), Dense()),
        (Dense(), Compressed(), Dense()),
    ):
        assert not is_scipy_compressed(levels), levels
