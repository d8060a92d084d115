"""Parameter-group configurations of MindSpore and Paddle optimizers (every kind of per-group
hyperparameter: rates, weight decays, regularizer coefficients, clips, betas, flags), shared by
`tests/test_group_hyper.py` and `tools/group_state_fixtures.py`, which wrote
``tests/fixtures/group_hyper_v1/`` from them."""
from __future__ import annotations

import jax
import jax.numpy as jnp

import gradxform as gx

PARAMS = {"a": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "b": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32),
          "c": jnp.asarray([0.3, 0.7], jnp.float32), "d": jnp.asarray([-0.4], jnp.float32)}
P, M = gx.paddle, gx.mindspore

# name -> a function building the optimizer
CASES = {
    "mindspore_momentum": lambda: M.momentum(0.1, 0.9, weight_decay=0.02, groups=[
        {"params": ["a", "b"], "lr": [0.05, 0.04, 0.03, 0.02, 0.01], "weight_decay": 0.01},
        {"params": ["c"], "lr": 0.2}, {"params": ["d"]}]),
    "mindspore_adam": lambda: M.adam(0.01, weight_decay=0.05, groups=[
        {"params": ["a"], "lr": 0.02, "weight_decay": 0.0}, {"params": ["b", "c"], "weight_decay": 0.1},
        {"params": ["d"]}]),
    "paddle_adam": lambda: P.adam(0.01, parameters=[
        {"params": ["a"], "beta1": 0.8, "epsilon": 1e-6, "weight_decay": P.L2Decay(0.01)},
        {"params": ["b", "c"], "learning_rate": 0.5, "beta2": 0.99,
         "grad_clip": P.ClipGradByGlobalNorm(0.5)}, {"params": ["d"]}],
        weight_decay=P.L1Decay(0.001), grad_clip=P.ClipGradByNorm(1.0)),
    "paddle_momentum": lambda: P.momentum(0.05, momentum=0.9, parameters=[
        {"params": ["a", "b"], "momentum": 0.5, "weight_decay": P.L2Decay(0.02)},
        {"params": ["c", "d"], "grad_clip": P.ClipGradByValue(0.3, -0.2)}]),
    "paddle_lamb": lambda: P.lamb(0.01, lamb_weight_decay=0.01, parameters=[
        {"params": ["a", "b"], "lamb_weight_decay": 0.05, "beta1": 0.85}, {"params": ["c", "d"]}]),
    "paddle_rmsprop": lambda: P.rmsprop(0.01, parameters=[
        {"params": ["a"], "centered": True, "rho": 0.9}, {"params": ["b", "c", "d"], "momentum": 0.5}]),
}


def grads(k: int):
    return jax.tree.map(lambda p: jnp.sin(p * (k + 1)) + 0.1 * k, PARAMS)
