"""The neutral family: `gradxform.neutral.lion` is `optax.lion` bit for bit.

Both run the same steps, each jitted (so XLA:CPU fuses and contracts both the same way),
on a tree whose leaves include a 0-d and a shape-(1,) one (the one-element loops where a
fused multiply-add could go the other way); the updates and parameters of every step, and the
momentum and step count, are compared byte for byte. Then: weight decay off, a mask
(a tree, a prefix, a function), b1 < 0.5 (the other branch of the ``1 - b`` arithmetic),
low-precision dtypes and ``mu_dtype``, optax schedules, `gradxform.set_hyper` of ``b1`` and
the learning rate mid-run in one compiled step, and migration, which has nothing to read.
"""
from __future__ import annotations

import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import gradxform as gx
from gradxform._fused import FusedState
from gradxform._state_paths import find_states
from gradxform.migrate import MigrateError, convert_run, from_gluon_states, from_mindspore_checkpoint
from gradxform.migrate import from_paddle_state_dict, read_params
from gradxform.pieces._moments import LionState
from gradxform.pieces.internal import StepState

STEPS = 60
PARAMS = {
    "dense": {"kernel": jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 4),
              "bias": jnp.asarray([0.1, -0.2, 0.3, 0.05], jnp.float32)},
    "emb": jnp.linspace(0.5, -0.5, 10, dtype=jnp.float32).reshape(5, 2),
    "gain": jnp.asarray([0.7], jnp.float32),   # shape (1,)
    "temperature": jnp.asarray(0.3, jnp.float32),  # 0-d
}


def grads(k, params):
    """Gradients that change sign and scale from step to step (a sign rule needs both)."""
    return jax.tree.map(lambda p: (jnp.sin(3.0 * p.astype(jnp.float32) + k) * (1 + k % 3)
                                   + 0.1 * jnp.cos(k * p.astype(jnp.float32))).astype(p.dtype), params)


def trajectory(tx, params=PARAMS, steps=STEPS, state=None, start=0):
    """The updates and the parameters after each step, and the final state; one jitted update.
    (The updates are compared, not only the parameters: a learning rate 1e-12 off moves no
    parameter of these sizes by a bit.)"""
    update = jax.jit(tx.update)
    state = tx.init(params) if state is None else state
    out = []
    for k in range(start, start + steps):
        u, state = update(grads(k, params), state, params)
        params = optax.apply_updates(params, u)
        out.append((u, params))
    return out, state


def assert_bits(x, y, what=""):
    """The same dtype, shape and bytes (a zero's sign included); assert_array_equal first, for its message."""
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape, (what, x.dtype, y.dtype, x.shape, y.shape)
    np.testing.assert_array_equal(x.astype(np.float32), y.astype(np.float32), err_msg=what)
    assert x.tobytes() == y.tobytes(), what


def assert_same(mine, theirs):
    assert len(mine) == len(theirs)
    for t, (a, b) in enumerate(zip(mine, theirs)):
        assert jax.tree.structure(a) == jax.tree.structure(b)
        for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
            assert_bits(x, y, f"step {t + 1} {jax.tree_util.keystr(path)}")


def mu_and_count(state):
    """gradxform's momentum and update count, as optax's ScaleByLionState holds them."""
    return find_states(state, LionState)[0].mu, find_states(state, StepState)[0].count


def assert_same_state(mine, optax_state):
    mu, count = mu_and_count(mine)
    assert int(count) == int(optax_state[0].count)
    assert jax.tree.structure(mu) == jax.tree.structure(optax_state[0].mu)
    for x, y in zip(jax.tree.leaves(mu), jax.tree.leaves(optax_state[0].mu)):
        assert_bits(x, y, "mu")


@pytest.mark.parametrize("kwargs", [
    dict(learning_rate=3e-3),                                   # optax's defaults: b1 0.9, b2 0.99, wd 1e-3
    dict(learning_rate=3e-3, weight_decay=0.0),                 # decay off
    dict(learning_rate=1e-2, b1=0.95, b2=0.98, weight_decay=0.1),
    dict(learning_rate=2e-3, b1=0.3, b2=0.45, weight_decay=0.05),  # betas below 0.5: the Fast2Sum branch
    dict(learning_rate=2e-3, b1=0.0, b2=1.0),                   # the ends of [0, 1]
], ids=["defaults", "no-decay", "betas", "small-betas", "ends"])
def test_lion_is_optax_lion_bit_for_bit(kwargs):
    mine, s_mine = trajectory(gx.neutral.lion(**kwargs))
    theirs, s_theirs = trajectory(optax.lion(**kwargs))
    assert_same(mine, theirs)
    assert_same_state(s_mine, s_theirs)


