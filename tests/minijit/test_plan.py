"""Plan trees (`minijit.plan`): the tree `setup` builds in each execution mode, frozen nodes, one
runner for `execute` and `execute_ptr`, and the `minijit.schedule.Rules` switches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from minijit import TensorOperation, packing
from minijit import plan as plans
from minijit.schedule import Rules
from tests.minijit.helpers import RULE_HOST, runs_avx2, x86_machine
from tests.minijit.test_threads import MODES, _reach, _reference, mode_op


@pytest.fixture
def _rule_host(pin_host):
    pin_host(RULE_HOST)


def on_rule_host(test):
    """``test`` decides on the `RULE_HOST` profile, where the modes' choices were derived
    (`tests.minijit.test_threads.MODES`, set up for `tests.minijit.helpers.RULE_TARGET`); it
    needs an x86-64 machine to load the kernels on."""
    return x86_machine(pytest.mark.usefixtures("_rule_host")(test))


def _op(mode: str, **kwargs) -> TensorOperation:
    """The operation of `tests.minijit.test_threads.MODES` ``mode`` (the test pins `RULE_HOST`)."""
    return mode_op(mode, **kwargs)


@on_rule_host
def test_each_mode_builds_its_tree():
    body = {mode: _op(mode).plan.body for mode in MODES}
    assert isinstance(body["plain"], plans.Kernel)
    packed, panels = body["packed"], body["panels"]
    assert isinstance(packed, plans.Pack) and isinstance(packed.body, plans.Kernel)
    assert [(f.tensor, type(f.layout)) for f in packed.fills] == [("in0", packing.PackPlan)]
    assert [(f.tensor, type(f.layout)) for f in panels.fills] == [("in1", packing.PanelPlan)]
    assert all(isinstance(c.plan.body, plans.Kernel) for f in panels.fills for c in f.copies)
    m = body["m-chunks"]
    assert isinstance(m, plans.Chunk) and m.kind == "M" and len(m.bodies) == 1 and m.count > 1
    assert plans.head(m).threads == 1 and m.threads == min(2, m.count) and not m.bodies[0].swapped
    k = body["k-chunks"]
    assert isinstance(k, plans.Chunk) and k.kind == "K" and len(k.bodies) == k.count
    touches = [(p.config.prim_first.name, p.config.prim_last.name) for p in k.bodies]
    assert touches[0][0] == "none" and all(isinstance(p.body, plans.Pack) for p in k.bodies)
    peel = body["peeled"]
    assert isinstance(peel, plans.Peel) and len(peel.parts) == 2
    head, tail = peel.parts
    assert head.offsets == (0, 0, 0) and tail.byte_offsets == tuple(4 * o for o in tail.offsets)


@on_rule_host
def test_plans_are_frozen():
    op = _op("packed")
    pack = op.plan.body
    for node, field in ((op.plan, "body"), (pack, "fills"), (pack.body, "threads"), (pack.fills[0], "elements")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(node, field, None)


@runs_avx2
@on_rule_host
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_runner_on_addresses_is_what_execute_runs(mode):
    """`minijit.plan.run_plan` on the operation's plan with raw addresses computes what
    ``execute`` (checked arrays) computes, bit for bit."""
    op = _op(mode)
    args = MODES[mode][0]
    t = np.float32 if args[0] == "fp32" else np.float64
    reach = [_reach(args[6], s) for s in args[7:]]
    rng = np.random.default_rng(5)
    a, b = (rng.uniform(-1, 1, n).astype(t) for n in reach[:2])
    c0 = rng.uniform(-1, 1, reach[2]).astype(t)
    c1, c2 = c0.copy(), c0.copy()
    op.execute(a, b, c1)
    plans.run_plan(op.plan, a.ctypes.data, b.ctypes.data, c2.ctypes.data)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(c1, _reference(args, a, b, c0), rtol=1e-4, atol=1e-4)


@on_rule_host
def test_rules_switch_single_choices_off():
    assert _op("m-chunks").chunk_kind == "M" and _op("m-chunks", rules=Rules(chunks=False)).chunk_kind is None
    assert _op("k-chunks").chunk_kind == "K" and _op("k-chunks", rules=Rules(k_chunks=False)).chunk_kind != "K"
    whole = _op("m-chunks", rules=Rules(chunks=False))
    assert isinstance(whole.plan.body, plans.Pack | plans.Kernel)


def test_bad_rules_and_nodes_are_refused():
    with pytest.raises(TypeError, match=r"rules must be a minijit.schedule.Rules, got dict"):
        TensorOperation("native", rules={"chunks": False})
    with pytest.raises(TypeError, match="not a plan node: str"):
        plans.run("kernel", 0, 0, 0)
    with pytest.raises(TypeError, match="not a plan node"):
        plans.head(object())


def test_views_before_and_after_setup():
    op = TensorOperation("native", num_threads=1)
    assert op.plan is None and op.primitives == {} and op.nest is None and op.loopnest is None
    assert op.pack_plan is None and op.panel_plans == {} and op.packed_operands == frozenset()
    assert op.chunks == 1 and op.chunk_dim is None and op.parts == [] and not op.a_copy and not op.n_outer
    op.setup("fp32", "none", "add", "none", "c", ("prim",), (64,), (1,), (1,), (1,))
    k = op.plan.body
    assert isinstance(k, plans.Kernel) and op.loopnest is k.loopnest and op.nest is k.nest
    assert op.primitives == dict(k.primitives) and op.iterations == k.iterations == 1
