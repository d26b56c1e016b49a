"""The loop-nest IR: construction checks, validate() and the printed listing."""

from __future__ import annotations

import pytest

from minijit.sparseauto.nest import COMPRESSED, DENSE, Access, Compute, Loop, Nest, Operand, Temp

B = Operand("B", ("i", "j", "k"), (DENSE, COMPRESSED, COMPRESSED))
C = Operand.dense("C", ("i", "l"))
D = Operand.dense("D", ("j", "m"))
E = Operand.dense("E", ("k", "n"))
A = Operand.dense("A", ("l", "m", "n"))


def acc(t: str, ix: str) -> Access:
    return Access(t, tuple(ix))


def loops(order: str, *body) -> tuple:
    """Perfectly nested loops over ``order`` around ``body``."""
    for index in reversed(order):
        body = (Loop(index, tuple(body)),)
    return tuple(body)


def ttmc_fused() -> Nest:
    """The seed's TTMc listing (c): T<k,j> inside l, producer and consumer fused under l."""
    produce = Compute(acc("T", "kj"), (acc("B", "ijk"), acc("C", "il")))
    consume = Compute(acc("A", "lmn"), (acc("T", "kj"), acc("D", "jm"), acc("E", "kn")))
    body = (Temp("T", ("k", "j")), *loops("ijk", produce), *loops("jmkn", consume))
    return Nest((B, C, D, E), A, (Loop("l", body),))


def test_seed_listing_validates_and_prints():
    nest = ttmc_fused().validate()
    text = str(nest)
    assert "for l:\n  T<k,j> = 0\n  for i:\n    for j_pos:\n      for k_pos:" in text
    assert "        T(k,j) += B(i,j,k)*C(i,l)" in text
    # The consumer's j and k loops are dense ranges: no sparse operand below them.
    assert "  for j:\n    for m:\n      for k:\n        for n:" in text
    assert nest.temps == (Temp("T", ("k", "j")),)
    assert len(nest.computes) == 2


def test_walks_names_the_sparse_operand():
    nest = ttmc_fused()
    outer = nest.body[0]
    i_loop = outer.body[1]
    j_loop = i_loop.body[0]
    assert nest.walks(i_loop) == ()  # B's first level is dense
    assert nest.walks(j_loop) == (B,)


def test_sparse_level_order_enforced():
    stmt = Compute(acc("A", "lmn"), (acc("B", "ijk"), acc("C", "il"), acc("D", "jm"), acc("E", "kn")))
    Nest((B, C, D, E), A, loops("lmnijk", stmt)).validate()
    with pytest.raises(ValueError, match="sparse operand B stores"):
        Nest((B, C, D, E), A, loops("lmnikj", stmt)).validate()
    # The same order is fine when B is dense.
    Bd = Operand.dense("B", ("i", "j", "k"))
    Nest((Bd, C, D, E), A, loops("lmnikj", stmt)).validate()


def test_unbound_index_and_unused_loop_rejected():
    stmt = Compute(acc("A", "il"), (acc("C", "il"),))
    out = Operand.dense("A", ("i", "l"))
    with pytest.raises(ValueError, match="not bound"):
        Nest((C,), out, loops("i", stmt)).validate()
    with pytest.raises(ValueError, match="does not use it"):
        Nest((C, D), out, loops("mil", stmt)).validate()
    with pytest.raises(ValueError, match="nested in a loop over it"):
        Nest((C,), out, (Loop("i", (Loop("i", loops("l", stmt)),)),)).validate()


