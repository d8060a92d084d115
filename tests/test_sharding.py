"""The optimizer state follows the user's own sharding (issue: JAX-native at scale).

A JAX user shards parameters with `NamedSharding` (FSDP here: the kernel's rows
over a 4-device axis) and jits their own step. Every optimizer's state must be
sharded like the parameters it is shaped like (per-device bytes as optax's for
the same rule), with explicit mesh axes too, and a `fori_loop` over steps must
keep its carry's types (a replicated moment would make the carry change type).
Runs on the 4 fake CPU devices of tests/conftest.py.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import cases
import gradxform
from gradxform._fused import FusedState
import quick_compile

NAMES = cases.names()
ROWS = 16  # divisible by the 4 devices


def _mesh(explicit: bool):
    kind = AxisType.Explicit if explicit else AxisType.Auto
    return jax.make_mesh((4,), ("fsdp",), axis_types=(kind,))


def _params(mesh):
    kernel = jnp.linspace(-1.0, 1.0, ROWS * 4, dtype=jnp.float32).reshape(ROWS, 4)
    return {"dense": {"kernel": jax.device_put(kernel, NamedSharding(mesh, P("fsdp", None))),
                      "bias": jax.device_put(jnp.full((4,), 0.1, jnp.float32), NamedSharding(mesh, P()))}}


def _unsharded_big_leaves(state):
    """Paths of state leaves shaped like the kernel (or a stack of it) that sit
    whole on one device (a replicated moment: 4x the bytes per device)."""
    out = []
    for path, x in jax.tree_util.tree_leaves_with_path(state):
        if not isinstance(x, jax.Array) or x.shape[-2:] != (ROWS, 4):
            continue
        shard = x.addressable_shards[0].data
        if shard.size * 4 != x.size:
            out.append(f"{jax.tree_util.keystr(path)} {x.shape} {x.sharding.spec}")
    return out


@pytest.mark.parametrize("name", NAMES)
def test_state_is_sharded_like_the_params(name):
    # explicit axes: the sharding is part of the type, and the state must carry it
    # (with auto axes jit's outputs are replicated unless out_shardings says
    # otherwise, for optax.adam too)
    mesh = _mesh(explicit=True)
    with jax.set_mesh(mesh):
        params = _params(mesh)
        tx = cases.create(name)
        state = jax.jit(tx.init)(params)
        assert _unsharded_big_leaves(state) == []


@pytest.mark.parametrize("name", NAMES)
def test_fori_loop_carry_keeps_its_sharding(name):
    mesh = _mesh(explicit=True)
    with jax.set_mesh(mesh):
        params = _params(mesh)
        tx = cases.create(name)

        def body(i, carry):
            p, s = carry
            grads = jax.tree.map(lambda x: jnp.cos(x + i.astype(x.dtype)), p)
            u, s = tx.update(grads, s, p)
            return optax.apply_updates(p, u), s

        @quick_compile.jit  # placements and finiteness: a quick compile
        def run(p):
            return jax.lax.fori_loop(0, 3, body, (p, tx.init(p)))

        new_params, state = run(params)
        assert new_params["dense"]["kernel"].sharding.spec == P("fsdp", None)
        assert _unsharded_big_leaves(state) == []
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(new_params))


@pytest.mark.parametrize("name", ["mxnet.adam", "mindspore.rmsprop", "paddle.rmsprop", "mindspore.momentum"])
def test_an_eager_step_outside_the_mesh_keeps_the_sharding_and_the_numbers(name):
    # op by op, with no mesh context: the rounding marks (`_rounding.rounded`) build their NaN
    # constant outside any jit, where one given the leaf's abstract (traced) sharding was refused
    mesh = _mesh(explicit=True)
    params = _params(mesh)
    plain = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), params)
    tx = cases.create(name)
    grads = jax.tree.map(jnp.cos, params)
    u, _ = tx.update(grads, tx.init(params), params)
    ref, _ = tx.update(jax.tree.map(jnp.cos, plain), tx.init(plain), plain)
    assert u["dense"]["kernel"].sharding.spec == P("fsdp", None)
    jax.tree.map(np.testing.assert_array_equal, u, ref)  # the same elementwise operations, sharded or not


def test_per_device_state_bytes_equal_optax_adam():
    mesh = _mesh(explicit=True)
    with jax.set_mesh(mesh):
        params = _params(mesh)

        def per_device(tree):
            return sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(tree)
                       if isinstance(x, jax.Array) and x.ndim)

        ours = per_device(jax.jit(cases.create("mxnet.adam").init)(params))
        theirs = per_device(jax.jit(optax.adam(1e-3).init)(params))
        assert ours == theirs


@pytest.mark.parametrize("name", NAMES)
def test_optax_tree_map_params_gives_valid_state_shardings(name):
    # optax's recipe for the state's shardings under auto mesh axes: jit(init, out_shardings=...)
    mesh = _mesh(explicit=False)
    params = {"dense": {"kernel": jnp.ones((ROWS, 4)), "bias": jnp.ones((4,))}}
    specs = {"dense": {"kernel": NamedSharding(mesh, P("fsdp", None)), "bias": NamedSharding(mesh, P())}}
    tx = cases.create(name)

    def shardings():
        return optax.tree_map_params(tx, lambda _, s: s, tx.init(params), specs,
                                     transform_non_params=lambda _: NamedSharding(mesh, P()))

    if not cases.case(name).tree_map_params:
        with pytest.raises(ValueError):  # the documented limit (tests/cases.py); flip the flag when it goes
            jax.block_until_ready(jax.jit(tx.init, out_shardings=shardings())(params))
        return
    state = jax.jit(tx.init, out_shardings=shardings())(params)
    assert _unsharded_big_leaves(state) == []


@pytest.mark.parametrize("name, kwargs", [
    ("mxnet.adam", dict(learning_rate=0.1, lr_mult={"*/bias": 0.5}, wd_mult={"dense/kernel": 2.0}, wd=1e-3)),
    ("mindspore.momentum", dict(learning_rate=0.1, momentum=0.9,
                                groups=[{"params": ["dense/kernel"], "weight_decay": 0.01}, {"params": ["dense/bias"]}])),
    ("paddle.adamw", dict(learning_rate=0.1, parameters=[{"params": ["dense/kernel"], "weight_decay": 0.1},
                                                          {"params": ["dense/bias"]}])),
])
def test_optax_tree_map_params_with_multipliers_and_groups(name, kwargs):
    mesh = _mesh(explicit=False)
    params = {"dense": {"kernel": jnp.ones((ROWS, 4)), "bias": jnp.ones((4,))}}
    specs = {"dense": {"kernel": NamedSharding(mesh, P("fsdp", None)), "bias": NamedSharding(mesh, P())}}
    tx = gradxform.create(name, **kwargs)
    shardings = optax.tree_map_params(tx, lambda _, s: s, tx.init(params), specs,
                                      transform_non_params=lambda _: NamedSharding(mesh, P()))
    state = jax.jit(tx.init, out_shardings=shardings)(params)
    assert _unsharded_big_leaves(state) == []


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit", "auto"])
def test_fused_refuses_parameters_sharded_over_devices_and_tx_itself_follows_them(explicit):
    """`gradxform.fused` concatenates leaves into flat buffers, which cannot keep a leaf's sharding:
    under explicit axes its jitted init failed with a ShardingTypeError, and eagerly (or under auto
    axes) the state sat whole on every device. Its init refuses at once, naming the path and the
    per-leaf ``tx``, whose state follows the sharding; replicated parameters still fuse."""
    mesh = _mesh(explicit)
    with jax.set_mesh(mesh):
        params = _params(mesh)
        tx = gradxform.create("adam", learning_rate=0.01)
        ftx = gradxform.fused(tx)
        for init in (ftx.init, jax.jit(ftx.init)):
            if not explicit and init is not ftx.init:
                continue  # auto axes: a traced leaf does not know its sharding, the concrete one does
            with pytest.raises(ValueError, match=r"params\['dense'\]\['kernel'\] is sharded over devices.*"
                                                 r"Use tx itself"):
                init(params)
        if explicit:  # auto axes: jit's outputs are replicated, for optax.adam too (above)
            assert _unsharded_big_leaves(jax.jit(tx.init)(params)) == []
        replicated = jax.tree.map(lambda x: jax.device_put(x, NamedSharding(mesh, P())), params)
        assert isinstance(ftx.init(replicated), FusedState)  # replicated leaves: one flat buffer, fused
