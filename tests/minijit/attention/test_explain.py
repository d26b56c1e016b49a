"""`AttentionPlan.explain` and `minijit disasm --attention`: the derivation, the path and the code."""

from __future__ import annotations

import numpy as np
import pytest

from minijit import cli
from minijit.attention import api


def test_explain_prints_the_derivation_the_path_and_the_kernel():
    plan = api.AttentionPlan((2, 3, 100, 16), (2, 3, 70, 16), (2, 3, 70, 8), np.float32, mask="causal", threads=1)
    text = plan.explain()
    assert "B x H = 2 x 3, L = 100, S = 70, E = 16, Ev = 8, fp32" in text and "causal" in text
    for part in ("levels", "choice: g_q =", "split (§6)", "softmax"):
        assert part in text, part
    path = plan.path()
    assert f"path: {path} (1 threads)" in text
    if path.startswith("fused"):  # a host with a fused kernel: its listing follows
        g, s_x = plan.kernel_tile()
        assert f"fused {g} x {s_x}" in path
        assert "// ==== attention_fp32_" in text and "ret" in text.split("// ====")[-1]
        assert "// ====" not in plan.explain(code=False)
    else:
        assert path == "numpy tiles" and "// ====" not in text


def test_decode_and_bool_masks_name_their_paths():
    decode = api.AttentionPlan((4, 1, 32), (4, 900, 32), (4, 900, 32), np.float64, threads=3)
    assert decode.path() == "decode" and "decode: 3 key chunks of about 300 keys" in decode.explain()
    boolean = api.AttentionPlan((40, 8), (50, 8), (50, 8), np.float32, mask="bool", mask_shape=(40, 50))
    fused = api.fused_kernel(np.dtype(np.float32)) is not None  # bool masks run the fused kernel as a bias
    assert boolean.path().startswith("fused") if fused else boolean.path() == "numpy tiles"
    api_fused = api.FUSED
    try:
        api.FUSED = False
        assert boolean.path() == "numpy tiles"
    finally:
        api.FUSED = api_fused


def test_disasm_attention(capsys):
    assert cli.main(["disasm", "--attention", "2,64,80,16,causal", "--dtype", "fp64"]) == 0
    out = capsys.readouterr().out
    assert "B x H = 1 x 2, L = 64, S = 80, E = 16, Ev = 16, fp64" in out and "causal" in out and "path: " in out


@pytest.mark.parametrize(
    ("spec", "dtype", "message"),
    [
        ("2,64,80", None, "H,L,S,E"),
        ("2,64,x,16", None, "H,L,S,E"),
        ("2,0,80,16", None, "positive"),
        ("2,64,80,16,sideways", None, "H,L,S,E"),
        ("2,64,80,16", "int8", "invalid choice"),
    ],
)
def test_disasm_attention_refuses_bad_specs(capsys, spec, dtype, message):
    argv = ["disasm", "--attention", spec] + (["--dtype", dtype] if dtype else [])
    assert cli.main(argv) != 0
    assert message in capsys.readouterr().err