def test_temp_written_before_read():
    produce = Compute(acc("T", "kj"), (acc("B", "ijk"), acc("C", "il")))
    consume = Compute(acc("A", "lmn"), (acc("T", "kj"), acc("D", "jm"), acc("E", "kn")))
    swapped = (Temp("T", ("k", "j")), *loops("jmkn", consume), *loops("ijk", produce))
    with pytest.raises(ValueError, match="read before it is written"):
        Nest((B, C, D, E), A, (Loop("l", swapped),)).validate()
    twice = (Temp("T", ("k", "j")), *loops("ijk", produce), *loops("jmkn", consume))
    twice += tuple(loops("ijk", produce))
    with pytest.raises(ValueError, match="written after it was read"):
        Nest((B, C, D, E), A, (Loop("l", twice),)).validate()
    undeclared = (*loops("ijk", produce), *loops("jmkn", consume))
    with pytest.raises(ValueError, match="neither the output nor a declared temporary"):
        Nest((B, C, D, E), A, (Loop("l", undeclared),)).validate()


def test_temp_scope_and_declaration():
    produce = Compute(acc("T", "kj"), (acc("B", "ijk"), acc("C", "il")))
    consume = Compute(acc("A", "lmn"), (acc("T", "kj"), acc("D", "jm"), acc("E", "kn")))
    # T declared inside l but read outside the l loop: out of scope.
    body = (Loop("l", (Temp("T", ("k", "j")), *loops("ijk", produce))), *loops("ljmkn", consume))
    with pytest.raises(ValueError, match="out-of-scope"):
        Nest((B, C, D, E), A, body).validate()
    # Without the enclosing l, the consumer's output index l comes from no factor.
    flat = (Temp("T", ("k", "j")), *loops("lijk", produce), *loops("ljmkn", consume))
    with pytest.raises(ValueError, match="output index 'l' occurs in no factor"):
        Nest((B, C, D, E), A, flat).validate()
    inside = (Loop("k", (Temp("T", ("k", "j")),) + loops("ij", produce)),)
    with pytest.raises(ValueError, match="inside the loop over its own index"):
        Nest((B, C, D, E), A, (Loop("l", inside + loops("jmkn", consume)),)).validate()


def test_construction_errors_name_the_field():
    with pytest.raises(ValueError, match="levels"):
        Operand("B", ("i", "j"), (DENSE,))
    with pytest.raises(ValueError, match="level format 'csr'"):
        Operand("B", ("i", "j"), (DENSE, "csr"))
    with pytest.raises(ValueError, match="repeated index"):
        Access("B", ("i", "i"))
    with pytest.raises(TypeError, match="identifier"):
        Access("B", ("i", "j k"))
    with pytest.raises(TypeError, match="non-empty"):
        Loop("i", ())
    with pytest.raises(TypeError, match="non-empty"):
        Compute(acc("A", "i"), ())
    with pytest.raises(ValueError, match="used twice"):
        stmt = Compute(acc("A", "il"), (acc("C", "il"),))
        Nest((C,), Operand.dense("C", ("i", "l")), loops("il", stmt)).validate()


def test_operands_must_be_read_and_accesses_match():
    stmt = Compute(acc("A", "il"), (acc("C", "il"),))
    out = Operand.dense("A", ("i", "l"))
    with pytest.raises(ValueError, match="never read"):
        Nest((C, D), out, loops("il", stmt)).validate()
    bad = Compute(acc("A", "il"), (acc("C", "li"),))
    with pytest.raises(ValueError, match="does not match declared indices"):
        Nest((C,), out, loops("il", bad)).validate()


def test_built_loops_equal_checked_ones_and_pickles_hold_fields_only():
    import pickle

    stmt = Compute(Access("A", ("i",)), (Access("B", ("i", "j")),))
    body = (Temp("T", ("k",)), stmt)
    built, checked = Loop.built("j", body), Loop("j", body)
    assert built == checked and hash(built) == hash(checked)
    nest = Nest((Operand.dense("B", ("i", "j")),), Operand.dense("A", ("i",)), (Loop("i", (built,)),))
    assert built.reads == {"B"} and built.temps == (body[0],) and nest.temps == (body[0],)
    hash(nest)
    built.memo["x"] = 1
    again = pickle.loads(pickle.dumps(nest))
    # cached hashes, reads and memos stay behind: string hashes differ between processes
    assert set(again.body[0].body[0].__dict__) == {"index", "body"}
    assert again == nest and hash(again) == hash(nest)