def test_lion_op_by_op_is_optax_op_by_op():
    # eager: every operation its own program on both sides (no fusion, no contraction)
    tx, ref = gx.neutral.lion(3e-3, b1=0.8), optax.lion(3e-3, b1=0.8)
    p, q, s, r = PARAMS, PARAMS, tx.init(PARAMS), ref.init(PARAMS)
    for k in range(8):
        u, s = tx.update(grads(k, p), s, p)
        v, r = ref.update(grads(k, q), r, q)
        p, q = optax.apply_updates(p, u), optax.apply_updates(q, v)
        assert_same([(u, p)], [(v, q)])
    assert_same_state(s, r)


@pytest.mark.parametrize("mask", [
    {"dense": {"kernel": True, "bias": False}, "emb": True, "gain": False, "temperature": False},  # a full tree
    {"dense": False, "emb": True, "gain": True, "temperature": False},                           # a prefix
    lambda params: jax.tree.map(lambda p: p.ndim > 1, params),                                   # a function
], ids=["tree", "prefix", "function"])
def test_the_decay_mask_is_optaxs(mask):
    mine, s_mine = trajectory(gx.neutral.lion(3e-3, weight_decay=0.2, mask=mask))
    theirs, s_theirs = trajectory(optax.lion(3e-3, weight_decay=0.2, mask=mask))
    assert_same(mine, theirs)
    assert_same_state(s_mine, s_theirs)
    # and it is not a no-op: unmasked, the decay gives other numbers
    unmasked, _ = trajectory(gx.neutral.lion(3e-3, weight_decay=0.2))
    assert not np.array_equal(mine[-1][1]["dense"]["bias"], unmasked[-1][1]["dense"]["bias"])


@pytest.mark.parametrize("dtype, mu_dtype", [(jnp.bfloat16, None), (jnp.float16, None), (jnp.float32, jnp.bfloat16)],
                         ids=["bf16", "f16", "f32-mu-bf16"])
def test_low_precision_and_mu_dtype_are_optaxs(dtype, mu_dtype):
    params = jax.tree.map(lambda p: p.astype(dtype), PARAMS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the float16-without-multi_precision warning
        mine, s_mine = trajectory(gx.neutral.lion(3e-3, mu_dtype=mu_dtype), params)
    theirs, s_theirs = trajectory(optax.lion(3e-3, mu_dtype=mu_dtype), params)
    assert_same(mine, theirs)
    assert_same_state(s_mine, s_theirs)


@pytest.mark.parametrize("schedule", [
    optax.warmup_cosine_decay_schedule(0.0, 3e-3, 10, STEPS, end_value=1e-4),  # 0 at count 0
    optax.exponential_decay(3e-3, 7, 0.5, staircase=True),
    optax.linear_schedule(3e-3, 1e-4, 40),
], ids=["warmup-cosine", "exponential", "linear"])
def test_an_optax_schedule_as_learning_rate_is_optaxs(schedule):
    mine, s_mine = trajectory(gx.neutral.lion(schedule, weight_decay=0.01))
    theirs, s_theirs = trajectory(optax.lion(schedule, weight_decay=0.01))
    assert_same(mine, theirs)
    assert_same_state(s_mine, s_theirs)
    np.testing.assert_allclose(gx.get_learning_rate(s_mine), schedule(STEPS - 1), rtol=1e-6)  # the last update's


def test_set_hyper_of_b1_and_the_learning_rate_mid_run_without_recompiling():
    traces = []

    def step(g, s, p):
        traces.append(1)
        return tx.update(g, s, p)

    tx = gx.neutral.lion(3e-3, b1=0.9, weight_decay=0.01)
    jstep = jax.jit(step)
    p, s = PARAMS, tx.init(PARAMS)
    mine = []
    for k in range(2 * 30):
        if k == 30:
            s = gx.set_hyper(s, b1=0.8, learning_rate=1e-3)
        u, s = jstep(grads(k, p), s, p)
        p = optax.apply_updates(p, u)
        mine.append((u, p))
    assert len(traces) == 1
    # optax: a fresh optax.lion with the new values, continuing from the first one's state
    first, r = trajectory(optax.lion(3e-3, b1=0.9, weight_decay=0.01), steps=30)
    second, r = trajectory(optax.lion(1e-3, b1=0.8, weight_decay=0.01), first[-1][1], 30, state=r, start=30)
    assert_same(mine, first + second)
    assert_same_state(s, r)
    assert gx.get_hyper(s, "b1") == np.float32(0.8)


def test_learning_rate_changes_are_optax_inject_hyperparams_ones():
    # optax.inject_hyperparams holds the rate as a float32 array, as gradxform does; b1, b2 stay
    # Python floats there (static), so the rule is optax.lion's own
    ref = optax.inject_hyperparams(optax.lion, static_args=("b1", "b2"))(learning_rate=3e-3)
    tx = gx.neutral.lion(3e-3)
    p, q, s, r = PARAMS, PARAMS, tx.init(PARAMS), ref.init(PARAMS)
    update, ref_update = jax.jit(tx.update), jax.jit(ref.update)
    for k in range(50):
        if k in (10, 35):
            lr = 1e-3 if k == 10 else 4e-3
            s = gx.set_hyper(s, learning_rate=lr)
            r.hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float32)
        u, s = update(grads(k, p), s, p)
        v, r = ref_update(grads(k, q), r, q)
        p, q = optax.apply_updates(p, u), optax.apply_updates(q, v)
        assert_same([(u, p)], [(v, q)])
    assert update._cache_size() == 1


