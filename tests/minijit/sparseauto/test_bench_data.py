"""The sparse-einsum bench's FROSTT-like tensors: power-law fibre lengths with the documented mean."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.bench import sparse_einsum as se


def _fibre_lengths(t) -> np.ndarray:
    coords, _ = t.to_coo()
    _, counts = np.unique(np.ravel_multi_index(tuple(coords[:-1]), t.shape[:-1]), return_counts=True)
    return counts


@pytest.mark.parametrize("shape", [(300, 250, 200), (120, 90, 400)])
def test_fibre_lengths_have_the_documented_mean_and_a_power_law_tail(shape):
    rng = np.random.default_rng(3)
    t = se.powerlaw_tensor(shape, 60_000, rng)
    lengths = _fibre_lengths(t)
    assert t.levels == ("compressed",) * 3
    assert len(lengths) == round(60_000 / se.FIBRE_MEAN)  # one fibre per drawn length
    assert abs(lengths.mean() - se.FIBRE_MEAN) < 0.1 * se.FIBRE_MEAN
    assert lengths.max() <= shape[-1] and lengths.max() > 8 * se.FIBRE_MEAN
    assert np.median(lengths) <= se.FIBRE_MEAN / 4  # most fibres are short ...
    top = np.sort(lengths)[::-1][: len(lengths) // 20]
    assert top.sum() > 0.3 * lengths.sum()  # ... and the longest 5% hold a third of the values
    # The histogram follows the Zipf law P(n) ~ n**-s of the solved exponent.
    s = se.zipf_exponent(se.FIBRE_MEAN, shape[-1])
    hist = np.bincount(lengths, minlength=9)
    for n in (2, 4, 8):
        assert hist[n] / hist[1] == pytest.approx(n**-s, rel=0.25)


def test_zipf_exponent_solves_the_mean_and_refuses_impossible_means():
    for mean, n in ((16.0, 400), (3.0, 50), (1.0, 10)):
        s = se.zipf_exponent(mean, n)
        k = np.arange(1, n + 1.0)
        assert (k * k**-s).sum() / (k**-s).sum() == pytest.approx(mean, rel=1e-6)
    for mean, n in ((0.5, 10), (6.0, 10)):
        with pytest.raises(ValueError, match="mean fibre length"):
            se.zipf_exponent(mean, n)


def test_too_many_fibres_for_the_prefixes_is_refused():
    with pytest.raises(ValueError, match="fibres need more than"):
        se.powerlaw_tensor((10, 10, 50), 20_000, np.random.default_rng(0))


def test_lognormal_fibre_lengths_have_the_requested_mean_and_spread():
    lengths = se.fibre_lengths(20_000, 28_818, 228.0, np.random.default_rng(5), cv=0.89)
    assert lengths.min() >= 1 and lengths.max() <= 28_818
    assert lengths.mean() == pytest.approx(228.0, rel=0.03)
    assert lengths.std() / lengths.mean() == pytest.approx(0.89, rel=0.05)
    for mean, cv in ((0.5, 1.0), (30_000.0, 1.0), (10.0, 0.0)):
        with pytest.raises(ValueError, match="log-normal fibre lengths"):
            se.fibre_lengths(10, 28_818, mean, np.random.default_rng(0), cv=cv)


def test_nell2_tensor_has_nell2_fibre_statistics():
    t = se.nell2_tensor(8, np.random.default_rng(2))
    lengths = _fibre_lengths(t)
    _, j, k = se.NELL2["shape"]
    mean = se.NELL2["density"] / se.NELL2["fibre_density"] * k
    assert t.shape == (8, j, k) and t.levels == ("compressed",) * 3
    assert mean == pytest.approx(228, abs=1)  # NELL-2's published statistics give 228 per fibre
    assert len(lengths) == round(8 * se.NELL2["fibre_density"] * j)  # 27.9 fibres per slice
    assert lengths.mean() == pytest.approx(mean, rel=0.15)
    assert se._fibres(t) == len(lengths)


def test_ab_switches_change_the_code_and_restore_the_emitter():
    """`bench/sparse_ab.py` switches one generator choice off per variant: each switch changes
    TTMc's chosen code, and the emitter class is as before afterwards."""
    import importlib.util
    import pathlib

    from minijit.sparseauto import codegen
    from minijit.sparseauto.tensor import SparseTensor

    path = pathlib.Path(__file__).resolve().parents[3] / "bench" / "sparse_ab.py"
    spec = importlib.util.spec_from_file_location("sparse_ab", path)
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    rng = np.random.default_rng(3)
    dense = np.where(rng.random((6, 7, 30)) < 0.35, rng.standard_normal((6, 7, 30)), 0)
    row = {
        "subscripts": "ijk,jl,km->ilm",
        "operands": [SparseTensor.from_dense(dense), rng.standard_normal((7, 16)), rng.standard_normal((30, 16))],
    }
    before = dict(vars(codegen._Emitter))
    on = ab.compiled(row, "auto", 1).program.asm
    for name, label in (("pairs", "_pairs_done"), ("row", ".Lrow_l_m"), ("store", ".Lstore_T")):
        off = ab.compiled(row, "auto", 1, off=(name,)).program.asm
        assert label in on.listing() and label not in off.listing(), name
        assert dict(vars(codegen._Emitter)) == before
    assert ab.compiled(row, "auto", 1).program.asm.code() == on.code()
