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


# -- the Paddle form: several fields over one partition, powers that a step moves ----------------

PADDLE_PARAMS = {"a": {"w": jnp.ones((3, 2)), "b": jnp.ones((2,))}, "c": {"w": jnp.ones((3, 2)), "b": jnp.ones((2,))}}
PADDLE_GRADS = jax.tree.map(lambda x: 0.1 * x, PADDLE_PARAMS)


def _paddle_groups():
    # two parameter groups: the biases with their own rate and beta1, the weights plain
    return gradxform.create("paddle.adamw", learning_rate=0.01, parameters=[
        {"params": ["*/w"]}, {"params": ["*/b"], "learning_rate": 2.0, "beta1": 0.8}])


def test_partition_groups_leaves_equal_in_every_field():
    from gradxform._group_values import partition
    slot, flag = [0, 1, 0, 1, 2], [1, 1, 1, 0, 1]
    a, b = partition(slot, flag, dtypes=(np.int32, np.int32))
    assert a.groups == b.groups == (0, 1, 0, 2, 3)
    assert np.asarray(a).tolist() == slot and np.asarray(b).tolist() == flag


def test_paddle_fields_share_one_partition_and_the_powers_move_per_group():
    from gradxform._group_values import shared_groups
    from gradxform.paddle._adam import AdamState
    tx = _paddle_groups()
    state = tx.init(PADDLE_PARAMS)
    adam = find_states(state, AdamState)[0]
    fields = [adam.beta1_pow, adam.beta2_pow, adam.lr_ratio, adam.decay, adam.group]
    groups = shared_groups(*fields)
    assert groups is not None and len(set(groups)) == 2  # biases, weights
    step = jax.jit(tx.update)
    grouped, per_leaf = state, expand_groups(state)
    for _ in range(3):
        ua, grouped = step(PADDLE_GRADS, grouped, PADDLE_PARAMS)
        ub, per_leaf = step(PADDLE_GRADS, per_leaf, PADDLE_PARAMS)
        jax.tree.map(np.testing.assert_array_equal, ua, ub)
    powers = find_states(grouped, AdamState)[0].beta1_pow
    assert isinstance(powers, GroupValues) and powers.groups == groups
    np.testing.assert_array_equal(np.asarray(powers), np.asarray(find_states(per_leaf, AdamState)[0].beta1_pow))
    np.testing.assert_allclose(sorted(np.asarray(powers.values)), sorted([0.8 ** 4, 0.9 ** 4]), rtol=1e-6)


def test_a_masked_step_writes_the_powers_out_per_leaf_first():
    from gradxform.paddle._adam import AdamState
    tx = _paddle_groups()
    state = tx.init(PADDLE_PARAMS)
    ready = gradxform.per_leaf_counts(state, PADDLE_PARAMS)
    node = find_states(ready, AdamState)[0]
    assert not isinstance(node.beta1_pow, GroupValues)  # stepped: per leaf from now on
    assert isinstance(node.lr_ratio, GroupValues)  # never written by a step: still per group
    mask = {"a": {"w": True, "b": False}, "c": {"w": True, "b": True}}
    _, new = jax.jit(tx.update)(PADDLE_GRADS, ready, PADDLE_PARAMS, update_mask=mask)
    pows = np.asarray(find_states(new, AdamState)[0].beta1_pow)  # leaves: a/b, a/w, c/b, c/w
    np.testing.assert_allclose(pows, [0.8, 0.81, 0.64, 0.81], rtol=1e-6)  # a/b kept its power


def test_select_tree_refuses_a_mask_that_parts_a_group_of_stepped_values():
    from gradxform._tree import select_tree
    tx = _paddle_groups()
    state = tx.init(PADDLE_PARAMS)
    parted = {"a": {"w": jnp.asarray(True), "b": jnp.asarray(False)},
              "c": {"w": jnp.asarray(True), "b": jnp.asarray(True)}}
    with pytest.raises(ValueError, match="per_leaf_counts"):
        select_tree(parted, state, state)


def test_a_file_that_fits_the_templates_groups_keeps_them():
    from gradxform._group_values import regroup_like
    like = GroupValues(jnp.asarray([1.0, 2.0]), (0, 1, 0, 1))
    fits = regroup_like(jnp.asarray([3.0, 4.0, 3.0, 4.0]), like)
    assert fits.groups == (0, 1, 0, 1) and np.asarray(fits.values).tolist() == [3.0, 4.0]
    same = regroup_like(jnp.asarray([3.0, 3.0, 3.0, 3.0]), like)  # equal across groups: still fits
    assert same.groups == (0, 1, 0, 1)
    other = regroup_like(jnp.asarray([3.0, 4.0, 5.0, 4.0]), like)  # parts group 0: its own groups
    assert other.groups == (0, 1, 2, 1) and np.asarray(other).tolist() == [3.0, 4.0, 5.0, 4.0]


