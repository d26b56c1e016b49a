"""Einsum subscripts (numpy's grammar) and the lab's bracket notation for einsum trees."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Expression", "TreeNode", "parse_subscripts", "parse_tree", "tree_subscripts"]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Expression:
    """A parsed einsum: index strings per input, the output string and the size of every index."""

    inputs: tuple[str, ...]
    output: str
    sizes: dict[str, int]

    def __str__(self) -> str:
        return ",".join(self.inputs) + "->" + self.output


def _shape(shape) -> tuple[int, ...]:
    if hasattr(shape, "shape"):
        shape = shape.shape
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise ValueError(f"a shape must be a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ValueError(f"negative dimension in shape {out}")
    return out


def parse_subscripts(subscripts: str, *shapes) -> Expression:
    """Parse numpy-style ``subscripts`` for operands of the given shapes (arrays or tuples).

    Supports explicit (``"ij,jk->ik"``) and implicit (``"ij,jk"``: indices appearing once, in
    alphabetical order) outputs and broadcasting of size-1 dims. Raises ValueError for ``...``
    (ellipsis), repeated indices within one operand (diagonals), repeated output indices, output
    indices missing from the inputs, a wrong number of operands or indices, and size mismatches;
    each message names the operand or index.
    """
    if not isinstance(subscripts, str):
        raise TypeError(f"subscripts must be a str, got {type(subscripts).__name__}")
    s = subscripts.replace(" ", "")
    if "." in s:
        raise ValueError(f"einsum: ellipsis ('...') is not supported (in {subscripts!r})")
    if s.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain more than one '->'")
    explicit = "->" in s
    lhs, rhs = s.split("->") if explicit else (s, None)
    inputs = lhs.split(",")
    for part in [*inputs, rhs or ""]:
        bad = [c for c in part if c not in _LETTERS]
        if bad:
            raise ValueError(f"einsum: invalid character {bad[0]!r} in subscripts {subscripts!r} (only a-z, A-Z)")
    if len(inputs) != len(shapes):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(inputs)} operands, got {len(shapes)}")
    sizes: dict[str, int] = {}
    squeezed: list[str] = []
    shapes_t = [_shape(sh) for sh in shapes]
    for i, (sub, shape) in enumerate(zip(inputs, shapes_t, strict=True)):
        if len(sub) != len(shape):
            raise ValueError(
                f"einsum: operand {i} has {len(shape)} dims (shape {shape}) but subscripts {sub!r} name {len(sub)}"
            )
        for c in sub:
            if sub.count(c) > 1:
                raise ValueError(
                    f"einsum: operand {i} ({sub!r}) repeats index {c!r}: diagonals (repeated indices"
                    " within one operand) are not supported"
                )
    for i, (sub, shape) in enumerate(zip(inputs, shapes_t, strict=True)):
        for c, n in zip(sub, shape, strict=True):
            if n == 1:
                sizes.setdefault(c, 1)
            elif sizes.get(c, 1) == 1:
                sizes[c] = n
            elif sizes[c] != n:
                raise ValueError(
                    f"einsum: operand {i} ({sub!r}) has size {n} for index {c!r}, another operand has {sizes[c]}"
                )
    if explicit:
        out = rhs
        for c in out:
            if out.count(c) > 1:
                raise ValueError(f"einsum: output subscripts {out!r} repeat index {c!r}")
            if c not in sizes:
                raise ValueError(f"einsum: output index {c!r} does not appear in any operand")
    else:
        counts: dict[str, int] = {}
        for sub in inputs:
            for c in sub:
                counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted((c for c, k in counts.items() if k == 1), key=_LETTERS.index))
    del squeezed
    return Expression(tuple(inputs), out, sizes)


# ---------------------------------------------------------------------------------------------
# bracket notation: [[8,4],[7,3,8]->[7,3,4]],[[[2,6,7],[1,5,6]->[1,2,5,7]],[0,5]->[0,1,2,7]]->[0,1,2,3,4]
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeNode:
    """A node of an einsum tree: ``ids`` of its tensor outermost first; leaves have no children."""

    ids: tuple[int, ...]
    children: tuple[TreeNode, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def leaves(self) -> list[TreeNode]:
        if self.is_leaf:
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]


_TOKEN = re.compile(r"\s*(\[|\]|,|->|\d+)")


def parse_tree(text: str) -> TreeNode:
    """Parse the lab's einsum-tree notation.

    A bracket ``[i,j,k]`` lists a tensor's dim ids outermost first (the last has unit stride);
    ``A,B->[C]`` is a contraction of the trees A and B into C, ``A->[C]`` a permutation/reduction;
    a bracketed expression is a subtree. Leaves are the inputs, in order of appearance.
    """
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"einsum tree: unexpected character {text[pos]!r} at position {pos}")
        tokens.append(m.group(1))
        pos = m.end()
    i = 0

    def peek(k: int = 0) -> str | None:
        return tokens[i + k] if i + k < len(tokens) else None

    def expect(t: str) -> None:
        nonlocal i
        if peek() != t:
            raise ValueError(f"einsum tree: expected {t!r} at token {i}, got {peek()!r}")
        i += 1

    def ids() -> tuple[int, ...]:
        nonlocal i
        expect("[")
        out: list[int] = []
        while peek() != "]":
            if peek() is None or not peek().isdigit():
                raise ValueError(f"einsum tree: expected a dim id at token {i}, got {peek()!r}")
            out.append(int(tokens[i]))
            i += 1
            if peek() == ",":
                i += 1
        expect("]")
        if len(set(out)) != len(out):
            raise ValueError(f"einsum tree: tensor {out} repeats a dim id")
        return tuple(out)

    def term() -> TreeNode:
        nonlocal i
        if peek() == "[" and peek(1) == "[":  # a bracketed subtree
            i += 1
            node = expr()
            expect("]")
            return node
        return TreeNode(ids())

    def expr() -> TreeNode:
        nonlocal i
        first = term()
        children = [first]
        if peek() == ",":
            i += 1
            children.append(term())
        if peek() == "->":
            i += 1
            return TreeNode(ids(), tuple(children))
        if len(children) > 1:
            raise ValueError(f"einsum tree: a pair of tensors needs '->[ids]' at token {i}")
        return first

    root = expr()
    if i != len(tokens):
        raise ValueError(f"einsum tree: trailing tokens from {i}: {''.join(tokens[i:])!r}")
    return root


def tree_subscripts(tree: str | TreeNode, sizes) -> tuple[str, list[tuple[int, ...]]]:
    """The einsum string (dim id ``i`` -> the ``i``-th letter) and leaf shapes of a bracket tree
    with dim ``sizes``; ValueError for an id without a size or more than 52 dims."""
    root = parse_tree(tree) if isinstance(tree, str) else tree
    sizes = [int(s) for s in sizes]
    ids, todo = set(), [root]
    while todo:  # every node's ids, inner ones too
        node = todo.pop()
        ids.update(node.ids)
        todo.extend(node.children)
    ids = sorted(ids)
    if ids and ids[-1] >= len(sizes):
        raise ValueError(f"einsum tree: dim id {ids[-1]} has no size (got {len(sizes)} sizes)")
    if len(sizes) > len(_LETTERS):
        raise ValueError(f"einsum tree: at most {len(_LETTERS)} dims")
    leaves = root.leaves()
    subs = ",".join("".join(_LETTERS[i] for i in leaf.ids) for leaf in leaves)
    subs += "->" + "".join(_LETTERS[i] for i in root.ids)
    return subs, [tuple(sizes[i] for i in leaf.ids) for leaf in leaves]
