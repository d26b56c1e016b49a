"""The `minijit` command line: bench (JSON output, user configs), disasm, info, errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from minijit import cli
from minijit.runtime import host

native_x86 = pytest.mark.skipif(host().isa != "x86_64", reason="bench runs natively; this host is not x86-64")

TINY_GEMM = {
    "name": "tiny-gemm",
    "dtype": "fp32",
    "prim_main": "gemm",
    "dim_types": ["m", "n", "k"],
    "dim_sizes": [24, 12, 8],
    "strides_in0": [1, 0, 24],
    "strides_in1": [0, 8, 1],
    "strides_out": [1, 24, 0],
}
TINY_BRGEMM = {
    "name": "tiny-brgemm",
    "prim_first": "zero",
    "prim_main": "brgemm",
    "prim_last": "relu",
    "dim_types": ["m", "n", "k", "m", "n", "k"],
    "exec_types": ["seq", "seq", "prim", "prim", "prim", "prim"],
    "dim_sizes": [2, 2, 2, 16, 4, 4],
    "strides_in0": [128, 0, 64, 1, 0, 16],
    "strides_in1": [0, 32, 16, 0, 4, 1],
    "strides_out": [128, 64, 0, 1, 16, 0],
}


def run(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({"configs": [TINY_GEMM, TINY_BRGEMM]}))
    return path


@native_x86
def test_bench_json_user_configs(config_file, tmp_path, capsys):
    out_json = tmp_path / "r.json"
    argv = ["bench", "--quick", "--config-file", str(config_file), "--reps", "1", "--threads", "1,2"]
    rc, out, err = run([*argv, "--json", str(out_json)], capsys)
    assert rc == 0, err
    assert "tiny-gemm" in out and "tiny-brgemm" in out and "minijit/numpy" in out
    assert "[1/4] tiny-gemm" in err  # progress on stderr
    data = json.loads(out_json.read_text())
    assert {"date", "command", "hardware", "versions", "settings", "results"} <= set(data)
    assert {"cpu", "cores", "isa", "flags"} <= set(data["hardware"])
    assert {"minijit", "python", "numpy"} <= set(data["versions"])
    assert data["command"].startswith("minijit bench --quick")
    rows = data["results"]
    assert [(r["config"], r["threads"]) for r in rows] == [
        ("tiny-gemm", 1),
        ("tiny-gemm", 2),
        ("tiny-brgemm", 1),
        ("tiny-brgemm", 2),
    ]
    for r in rows:
        assert r["check"]["ok"]
        assert r["gflops"] > 0 and r["time_s"] > 0 and r["flops"] > 0
        (peer,) = r["peers"]
        assert peer["name"] == "numpy.einsum"
        assert peer["ratio"] == pytest.approx(r["gflops"] / peer["gflops"])


@native_x86
def test_bench_builtin_seed_config_tiny_reps(capsys):
    rc, out, _ = run(["bench", "--config", "gemm-256", "--threads", "1", "--reps", "1", "-q"], capsys)
    assert rc == 0
    assert "| gemm-256 | fp32 | 1 |" in out and "(matmul)" in out


@native_x86
def test_bench_yaml_config_and_fp64(tmp_path, capsys):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "ops.yaml"
    path.write_text(yaml.safe_dump([TINY_GEMM]))
    rc, out, _ = run(["bench", "--config-file", str(path), "--dtype", "fp64", "--threads", "1", "--reps", "1"], capsys)
    assert rc == 0
    assert "| tiny-gemm | fp64 | 1 |" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--config", "nope"], "unknown config 'nope'"),
        (["bench", "--reps", "0", "--config", "gemm"], "--reps must be >= 1"),
        (["bench", "--threads", "x", "--config", "gemm"], "--threads takes positive integers"),
        (["bench", "--dtype", "fp16"], "invalid choice"),
        (["bench", "--target", "riscv"], "target must be"),
        (["bench", "--config-file", "/nonexistent/ops.json"], "cannot read config file"),
        (["disasm"], "disasm needs --config"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(argv, message, capsys):
    rc, _, err = run(argv, capsys)
    assert rc == 2
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "invalid JSON"),
        ('{"name": "x"}', "missing key(s) prim_main"),
        ('{"name": "x", "colour": 1}', "unknown key(s) colour"),
        ("[]", "no configurations"),
        (json.dumps({**TINY_GEMM, "dim_sizes": [24, 12]}), "setup lists differ in length"),
        (json.dumps({**TINY_GEMM, "strides_out": [0, 24, 0]}), "nonzero stride_out"),
        (json.dumps({**TINY_GEMM, "prim_main": "fma"}), "setup failed"),
        (json.dumps({**TINY_GEMM, "dim_sizes": "24"}), "dim_sizes must be a list"),
        (json.dumps([TINY_GEMM, TINY_GEMM]), "duplicate configuration name"),
    ],
)
def test_bad_config_file_exit_2(tmp_path, content, message, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    rc, _, err = run(["bench", "--config-file", str(path), "--threads", "1", "--reps", "1"], capsys)
    assert rc == 2, err
    assert message in err
    assert "Traceback" not in err


def test_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    rc, _, err = run(["bench", "--config", "gemm", "--plot", str(tmp_path / "p.png")], capsys)
    assert rc == 2
    assert "--plot needs matplotlib" in err


@native_x86
def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")  # part of the test extra, so CI always runs this
    cfg = tmp_path / "ops.json"
    cfg.write_text(json.dumps([TINY_GEMM]))
    png = tmp_path / "bars.png"
    rc, _, err = run(["bench", "--config-file", str(cfg), "--threads", "1", "--reps", "1", "--plot", str(png)], capsys)
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@native_x86
def test_disasm_prints_listing(capsys):
    rc, out, _ = run(["disasm", "--config", "brgemm", "--threads", "1"], capsys)
    assert rc == 0
    assert "---- main: brgemm_fp32" in out and "---- loopnest" in out
    assert "vfmadd231ps" in out and "ret" in out


@native_x86
def test_disasm_user_config(config_file, capsys):
    rc, out, _ = run(["disasm", "--config-file", str(config_file), "--config", "tiny-gemm"], capsys)
    assert rc == 0
    assert "tiny-gemm" in out and "vfmadd231ps" in out


def test_info(capsys):
    rc, out, _ = run(["info"], capsys)
    assert rc == 0
    for word in ("CPU:", "native:", "targets:", "tools:", "llvm-mc", "qemu-aarch64", "ptxas"):
        assert word in out
    rc, out, _ = run(["info", "--json"], capsys)
    info = json.loads(out)
    assert {"hardware", "targets", "tools", "versions"} <= set(info)


def test_python_dash_m(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "minijit", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "targets:" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "minijit", "bench", "--config", "nope"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "unknown config" in proc.stderr and "Traceback" not in proc.stderr
