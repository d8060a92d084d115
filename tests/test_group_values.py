"""Per-parameter multipliers held once per group of leaves (`gradxform._group_values`).

The step must read one value per group, not one per leaf: a per-leaf read is
a distinct slice per leaf, and XLA compiles a kernel per distinct slice where
leaves of one shape would share one (the compile regression of issue 37). The
jaxpr counts below pin that without timing anything.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform._group_values import GroupValues, expand_groups, group_by_value
from gradxform._state_paths import find_states
from gradxform.pieces.internal import StepState

pytestmark = pytest.mark.unit

N_LAYERS = 24
PARAMS = {f"l{i:02d}": {"w": jnp.full((4, 3), 0.5 + i / 100, jnp.float32), "b": jnp.full((3,), 0.1, jnp.float32)}
          for i in range(N_LAYERS)}
GRADS = jax.tree.map(lambda x: jnp.full_like(x, 0.3) + x * 0.1, PARAMS)
KW = dict(learning_rate=0.01, wd=0.01, lr_mult={"*/b": 2.0, "l00/w": 0.5}, wd_mult={"*/b": 0.0})


def _tx():
    return gradxform.create("mxnet.adam", **KW)


def _slices(fn, *args) -> int:
    """Slices and gathers in ``fn``'s jaxpr (nested ones included): what reads
    per-leaf numbers out of a vector."""
    def count(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name in ("slice", "dynamic_slice", "gather")
            for v in eqn.params.values():
                inner = getattr(v, "jaxpr", v)
                if hasattr(inner, "eqns"):
                    n += count(inner)
        return n
    return count(jax.make_jaxpr(fn)(*args).jaxpr)


def test_init_holds_one_value_per_distinct_multiplier():
    step = find_states(_tx().init(PARAMS), StepState)[0]
    assert isinstance(step.lr_mult, GroupValues)
    assert step.lr_mult.values.shape == (3,)  # 0.5, 2.0, 1.0: the state does not grow with the leaves
    per_leaf = np.asarray(step.lr_mult)  # leaves in flatten order: l00/b, l00/w, l01/b, ...
    expected = np.tile([2.0, 1.0], N_LAYERS).astype(np.float32)
    expected[1] = 0.5
    np.testing.assert_array_equal(per_leaf, expected)


def test_the_step_reads_a_slice_per_group_not_per_leaf():
    tx = _tx()
    grouped = tx.init(PARAMS)
    per_leaf = expand_groups(grouped)  # the same numbers as one entry per leaf (still accepted)
    by_group = _slices(lambda g, s, p: tx.update(g, s, p), GRADS, grouped, PARAMS)
    by_leaf = _slices(lambda g, s, p: tx.update(g, s, p), GRADS, per_leaf, PARAMS)
    assert by_leaf >= 2 * 2 * N_LAYERS  # lr_mult and wd_mult, one read per leaf each
    assert by_group <= 3 + 2 + 4  # lr_mult's three groups, wd_mult's two, and a few for the counts


def test_grouped_and_per_leaf_states_step_bit_for_bit():
    tx = _tx()
    grouped = tx.init(PARAMS)
    per_leaf = expand_groups(grouped)
    step = jax.jit(tx.update)
    params_a = params_b = PARAMS
    for _ in range(5):
        ua, grouped = step(GRADS, grouped, params_a)
        ub, per_leaf = step(GRADS, per_leaf, params_b)
        params_a, params_b = gradxform.apply_updates(params_a, ua), gradxform.apply_updates(params_b, ub)
    jax.tree.map(np.testing.assert_array_equal, params_a, params_b)
    assert isinstance(find_states(grouped, StepState)[0].lr_mult, GroupValues)  # the step keeps the groups


def test_a_changed_group_value_does_not_recompile():
    tx = _tx()
    state = tx.init(PARAMS)
    traces = []

    @jax.jit
    def step(g, s, p):
        traces.append(1)
        return tx.update(g, s, p)

    step(GRADS, state, PARAMS)
    step_state = find_states(state, StepState)[0]
    doubled = GroupValues(step_state.lr_mult.values * 2, step_state.lr_mult.groups)
    import optax
    u_doubled, _ = step(GRADS, optax.tree_utils.tree_set(state, lr_mult=doubled), PARAMS)
    assert len(traces) == 1
    u_plain, _ = step(GRADS, state, PARAMS)
    # Adam's direction at the first step is the same for every rate: the update doubles
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, 2 * b, rtol=1e-6), u_doubled, u_plain)


def test_group_by_value_numbers_groups_from_the_first_leaf():
    g = group_by_value([2.0, 1.0, 2.0, 0.5, 1.0])
    assert g.groups == (0, 1, 0, 2, 1)
    np.testing.assert_array_equal(np.asarray(g.values), [2.0, 1.0, 0.5])
    np.testing.assert_array_equal(np.asarray(g), [2.0, 1.0, 2.0, 0.5, 1.0])
    assert g.shape == (5,) and float(g[3]) == 0.5
    picked = g[np.asarray([3, 0])]
    assert isinstance(picked, GroupValues) and np.asarray(picked).tolist() == [0.5, 2.0]
    assert g == group_by_value([2.0, 1.0, 2.0, 0.5, 1.0]) and g != group_by_value([2.0, 1.0, 2.0, 0.5, 2.0])


def test_checkpoints_keep_the_per_leaf_vector_and_load_grouped(tmp_path):
    tx = _tx()
    state = tx.init(PARAMS)
    path = tmp_path / "state.gx"
    gradxform.save_state(path, state)
    raw = gradxform.load_state(path)
    key = next(k for k in raw if k.endswith(".lr_mult"))  # the file's form: one entry per leaf
    assert raw[key].shape == (2 * N_LAYERS,)
    back = gradxform.load_state(path, like=state)
    assert jax.tree.structure(back) == jax.tree.structure(state)
    jax.tree.map(np.testing.assert_array_equal, back, state)
    # a file whose multipliers group the leaves otherwise loads grouped by its own numbers
    other = gradxform.create("mxnet.adam", **dict(KW, lr_mult={"l01/*": 3.0})).init(PARAMS)
    gradxform.save_state(path, other)
    loaded = gradxform.load_state(path, like=state)
    got = find_states(loaded, StepState)[0].lr_mult
    np.testing.assert_array_equal(np.asarray(got), np.asarray(find_states(other, StepState)[0].lr_mult))
    assert isinstance(got, GroupValues) and len(got.values) == 2
