"""Hyperparameters as state: read, set, range checks, and no recompiles."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx

PARAMS = {"w": jnp.ones((3, 2)), "b": jnp.zeros((2,))}
GRADS = jax.tree.map(lambda p: jnp.full_like(p, 0.5), PARAMS)


def test_every_hyperparameter_is_a_float32_scalar_even_for_bfloat16_params():
    tx = gx.create("adam", beta2=0.999, wd=0.1)
    with pytest.warns(UserWarning, match="multi_precision"):
        state = tx.init(jax.tree.map(lambda p: p.astype(jnp.bfloat16), PARAMS))
    for name in gx.hyper_names(state):
        v = gx.get_hyper(state, name)
        assert v.shape == () and v.dtype in (jnp.float32, jnp.bool_), name
    assert float(gx.get_hyper(state, "beta2")) == np.float32(0.999)  # not rounded to bf16's 1.0


def test_set_hyper_changes_the_step_without_retracing():
    tx = gx.create("sgd", learning_rate=0.1, momentum=0.9, wd=0.01, rescale_grad=1.0)
    traces = []

    @jax.jit
    def step(params, state):
        traces.append(1)
        updates, state = tx.update(GRADS, state, params)
        return gx.apply_updates(params, updates), state

    _, state = step(PARAMS, tx.init(PARAMS))  # a first step, so the momentum buffer is not zero
    p1, _ = step(PARAMS, state)
    for values in ({"learning_rate": 0.5}, {"wd": 0.2}, {"momentum": 0.1}, {"rescale_grad": 0.25}):
        p2, _ = step(PARAMS, gx.set_hyper(state, **values))
        assert not np.allclose(p2["w"], p1["w"]), values
    assert len(traces) == 1


def test_learning_rate_read_and_set():
    tx = gx.create("adam", learning_rate=0.01)
    state = tx.init(PARAMS)
    assert gx.get_learning_rate(state) == pytest.approx(0.01)
    state = gx.set_learning_rate(state, 0.003)
    assert gx.get_learning_rate(state) == pytest.approx(0.003)
    u_small, _ = tx.update(GRADS, state, PARAMS)
    u_big, _ = tx.update(GRADS, gx.set_learning_rate(state, 0.03), PARAMS)
    np.testing.assert_allclose(u_big["w"], 10 * u_small["w"], rtol=1e-6)


def test_learning_rate_follows_the_schedule_and_refuses_a_manual_set():
    sched = gx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    tx = gx.create("sgd", lr_scheduler=sched)
    state = tx.init(PARAMS)
    seen = []
    for _ in range(5):
        _, state = tx.update(GRADS, state, PARAMS)
        seen.append(gx.get_learning_rate(state))
    np.testing.assert_allclose(seen, [1.0, 1.0, 0.5, 0.5, 0.25])
    with pytest.raises(UserWarning, match="LRScheduler"):
        gx.set_learning_rate(state, 0.1)


@pytest.mark.parametrize("name, value, message", [
    ("learning_rate", -1.0, r"learning_rate must be in \[0, inf\)"),
    ("momentum", 1.5, r"momentum must be in \[0, 1\)"),
    ("wd", -0.1, "wd must be"),
])
def test_set_hyper_checks_ranges_on_the_host(name, value, message):
    state = gx.create("sgd", momentum=0.9).init(PARAMS)
    with pytest.raises(ValueError, match=message):
        gx.set_hyper(state, **{name: value})


def test_unknown_and_derived_names_are_refused():
    state = gx.create("sgd").init(PARAMS)
    with pytest.raises(KeyError, match="beta1"):
        gx.set_hyper(state, beta1=0.5)
    with pytest.raises(KeyError, match="derived"):
        gx.set_hyper(state, current_lr=0.5)
    with pytest.raises(KeyError, match="holds"):
        gx.get_hyper(state, "nope")


def test_set_beta_keeps_float64_accuracy_of_bias_correction():
    # the float32 residual travels with the value, so 1 - beta2**t stays accurate
    tx = gx.create("adam", beta2=0.99)
    state = gx.set_hyper(tx.init(PARAMS), beta2=0.999)
    reference = gx.create("adam", beta2=0.999).init(PARAMS)
    a, _ = tx.update(GRADS, state, PARAMS)
    b, _ = tx.update(GRADS, reference, PARAMS)
    np.testing.assert_array_equal(a["w"], b["w"])