def test_b1_set_inside_jit_is_optax_inject_hyperparams_float32_arithmetic():
    # a traced value has no float64 residual: 1 - b1 is then float32(1 - float32(b1)), which is
    # what optax.inject_hyperparams(optax.lion) computes with b1 injected as a float32 array
    ref = optax.inject_hyperparams(optax.lion)(learning_rate=3e-3, b1=0.9)
    tx = gx.neutral.lion(3e-3, b1=0.9)

    @jax.jit
    def step(g, s, p, b1):
        return tx.update(g, gx.set_hyper(s, b1=b1), p)

    @jax.jit
    def ref_step(g, r, p, b1):
        r.hyperparams["b1"] = b1
        return ref.update(g, r, p)

    p, q, s, r = PARAMS, PARAMS, tx.init(PARAMS), ref.init(PARAMS)
    for k in range(STEPS):
        b1 = jnp.float32(0.9 if k < 20 else 0.7)
        u, s = step(grads(k, p), s, p, b1)
        v, r = ref_step(grads(k, q), r, q, b1)
        p, q = optax.apply_updates(p, u), optax.apply_updates(q, v)
        assert_same([(u, p)], [(v, q)])


def test_names_defaults_and_positional_order_are_optaxs():
    mine = inspect.signature(gx.neutral.lion).parameters
    theirs = inspect.signature(optax.lion).parameters
    assert list(mine)[:len(theirs)] == list(theirs)
    for name, p in theirs.items():
        if name != "learning_rate":  # optax requires one; this family's default is 1e-4
            assert mine[name].default == p.default, name
    assert all(mine[n].kind is inspect.Parameter.KEYWORD_ONLY for n in list(mine)[len(theirs):])
    assert gx.neutral.lion in (gx.registered_factory("neutral.lion"), gx.registered_factory("neutral.Lion"))
    a = trajectory(gx.create("neutral.lion", learning_rate=3e-3, b1=0.8), steps=3)[0]
    b = trajectory(gx.neutral.lion(3e-3, 0.8), steps=3)[0]
    assert_same(a, b)
    assert gx.get_learning_rate(gx.neutral.lion().init(PARAMS)) == np.float32(1e-4)
    assert set(gx.hyper_names(gx.neutral.lion().init(PARAMS))) >= {"learning_rate", "b1", "b2", "weight_decay"}


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(b1=1.5), ValueError, r"neutral\.lion\(b1=\.\.\.\).*\[0, 1\]"),
    (dict(b2=-0.1), ValueError, r"neutral\.lion\(b2=\.\.\.\)"),
    (dict(learning_rate=-1.0), ValueError, r"neutral\.lion\(learning_rate=\.\.\.\)"),
    (dict(weight_decay=optax.constant_schedule(1e-3)), TypeError, r"neutral\.lion\(weight_decay=\.\.\.\)"),
    (dict(learning_rate=[1e-3, 1e-4]), TypeError, r"optax-style schedule"),
    (dict(mask={"nope": True}), ValueError, r"neutral\.lion\(mask=\.\.\.\)"),
    (dict(lr=1e-3), TypeError, r"did you mean 'learning_rate'"),
])
def test_bad_arguments_name_the_optimizer_and_the_range(kwargs, error, match):
    with pytest.raises(error, match=match):
        gx.create("neutral.lion", **kwargs).init(PARAMS)
    with pytest.raises((ValueError, KeyError), match="b1"):
        gx.set_hyper(gx.neutral.lion().init(PARAMS), b1=1.5)


