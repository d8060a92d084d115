"""Writes tests/fixtures/state_v1/: every registered optimizer's state as today's code lays it out.

Issue 37 items 2-3 will move per-leaf bookkeeping out of the states (group slots, ratios and beta
powers as one array per field, flags in the program). Files written before must still load: these
fixtures, recorded before any layout change, are what a converter has to read. For each optimizer
(its tests/cases.py row), three updates on a two-leaf tree, then ``{"params", "state"}`` saved with
`gradxform.save_state` (``<name>.gxckpt``) and the parameters one more update gives from there
(``<name>.npz``: the continuation the loaded state must reproduce).

    PYTHONPATH=$PWD/src:$PWD/tests python tools/state_fixtures.py   # run once, at the layout's last commit
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import cases
import gradxform

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "state_v1")
PARAMS = {"b": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "w": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32)}


def grads(k: int):
    return jax.tree.map(lambda p: jnp.sin(p * (k + 1)) + 0.1 * k, PARAMS)


def record(name: str) -> None:
    tx = cases.create(name)
    params, state = PARAMS, tx.init(PARAMS)
    for k in range(3):
        u, state = tx.update(grads(k), state, params)
        params = optax.apply_updates(params, u)
    gradxform.save_state(os.path.join(OUT, f"{name}.gxckpt"), {"params": params, "state": state},
                         meta={"optimizer": name, "layout": "state_v1"})
    u, _ = tx.update(grads(3), state, params)
    np.savez(os.path.join(OUT, f"{name}.npz"), **jax.tree.map(np.asarray, optax.apply_updates(params, u)))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for n in cases.names():
        record(n)
        print(n)
