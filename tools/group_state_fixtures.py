"""Writes tests/fixtures/group_hyper_v1/: states of optimizers with parameter groups as the code
before issue 37 item 2 laid them out (each group's own hyperparameter a scalar ``<name>_group_<k>``).

Per-group hyperparameters are now one array per field (`gradxform._group_hyper.GroupHyper`); files
written before must still load. For each configuration below, three updates on a four-leaf tree,
then ``{"params", "state"}`` saved with `gradxform.save_state` (``<case>.gxckpt``) and the parameters
one more update gives from there (``<case>.npz``: the continuation the loaded state must reproduce).

    PYTHONPATH=$PWD/src:$PWD/tests python tools/group_state_fixtures.py   # run once, at the layout's last commit
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradxform as gx

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "group_hyper_v1")
PARAMS = {"a": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "b": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32),
          "c": jnp.asarray([0.3, 0.7], jnp.float32), "d": jnp.asarray([-0.4], jnp.float32)}
P, M = gx.paddle, gx.mindspore

# name -> a function building the optimizer (kept in the test that loads these files, tests/test_group_hyper.py)
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


def record(name: str) -> None:
    tx = CASES[name]()
    params, state = PARAMS, tx.init(PARAMS)
    for k in range(3):
        u, state = tx.update(grads(k), state, params)
        params = optax.apply_updates(params, u)
    gx.save_state(os.path.join(OUT, f"{name}.gxckpt"), {"params": params, "state": state},
                  meta={"optimizer": name, "layout": "group_hyper_v1"})
    u, _ = tx.update(grads(3), state, params)
    np.savez(os.path.join(OUT, f"{name}.npz"), **jax.tree.map(np.asarray, optax.apply_updates(params, u)))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for n in CASES:
        record(n)
        print(n, sorted(k for k in gx.load_state(os.path.join(OUT, f"{n}.gxckpt")) if "_group_" in k))