def test_fused_lion_is_the_per_leaf_run_bit_for_bit():
    tx = gx.neutral.lion(3e-3, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))
    assert gx.fused.bit_exact(tx) and not gx.fused.why_not_fused(tx)
    per_leaf, _ = trajectory(tx, steps=10)
    fused, state = trajectory(gx.fused(tx), steps=10)
    assert isinstance(state, FusedState)
    assert_same(fused, per_leaf)


def test_a_masked_lion_through_tree_map_params_and_a_checkpoint(tmp_path):
    # the mask becomes per-leaf decay multipliers (1 or 0): a per-leaf field of the state
    tx = gx.neutral.lion(3e-3, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))
    mesh = jax.make_mesh((4,), ("fsdp",), axis_types=(AxisType.Auto,))
    params = {"dense": {"kernel": jnp.ones((8, 4)), "bias": jnp.ones((4,))}}
    specs = {"dense": {"kernel": NamedSharding(mesh, P("fsdp", None)), "bias": NamedSharding(mesh, P())}}
    shardings = optax.tree_map_params(tx, lambda _, s: s, tx.init(params), specs,
                                      transform_non_params=lambda _: NamedSharding(mesh, P()))
    state = jax.jit(tx.init, out_shardings=shardings)(params)
    assert find_states(state, LionState)[0].mu["dense"]["kernel"].sharding.spec == P("fsdp", None)
    # 20 steps, saved and loaded, then 20 more: the 40 steps of one run, bit for bit
    straight, _ = trajectory(tx, steps=40)
    first, state = trajectory(tx, steps=20)
    gx.save_state(tmp_path / "lion.gxckpt", state)
    loaded = gx.load_state(tmp_path / "lion.gxckpt", like=tx.init(PARAMS))
    second, _ = trajectory(tx, first[-1][1], 20, state=loaded, start=20)
    assert_same(first + second, straight)


# -- migration: no framework ever saved a neutral optimizer's state ---------------------------------------

FIX = "tests/fixtures/"


def test_every_reader_refuses_a_neutral_optimizer_saying_why():
    tx = gx.create("neutral.lion", learning_rate=1e-3)
    weights = read_params(FIX + "params/mxnet/net.params")
    order = ["0.weight", "0.bias", "1.gamma", "1.beta", "3.weight", "3.bias"]
    params = {n: jnp.asarray(weights[n]) for n in order}
    why = r"tx is 'neutral.lion': the 'neutral' family holds optimizers that no framework has"
    with pytest.raises(MigrateError, match=why):
        from_gluon_states(FIX + "params/mxnet/trainer.states", params, tx, order=order)
    with pytest.raises(MigrateError, match=why):
        convert_run("mxnet", FIX + "params/mxnet/net.params", FIX + "params/mxnet/trainer.states", tx)
    with pytest.raises(MigrateError, match=r"convert_run\(framework='neutral'\): 'neutral' is gradxform's own "
                                           r"family, not a framework"):
        convert_run("neutral", FIX + "params/mxnet/net.params", FIX + "params/mxnet/trainer.states", tx)
    z = np.load(FIX + "mindspore/adam/trajectory.npz")
    names = [k[len("p_0_"):] for k in z.files if k.startswith("p_0_")]
    with pytest.raises(MigrateError, match=why):
        from_mindspore_checkpoint(FIX + "mindspore/adam/opt.ckpt", {n: jnp.asarray(z[f"p_0_{n}"]) for n in names}, tx)
    z = np.load(FIX + "paddle/asgd_batch3/trajectory.npz")
    names = [k[len("p_0_"):] for k in z.files if k.startswith("p_0_")]
    with pytest.raises(MigrateError, match=why):
        from_paddle_state_dict(FIX + "paddle/asgd_batch3/opt.pdopt", {n: jnp.asarray(z[f"p_0_{n}"]) for n in names},
                               tx)


def test_a_framework_optimizer_still_migrates():
    # the refusal reads the tx's family: MXNet's Adam from the same file is read as before
    weights = read_params(FIX + "params/mxnet/net.params")
    order = ["0.weight", "0.bias", "1.gamma", "1.beta", "3.weight", "3.bias"]
    params = {n: jnp.asarray(weights[n]) for n in order}
    tx = gx.create("adam", learning_rate=0.01,
                   lr_scheduler=gx.schedules.FactorScheduler(step=2, factor=0.5, base_lr=0.01))
    state = from_gluon_states(FIX + "params/mxnet/trainer.states", params, tx, order=order)
    assert int(find_states(state, StepState)[0].count) == 3
