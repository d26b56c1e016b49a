"""Every ```python block of README.md runs as written (in order, each in a fresh namespace), and
what a block says it prints is what it prints."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def test_readme_has_python_blocks():
    assert len(blocks()) >= 4


@pytest.mark.parametrize("index", range(len(blocks())))
def test_readme_block_runs(index):
    source = blocks()[index]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"README.md block {index}", "exec"), {"__name__": f"readme_{index}"})  # noqa: S102
    # "print(x)   # [1. 2. 3. 4.]": the comment after a print is the output it promises
    promised = [m.group(1).strip() for m in re.finditer(r"^print\(.*\)\s+#\s*(.+)$", source, re.M)]
    printed = out.getvalue()
    for text in promised:
        assert text in printed, f"block {index} promised {text!r}, printed {printed[:400]!r}"
