"""Per-group hyperparameters as one array per field (`gradxform._group_hyper.GroupHyper`, issue 37
item 2): the layout, reading and writing one group's value (eager, jitted, through nnx), and files
written before loading into it and continuing bit for bit: ``tests/fixtures/group_hyper_v1/`` (each
group's value a ``<name>_group_<k>`` scalar) and ``group_hyper_v0/`` (written before issue 37 item 3
too: per-leaf fields a scalar per leaf as well; `tools/group_state_fixtures.py` says how)."""
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from gradxform._group_hyper import GroupHyper

from group_cases import CASES, PARAMS, grads  # the configurations the files were written with

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "fixtures", "group_hyper_v1")


def _group_hypers(state) -> list[tuple[str, GroupHyper]]:
    out = []
    for _, node in gx._state_paths.state_paths(state):
        h = getattr(node, "hyper", None)
        if isinstance(h, dict):
            out.extend((str(k), v) for k, v in h.items() if isinstance(v, GroupHyper))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_groups_own_values_are_one_float32_vector_per_field(case):
    state = CASES[case]().init(PARAMS)
    held = _group_hypers(state)
    assert held
    for key, gh in held:
        assert key.endswith("_groups") and gh.values.dtype == jnp.float32 and gh.values.shape == (len(gh.groups),)
        assert list(gh.groups) == sorted(set(gh.groups))
    keys = [k for _, node in gx._state_paths.state_paths(state) for k in (getattr(node, "hyper", None) or {})]
    assert not [k for k in keys if "_group_" in str(k)]  # no scalar per group any more


@pytest.mark.parametrize("layout", ["group_hyper_v1", "group_hyper_v0"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_written_with_per_group_scalars_loads_and_continues_bit_for_bit(case, layout):
    tx = CASES[case]()
    like = {"params": PARAMS, "state": tx.init(PARAMS)}
    fixtures = os.path.join(HERE, "fixtures", layout)
    loaded = gx.load_state(os.path.join(fixtures, f"{case}.gxckpt"), like=like)
    assert jax.tree.structure(loaded) == jax.tree.structure(like)
    u, _ = tx.update(grads(3), loaded["state"], loaded["params"])
    want = np.load(os.path.join(fixtures, f"{case}.npz"))
    got = optax.apply_updates(loaded["params"], u)
    for k in PARAMS:
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=f"{case} {k}")


def test_the_former_files_values_land_in_their_groups():
    # paddle_adam: group 0 sets beta1 0.8 and epsilon 1e-6, group 1 beta2 0.99 and its own clip 0.5
    tx = CASES["paddle_adam"]()
    loaded = gx.load_state(os.path.join(FIXTURES, "paddle_adam.gxckpt"),
                           like={"params": PARAMS, "state": tx.init(PARAMS)})["state"]
    assert float(gx.get_hyper(loaded, "beta1", group=0)) == np.float32(0.8)
    assert float(gx.get_hyper(loaded, "beta2", group=1)) == np.float32(0.99)
    assert float(gx.get_hyper(loaded, "epsilon", group=0)) == np.float32(1e-6)
    assert float(gx.get_hyper(loaded, "clip_norm", group=1)) == np.float32(0.5)
    assert float(gx.get_hyper(loaded, "l2_coeff", group=0)) == np.float32(0.01)


def test_a_former_file_of_other_groups_is_a_mismatch_naming_the_value():
    # the run's group 2 set no weight_decay of its own; this optimizer's does
    other = gx.mindspore.adam(0.01, weight_decay=0.05, groups=[
        {"params": ["a"], "lr": 0.02, "weight_decay": 0.0}, {"params": ["b", "c"], "weight_decay": 0.1},
        {"params": ["d"], "weight_decay": 0.2}])
    with pytest.raises(gx.CheckpointError, match=re.escape("groups set other hyperparameters of their own "
                                                           "(weight_decay: groups [0, 1] in the file, [0, 1, 2] here)")):
        gx.load_state(os.path.join(FIXTURES, "mindspore_adam.gxckpt"), like={"params": PARAMS, "state": other.init(PARAMS)})


def test_a_new_file_round_trips_and_holds_the_vector(tmp_path):
    tx = CASES["mindspore_adam"]()
    state = gx.set_hyper(tx.init(PARAMS), group=1, weight_decay=0.25)
    gx.save_state(tmp_path / "s.gxckpt", state)
    raw = gx.load_state(tmp_path / "s.gxckpt")
    vectors = {k: v for k, v in raw.items() if "weight_decay_groups" in k}
    assert len(vectors) == 1 and np.asarray(next(iter(vectors.values()))).tolist() == [0.0, 0.25]
    back = gx.load_state(tmp_path / "s.gxckpt", like=tx.init(PARAMS))
    assert float(gx.get_hyper(back, "weight_decay", group=1)) == 0.25


def test_one_groups_value_changes_only_its_leaves_and_never_recompiles():
    tx = CASES["paddle_momentum"]()  # group 0 (a, b): momentum 0.5; group 1 (c, d): the optimizer's 0.9
    state = tx.init(PARAMS)
    traces = []

    @jax.jit
    def step(s, g):
        traces.append(1)
        return tx.update(g, s, PARAMS)

    u0, s1 = step(state, grads(0))
    u1, _ = step(gx.set_hyper(s1, group=0, momentum=0.0), grads(1))
    u1_ref, _ = step(s1, grads(1))
    assert len(traces) == 1
    assert not np.array_equal(np.asarray(u1["a"]), np.asarray(u1_ref["a"]))  # group 0 moved
    np.testing.assert_array_equal(np.asarray(u1["c"]), np.asarray(u1_ref["c"]))  # group 1 did not


def test_a_traced_group_value_outside_its_range_is_not_written():
    tx = CASES["paddle_adam"]()
    state = tx.init(PARAMS)
    write = jax.jit(lambda s, v: gx.set_hyper(s, group=0, beta1=v))
    assert float(gx.get_hyper(write(state, 0.5), "beta1", group=0)) == 0.5
    assert float(gx.get_hyper(write(state, 1.5), "beta1", group=0)) == np.float32(0.8)  # kept
    assert float(gx.get_hyper(write(state, 0.5), "beta1", group=1)) == np.float32(0.9)  # the optimizer's


def test_group_errors_name_what_to_type():
    state = CASES["paddle_adam"]().init(PARAMS)
    with pytest.raises(KeyError, match=r"group 1 sets no beta1 of its own.*Groups with their own beta1: \[0\]"):
        gx.set_hyper(state, group=1, beta1=0.7)
    with pytest.raises(ValueError, match=r"expected one value per group holding it, shape \(1,\); got shape \(\)"):
        gx.set_hyper(state, beta1_groups=0.7)
    with pytest.raises(ValueError, match=r"beta1 must be in .*group 0's own value"):
        gx.set_hyper(state, group=0, beta1=1.0)


def test_a_poisoned_group_value_is_refused_before_an_eager_step():
    tx = CASES["mindspore_adam"]()
    state = tx.init(PARAMS)
    bad = jax.tree.map(lambda x: x, state)
    for _, node in gx._state_paths.state_paths(bad):
        h = getattr(node, "hyper", None)
        if isinstance(h, dict) and "weight_decay_groups" in h:
            gh = h["weight_decay_groups"]
            h["weight_decay_groups"] = GroupHyper(gh.values.at[1].set(-1.0), gh.groups)
    with pytest.raises(ValueError, match=r"weight_decay.*\(group 1\)"):
        tx.update(grads(0), bad, PARAMS)


def test_lars_switches_off_the_groups_own_weight_decays_too():
    base = gx.mindspore.momentum(0.1, 0.9, weight_decay=0.01, groups=[
        {"params": ["a", "b"], "weight_decay": 0.05}, {"params": ["c", "d"]}])
    lars = gx.mindspore.lars(base, epsilon=1e-5, coefficient=0.001)
    state = lars.init(PARAMS)
    u, state = lars.update(grads(0), state, PARAMS)
    assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(u))
    assert float(gx.get_hyper(state, "weight_decay", group=0)) == np.float32(0.05)  # given back after the step


