"""`gradxform.pieces.dynamic_loss_scale` as Paddle's ``paddle.amp.GradScaler``: the scale after every
step and the unscaled gradients, against Paddle's own kernels (``update_loss_scaling``,
``check_finite_and_unscale``; tests/fixtures/paddle/loss_scaling.npz, written by
tools/paddle_loss_scale_golden.py). Exact: the scales are powers of two times the start, and the
unscaled gradients are one float32 product each."""
from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform.pieces import dynamic_loss_scale

GOLDEN = np.load(Path(__file__).parent / "fixtures" / "paddle" / "loss_scaling.npz")
RUNS = json.loads(str(GOLDEN["meta"]))["runs"]


def paddle_scaler(inner, init, incr, decr):
    # the port of GradScaler(init_loss_scaling=init, incr_every_n_steps=incr, decr_every_n_nan_or_inf=decr)
    return dynamic_loss_scale(inner, init, growth_interval=incr, backoff_interval=decr, growth=2.0, backoff=0.5,
                              min_scale=1.0, check_updates=False, check_state=False)


@pytest.mark.parametrize("run", RUNS)
def test_the_scale_after_every_step_is_paddles(run):
    init, incr, decr, steps = GOLDEN[f"{run}/config"]
    tx = paddle_scaler(optax.sgd(0.1), float(init), int(incr), int(decr))
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    step = jax.jit(tx.update)
    bad = set(GOLDEN["bad_steps"].tolist())
    got = []
    for t in range(1, int(steps) + 1):
        g = {"w": jnp.asarray([jnp.inf if t in bad else 1.0, 1.0])}
        _, state = step(g, state, params)
        got.append(float(gx.get_loss_scale(state)))
    np.testing.assert_array_equal(np.asarray(got, np.float32), GOLDEN[f"{run}/scales"])


@pytest.mark.parametrize("scale", [1000.0, 3.0, 65536.0])
def test_the_unscaled_gradients_are_paddles_bit_for_bit(scale):
    tx = dynamic_loss_scale(optax.identity(), scale)
    grad = {"g": jnp.asarray(GOLDEN["grad"])}
    updates, _ = tx.update(grad, tx.init(grad))
    np.testing.assert_array_equal(np.asarray(updates["g"]), GOLDEN[f"unscaled/{scale:g}"])


def test_dividing_would_differ_at_a_scale_that_is_no_power_of_two():
    # why the piece multiplies by the reciprocal: g / 1000 differs from g * (1 / 1000) in the last bit
    g = GOLDEN["grad"]
    divided = (g / np.float32(1000.0)).astype(np.float32)
    assert np.count_nonzero(divided != GOLDEN["unscaled/1000"]) > 0


def test_backoff_interval_is_checked_and_is_state_only_when_given():
    with pytest.raises(ValueError, match="backoff_interval must be an integer"):
        dynamic_loss_scale(optax.sgd(0.1), 1024.0, backoff_interval=1.5)
    with pytest.raises(ValueError, match="backoff_interval"):
        dynamic_loss_scale(optax.sgd(0.1), 1024.0, backoff_interval=0)
    params = {"w": jnp.ones(2)}
    assert "backoff_interval" not in gx.hyper_names(dynamic_loss_scale(optax.sgd(0.1)).init(params))
    state = dynamic_loss_scale(optax.sgd(0.1), backoff_interval=2).init(params)
    assert float(gx.get_hyper(state, "backoff_interval")) == 2.0
