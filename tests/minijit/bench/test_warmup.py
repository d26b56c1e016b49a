"""minijit bench warmup (issue 55 part 6): the report's structure with tiny parameters, every row
with numpy's figure beside minijit's (the timings' values are not checked)."""

from __future__ import annotations

import json

from minijit import cli
from minijit.bench import warmup


def test_draw_shapes_in_range_seeded_and_avoiding():
    shapes = warmup.draw_shapes(50, warmup.SEED)
    assert shapes == warmup.draw_shapes(50, warmup.SEED)
    assert all(warmup.LOW <= x <= warmup.HIGH for s in shapes for x in s)
    fresh = warmup.draw_shapes(10, warmup.SEED + 1, set(shapes))
    assert len(fresh) == 10 and not set(fresh) & set(shapes)
    assert warmup.PRIME_SHAPE not in shapes + fresh


def test_bench_warmup_tiny_report(tmp_path, capsys):
    out_json = tmp_path / "warmup.json"
    argv = ["bench", "warmup", "--shapes", "5", "--new-shapes", "3", "--processes", "2", "--imports", "2"]
    rc = cli.main([*argv, "--json", str(out_json), "-q"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    data = json.loads(out_json.read_text())
    assert data["command"] == "minijit " + " ".join([*argv, "--json", str(out_json), "-q"])
    assert {"date", "hardware", "versions", "settings", "summary", "results", "details"} <= set(data)
    assert data["settings"] | {"shapes": 5, "new_shapes": 3, "processes": 2, "imports": 2} == data["settings"]
    rows = data["results"]
    assert [r["part"] for r in rows] == ["a", "a", "a", "a", "b", "b", "c", "c", "c", "c", "d"]
    for r in rows:
        assert isinstance(r["minijit_ms"], float) and r["minijit_ms"] >= 0, r
        assert r["numpy"], r  # numpy's figure next to minijit's
        assert all(p["name"] and isinstance(p["ms"], float) and p["ms"] >= 0 for p in r["numpy"]), r
        assert f"| {r['part']} | {r['case']} |" in printed
    assert {p["name"] for r in rows if r["part"] in "ab" for p in r["numpy"]} == {"np.einsum", "np.matmul"}
    details = data["details"]
    assert len(details["loop"]["shapes"]) == 5 and len(details["loop"]["passes"]) == 2
    assert [len(c["np.matmul"]) for c in details["loop"]["calls_ms"]] == [5, 5]
    assert len(details["new_shapes"]["per_shape"]) == 3
    assert [len(details["fresh_process"]["runs"][s]) for s in ("cold", "warm")] == [2, 2]
    assert [len(details["imports_ms"][k]) for k in ("numpy", "numpy, minijit")] == [2, 2]
    assert details["loop"]["ok"] and details["new_shapes"]["ok"] and details["fresh_process"]["ok"]
    assert "import minijit beyond numpy:" in printed