# -- as a JAX user holds the state: batched, sharded, serialized, rewritten by optax's tools --------------

def _three_groups():
    return gx.paddle.adam(0.01, parameters=[{"params": ["a"], "beta1": 0.8}, {"params": ["b"], "beta1": 0.7},
                                            {"params": ["c", "d"]}])


def test_a_vmapped_batch_of_states_reads_and_writes_each_runs_group_value():
    states = jax.vmap(lambda _: _three_groups().init(PARAMS))(jnp.arange(3))
    np.testing.assert_array_equal(np.asarray(gx.get_hyper(states, "beta1", group=1)), np.float32([0.7] * 3))
    states = gx.set_hyper(states, group=1, beta1=0.6)
    np.testing.assert_array_equal(np.asarray(gx.get_hyper(states, "beta1_groups")), np.float32([[0.8, 0.6]] * 3))
    states = gx.set_hyper(states, beta2=0.95)  # a scalar for every run
    np.testing.assert_array_equal(np.asarray(gx.get_hyper(states, "beta2")), np.float32([0.95] * 3))


def test_set_hyper_keeps_a_sharded_steps_placement_so_it_never_retraces(tmp_path):
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    params = {"a": jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x"))),
              "b": jax.device_put(jnp.ones(2), NamedSharding(mesh, P()))}
    tx = gx.paddle.adam(0.01, parameters=[{"params": ["a"], "beta1": 0.8}, {"params": ["b"]}])
    traces = []

    @jax.jit
    def step(s, g):
        traces.append(1)
        return tx.update(g, s, params)[1]

    state = step(step(tx.init(params), params), params)
    before = len(traces)
    for write in (lambda s: gx.set_hyper(s, group=0, beta1=0.7), lambda s: gx.set_hyper(s, beta1_groups=[0.6]),
                  lambda s: gx.set_hyper(s, beta2=0.99)):
        state = step(write(state), params)
    gx.save_state(tmp_path / "s", state)
    step(gx.load_state(tmp_path / "s", like=state), params)  # a loaded state lives where like's does
    assert len(traces) == before


def test_flax_serialization_and_a_replaced_group_vector_say_what_they_are():
    from flax import serialization  # noqa: PLC0415

    state = _three_groups().init(PARAMS)
    back = serialization.from_bytes(state, serialization.to_bytes(gx.set_hyper(state, group=0, beta1=0.5)))
    assert float(gx.get_hyper(back, "beta1", group=0)) == 0.5
    replaced = optax.tree_utils.tree_set(state, beta1_groups=jnp.asarray([0.5, 0.5]))
    with pytest.raises(TypeError, match="beta1_groups is a .*not the GroupHyper its optimizer made"):
        gx.get_hyper(replaced, "beta1", group=0)


def test_a_multi_transform_label_that_gets_no_leaf_steps():
    def make():
        return gx.paddle.adam(0.01, parameters=[{"params": ["a"], "beta1": 0.8}, {"params": ["b", "c", "d"]}])
    tx = optax.multi_transform({"main": make(), "frozen": make()}, {k: "main" for k in PARAMS})
    updates, _ = tx.update(grads(0), tx.init(PARAMS), PARAMS)
    assert all(bool(jnp.isfinite(u).all()) for u in jax.tree.leaves(updates))
