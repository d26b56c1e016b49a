"""Einsum subscripts (numpy's grammar) and the lab's bracket notation for einsum trees."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Expression", "TreeNode", "expand_subscripts", "parse_subscripts", "parse_tree", "tree_subscripts"]

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


#: letters that stand for the dims under ``...``: those the expression does not use, in this order
_FRESH = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _check_part(part: str, where: str, subscripts: str) -> None:
    """ValueError unless ``part`` (one operand's or the output's subscripts) holds only letters and
    at most one ``...``."""
    for c in part:
        if c not in _LETTERS and c != ".":
            raise ValueError(
                f"einsum: invalid character {c!r} in subscripts {subscripts!r} ({where}; only a-z, A-Z and '...')"
            )
    if "." in part and (part.count(".") != 3 or "..." not in part):
        raise ValueError(
            f"einsum: subscripts {subscripts!r} contain a '.' that is not part of one ellipsis ('...') in {where}"
        )


@lru_cache(maxsize=1024)
def expand_subscripts(subscripts: str, ndims: tuple[int, ...]) -> tuple[tuple[str, ...], str]:
    """numpy's einsum grammar for operands of ``ndims`` dims: the index string of every operand and
    the output, explicit, with each ``...`` replaced by letters the expression does not use.

    As numpy: spaces are ignored; an operand's ``...`` stands for its dims that no letter names,
    aligned to the right (operands may have different numbers of them, or none); the output's
    ``...`` stands for the most any operand has. The implicit output (no ``->``) is the ``...``
    dims, then the letters that occur exactly once in all the inputs (a letter repeated within one
    operand counts as repeated), in ASCII order (upper case first). An explicit output must name
    ``...`` when an operand has dims under it. Letters may repeat within an operand (diagonals;
    `parse_subscripts` refuses them, `minijit.einsum` takes them). ValueError, naming the operand,
    for invalid characters or ellipses, a wrong number of operands or dims, and output letters that
    repeat or occur in no input.
    """
    s = subscripts.replace(" ", "")
    if s.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain more than one '->'")
    explicit = "->" in s
    lhs, rhs = s.split("->") if explicit else (s, "")
    if "-" in lhs + rhs or ">" in lhs + rhs:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain a '-' or '>' that is not part of '->'")
    inputs = lhs.split(",")
    for i, sub in enumerate(inputs):
        _check_part(sub, f"operand {i}", subscripts)
    _check_part(rhs, "the output", subscripts)
    if len(inputs) != len(ndims):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(inputs)} operands, got {len(ndims)}")
    under: list[int] = []  # dims under each operand's '...'
    for i, (sub, nd) in enumerate(zip(inputs, ndims, strict=True)):
        named = len(sub) - 3 if "..." in sub else len(sub)
        if named > nd or (named < nd and "..." not in sub):
            raise ValueError(
                f"einsum: operand {i} has {nd} dims but subscripts {sub!r} name {named}"
                + (" (and no '...' for the others)" if named < nd else "")
            )
        under.append(nd - named if "..." in sub else 0)
    longest = max(under, default=0)
    used = set(s)
    fresh = "".join(c for c in _FRESH if c not in used)[:longest]
    if len(fresh) < longest:
        raise ValueError(
            f"einsum: '...' in {subscripts!r} stands for {longest} dims, but only {len(fresh)} letters are unused"
        )
    inputs = [sub.replace("...", fresh[longest - k :] if k else "") for sub, k in zip(inputs, under, strict=True)]
    if explicit:
        if "..." not in rhs and longest:
            raise ValueError(
                f"einsum: operands have {longest} dims under '...' but the output {rhs!r} has no '...' for them"
                f" (in {subscripts!r})"
            )
        out = rhs.replace("...", fresh)
        for c in out:
            if out.count(c) > 1:
                raise ValueError(f"einsum: output subscripts {rhs!r} repeat index {c!r}")
            if not any(c in sub for sub in inputs):
                raise ValueError(f"einsum: output index {c!r} does not appear in any operand")
    else:
        joined = "".join(inputs)
        out = fresh + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in fresh))
    return tuple(inputs), out


def parse_subscripts(subscripts: str, *shapes) -> Expression:
    """Parse numpy-style ``subscripts`` for operands of the given shapes (arrays or tuples).

    numpy's grammar (`expand_subscripts`): explicit (``"ij,jk->ik"``) and implicit (``"ij,jk"``)
    outputs, ``...`` (its dims get letters of their own in the result) and broadcasting of size-1
    dims. Raises ValueError for repeated indices within one operand (diagonals: `minijit.einsum`
    and `minijit.contract_path` take them, a plan built from shapes does not), for everything
    `expand_subscripts` refuses and for size mismatches; each message names the operand or index.
    """
    if not isinstance(subscripts, str):
        raise TypeError(f"subscripts must be a str, got {type(subscripts).__name__}")
    shapes_t = [_shape(sh) for sh in shapes]
    inputs, out = expand_subscripts(subscripts, tuple(len(sh) for sh in shapes_t))
    for i, sub in enumerate(inputs):
        for c in sub:
            if sub.count(c) > 1:
                raise ValueError(
                    f"einsum: operand {i} ({sub!r}) repeats index {c!r} (a diagonal): a plan built from shapes"
                    " takes no repeated index within one operand; minijit.einsum takes them (it reads the"
                    " diagonal as a view)"
                )
    sizes: dict[str, int] = {}
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
