"""The repository stands alone: no tracked text file points at the design brief kept outside it or
at the shared folder beside the checkout. The decisions the code relies on are in
docs/decisions.md, cited by section heading.

The searched strings are built from pieces so that this file does not contain them itself.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: what no tracked file may mention: the outside brief and reference notes, and paths to the shared folder
FORBIDDEN = ("DESIGN" + ".md", "REFERENCE" + ".md", ".." + "/shared", "/work" + "/shared", "shared" + "/seeds")


def _tracked(root: pathlib.Path) -> list[str]:
    """The files git tracks under ``root`` (paths relative to it); skips when git cannot say."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot list the tracked files")
    if not (root / ".git").exists():
        pytest.skip(f"{root} is not a git checkout (no .git): cannot list the tracked files")
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"git ls-files failed: {proc.stderr.decode(errors='replace').strip()}")
    return [p for p in proc.stdout.decode().split("\0") if p]


def mentions(root: pathlib.Path) -> list[str]:
    """``file:line: text`` for every line of a tracked text file that contains a `FORBIDDEN` string.
    Binary files (a NUL byte in their first 8000 bytes, git's own test) are not read."""
    found = []
    for rel in _tracked(root):
        path = root / rel
        if not path.is_file():  # deleted in the work tree, or a submodule
            continue
        data = path.read_bytes()
        if b"\0" in data[:8000]:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if any(s in line for s in FORBIDDEN):
                found.append(f"{rel}:{number}: {line.strip()[:160]}")
    return found


def test_no_tracked_file_cites_anything_outside_the_repository():
    found = mentions(ROOT)
    assert not found, (
        "tracked files mention a file outside the repository; cite docs/decisions.md and its section "
        "instead:\n" + "\n".join(found)
    )


def test_the_check_finds_a_mention(tmp_path):
    """The scan above can fail: in a scratch repository, a tracked text file with a mention is named
    with its line, and a binary file is skipped."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "notes.txt").write_text("nothing here\nsee " + FORBIDDEN[0] + ", decision 12\n")
    (tmp_path / "blob.bin").write_bytes(b"\0" + FORBIDDEN[1].encode())
    (tmp_path / "clean.py").write_text("x = 1\n")
    subprocess.run(["git", "add", "notes.txt", "blob.bin", "clean.py"], cwd=tmp_path, check=True)
    found = mentions(tmp_path)
    assert [f.split(": ", 1)[0] for f in found] == ["notes.txt:2"], found
