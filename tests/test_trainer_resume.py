"""gradxform.trainer._resume: what Trainer.load_states accepts besides its own bytes. The values a
loaded state may hold, at the bounds `_resume.value_error` states (step counts in [0, 2**31 - 2],
MXNet Nadam's m_schedule, a product of momenta, in [0, 1]: 0 once it underflows); a migrated state tree of the
Trainer's structure but another shape. Files are forged from the Trainer's own with every
checksum recomputed (`test_checkpoint._forge`), so only the value tells them apart."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_checkpoint import _forge

import gradxform
from gradxform._state_paths import state_paths
from gradxform.checkpoint import CheckpointError
from gradxform.pieces.internal import LrRatioTraceState
from gradxform.trainer import Trainer
from gradxform.trainer._resume import state_forms, value_error

PARAMS = {"a": jnp.ones(3), "b": jnp.zeros(2)}


def trainer(name="nadam", **kw):
    return Trainer(PARAMS, name, {"learning_rate": 0.01, **kw}, devices=jax.devices()[:1])


@pytest.mark.parametrize("leaf, value, loads", [
    # MXNet's Nadam (mxnet/optimizer/optimizer.py, Nadam.update): m_schedule starts at 1.0 and is
    # multiplied by momentum_t = beta1 * (1 - 0.5 * 0.96 ** (t * schedule_decay)) in (0, 1) each step,
    # so it reaches float32's 0 after ~110 steps (tests/test_state_domains.py); above 1 never
    (".m_schedule", 1.0, True), (".m_schedule", 0.5, True), (".m_schedule", 0.0, True),
    (".m_schedule", 1.5, False), (".m_schedule", -0.5, False),
    # step counts: 0 before the first step; 2**31 - 2 the last from which the next update still fits
    # int32 (gradxform.migrate._state.MAX_COUNT); 2**31 - 1 not
    ("[0].count", 0, True), ("[0].count", 2**31 - 2, True), ("[0].count", 2**31 - 1, False),
])
def test_loaded_values_at_their_bounds(tmp_path, leaf, value, loads):
    t = trainer()
    t.save_states(tmp_path / "good")  # before any step: m_schedule 1.0, count 0
    _forge(tmp_path / "good", tmp_path / "forged", leaf, value)
    u = trainer()
    if loads:
        u.load_states(tmp_path / "forged")
        return
    what = "NadamState.m_schedule" if "m_schedule" in leaf else "StepState.count"
    with pytest.raises(CheckpointError, match=f"{what} must be in .*; got {value}") as err:
        u.load_states(tmp_path / "forged")
    assert err.value.kind == "corrupt"


def test_a_migrated_tree_of_another_shape_is_refused_naming_the_leaf():
    t = trainer("sgd", momentum=0.9)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(t.state)
    # the first buffer of parameter 'a' (its momentum), one element longer
    i = next(i for i, (_, x) in enumerate(leaves) if np.shape(x) == (3,))
    flat = [x for _, x in leaves]
    flat[i] = np.zeros(4, np.float32)
    u = trainer("sgd", momentum=0.9)
    want = "state" + jax.tree_util.keystr(leaves[i][0]) + " has shape (4,); expected (3,)"
    with pytest.raises(ValueError) as err:
        u.load_states(jax.tree_util.tree_unflatten(treedef, flat))
    assert want in str(err.value)


def test_state_forms_are_every_combination_of_the_first_8_optional_fields():
    """`state_forms`: the state as it is first, then every other combination of its optional
    per-leaf fields held per leaf or absent: MXNet SGD with momentum and wd has 3 (StepState's
    leaf_counts and lr_mult, DecayState's wd_mult), so 2**3 forms, all of distinct structure. The
    combinations are those of the first 8 such fields (256 forms at most, each of which a load
    tries): in a chain of 4 such states (12 fields) the 4 after the 8th stay as they are."""
    params = {"a": jnp.ones(3), "b": jnp.zeros(2)}
    one = gradxform.create("mxnet.sgd", learning_rate=0.1, momentum=0.9, wd=1e-4).init(params)
    for state, count in ((one, 2**3), ((one,) * 4, 2**8)):
        forms = state_forms(state, params)
        assert forms[0] is state and len(forms) == count
        assert len({str(jax.tree.structure(f)) for f in forms}) == count
    assert all(jax.tree.structure(f[3]) == jax.tree.structure(one) for f in forms)
    assert {jax.tree.structure(f[2][0]) for f in forms} != {jax.tree.structure(one[0])}  # the 7th and 8th vary


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_lars_last_rate_out_of_range_is_refused(bad):
    """LARS's momentum correction divides by each parameter's previous rate: a rate is >= 0
    and finite in any run, so a loaded state with another value is refused."""
    tx = gradxform.create("lars", learning_rate=0.1, momentum=0.9, momentum_correction=True)
    state = tx.init(PARAMS)
    assert value_error(state) is None
    node = next(n for _, n in state_paths(state) if isinstance(n, LrRatioTraceState))
    forged = jax.tree.map(lambda x: node._replace(last_lr=jax.tree.map(lambda _: jnp.float32(bad), node.last_lr))
                          if x is node else x, state, is_leaf=lambda x: x is node)
    assert "LrRatioTraceState.last_lr" in value_error(forged)