def test_by_group_and_shared_groups_say_when_a_partition_holds():
    from gradxform._group_values import by_group, shared_groups
    a, b, c = object(), object(), object()
    assert by_group([a, b, a, b], (0, 1, 0, 1)) == [a, b]
    assert by_group([a, b, c, b], (0, 1, 0, 1)) is None  # group 0 holds two objects
    assert by_group([a, b], (0, 2)) is None  # group 1 has no leaf
    assert by_group([], ()) == []
    x = GroupValues(jnp.zeros(2), (0, 1, 0))
    y = GroupValues(jnp.zeros(2), (0, 1, 1))
    assert shared_groups(x, x) == (0, 1, 0)
    assert shared_groups(x, y) is None and shared_groups(y, x) is None
    assert shared_groups(x, jnp.zeros(3)) is None and shared_groups() is None
    assert x.ndim == 1 and x.size == 3 and len(x) == 3


def test_per_group_falls_back_to_leaves_and_stepped_keeps_the_form():
    from gradxform._group_values import per_group, stepped
    tree = {"a": jnp.ones(2), "b": jnp.ones(3), "c": jnp.ones(4)}
    field = GroupValues(jnp.asarray([0.5, 0.25]), (0, 1, 0))
    rate, on = jnp.float32(0.1), jnp.asarray(True)
    grouped = per_group({"p": field}, {"a": rate, "b": rate, "c": rate}, {"a": on, "b": on, "c": on}, tree)
    assert grouped.groups == (0, 1, 0) and grouped.lr.shape == () and not grouped.mask_parts_groups
    new = stepped(field, grouped.values["p"] * 2, grouped)
    assert isinstance(new, GroupValues) and np.asarray(new).tolist() == [1.0, 0.5, 1.0]
    # rates that differ inside group 0: per leaf, the field still comes back per group
    r1, r2 = jnp.float32(0.1), jnp.float32(0.2)
    leafwise = per_group({"p": field}, {"a": r1, "b": r1, "c": r2}, {"a": on, "b": on, "c": on}, tree)
    assert leafwise.groups is None and leafwise.lr.shape == (3,)
    np.testing.assert_array_equal(np.asarray(leafwise.values["p"]), [0.5, 0.25, 0.5])
    np.testing.assert_allclose(np.asarray(leafwise.lr), [0.1, 0.1, 0.2])
    back = stepped(field, leafwise.values["p"] * 2, leafwise)
    assert isinstance(back, GroupValues) and np.asarray(back).tolist() == [1.0, 0.5, 1.0]
    assert stepped(jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray([4.0, 5.0, 6.0]), leafwise).shape == (3,)
    # a mask that parts group 0 cannot move a field held per group
    t, f = jnp.asarray(True), jnp.asarray(False)
    parted = per_group({"p": field}, {"a": rate, "b": rate, "c": rate}, {"a": t, "b": t, "c": f}, tree)
    assert parted.mask_parts_groups and parted.on.shape == (3,)
    with pytest.raises(ValueError, match="per_leaf_counts"):
        stepped(field, parted.values["p"], parted)


def test_per_group_of_one_leaf_and_of_none():
    from gradxform._group_values import per_group
    one = per_group({"p": GroupValues(jnp.asarray([0.5]), (0,))}, {"a": jnp.float32(0.1)},
                    {"a": jnp.asarray(True)}, {"a": jnp.ones(2)})
    assert one.groups == (0,) and float(one.lr) == np.float32(0.1)
    none = per_group({"p": GroupValues(jnp.zeros((0,)), ())}, {}, {}, {})
    assert none.lr.shape == (0,) and none.on.shape == (0,)
    empty_tx = gradxform.create("paddle.adam", learning_rate=0.1)
    u, _ = empty_tx.update({}, empty_tx.init({}), {})
    assert u == {}


def test_a_mask_that_parts_any_field_held_per_group_is_seen():
    from gradxform._group_values import per_group
    tree = {"a": jnp.ones(2), "b": jnp.ones(3), "c": jnp.ones(4)}
    t, f, rate = jnp.asarray(True), jnp.asarray(False), jnp.float32(0.1)
    parted = GroupValues(jnp.zeros(2), (0, 1, 0))  # the mask (T, T, F) parts its group 0
    whole = GroupValues(jnp.zeros(2), (0, 0, 1))  # but none of these
    run = per_group({"p": parted, "q": whole}, {"a": rate, "b": rate, "c": rate}, {"a": t, "b": t, "c": f}, tree)
    assert run.mask_parts_groups


def test_values_compare_as_arrays_only_with_arrays():
    arrays = GroupValues(jnp.asarray([1.0]), (0,))
    assert arrays == GroupValues(np.asarray([1.0]), (0,))
    assert arrays != GroupValues((1.0,), (0,))  # a tree-mapped copy is not the same state
    assert GroupValues((1.0,), (0,)) == GroupValues((1.0,), (0,))


def test_flax_serialization_round_trips_grouped_state():
    serialization = pytest.importorskip("flax.serialization")  # Flax is an example extra, not a dependency
    state = _tx().init(PARAMS)
    back = serialization.from_bytes(state, serialization.to_bytes(state))
    assert jax.tree.structure(back) == jax.tree.structure(state)
    jax.tree.map(np.testing.assert_array_equal, back, state)
