"""Writes tests/fixtures/gradxform/legacy_*: checkpoints in the layout gradxform
wrote before the step counter's fields were renamed and its flags became int32
(``StepState(hyper, lr_mult, count=<per leaf>, num_update=<shared>)``, bool
flags). Run ONCE at commit 8945dd9 (the last with that layout); later code
writes the new layout, so running it now would not make a legacy file.

Each file comes with ``<name>.npz``: the parameters one more update gives
from the loaded state (the expected continuation, recorded by the old code).

    PYTHONPATH=$PWD/src python tools/legacy_checkpoint_fixtures.py
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradxform

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "gradxform")
PARAMS = {"b": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "w": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32)}


def grads(k: int):
    return jax.tree.map(lambda p: jnp.sin(p * (k + 1)) + 0.1 * k, PARAMS)


def plain(name: str, kwargs: dict, mask_at: int | None):
    tx = gradxform.create(name, **kwargs)
    params, state = PARAMS, tx.init(PARAMS)
    for k in range(3):
        extra = {"update_mask": {"b": False, "w": True}} if k == mask_at else {}
        u, state = tx.update(grads(k), state, params, **extra)
        params = optax.apply_updates(params, u)
    tree = {"params": params, "state": state}
    gradxform.save_state(os.path.join(OUT, f"legacy_{name}.gxckpt"), tree, meta={"optimizer": name})
    u, _ = tx.update(grads(3), state, params)
    nxt = optax.apply_updates(params, u)
    np.savez(os.path.join(OUT, f"legacy_{name}.npz"), **{f"next_{k}": np.asarray(v) for k, v in nxt.items()})


def trainer():
    t = gradxform.Trainer(PARAMS, "adam", {"learning_rate": 0.05, "wd": 1e-3,
                                            "lr_scheduler": gradxform.lr_scheduler.FactorScheduler(2, 0.5)},
                          devices=jax.devices()[:1], skip_nonfinite=True)
    for k in range(3):
        t.update(grads(k), 1)
    t.save_states(os.path.join(OUT, "legacy_trainer_adam.gxckpt"))
    t.update(grads(3), 1)
    np.savez(os.path.join(OUT, "legacy_trainer_adam.npz"), **{f"next_{k}": np.asarray(v) for k, v in t.params.items()})


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    plain("paddle.momentum", dict(learning_rate=0.1, momentum=0.9, use_nesterov=True, skip_nonfinite=True), mask_at=1)
    plain("mindspore.adam", dict(learning_rate=0.05, weight_decay=1e-3, skip_nonfinite=True), mask_at=None)
    plain("mxnet.adam", dict(learning_rate=0.05, wd=1e-3, lr_mult={"b": 0.5}), mask_at=2)
    trainer()
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))
