"""`gradxform.pieces.dynamic_loss_scale(..., delayed=True)` and the Trainer's ``loss_scale='dynamic'``
as MXNet 1.9.1's AMP ``LossScaler``: the scale each step's loss is multiplied by, against MXNet's
own scaler (tests/fixtures/mxnet/amp_loss_scaler.npz, written by tools/mxnet_loss_scale_golden.py).
Exact: every scale is a power of two."""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform.pieces import dynamic_loss_scale

GOLDEN = np.load(Path(__file__).parent / "fixtures" / "mxnet" / "amp_loss_scaler.npz")
BAD = set(GOLDEN["bad_steps"].tolist())


def _used_scales(tx, steps: int) -> list[float]:
    params = {"w": jnp.ones(2)}
    state, step, used = tx.init(params), jax.jit(tx.update), []
    for t in range(1, steps + 1):
        used.append(float(gx.get_loss_scale(state)))  # what the loss of step t is multiplied by
        _, state = step({"w": jnp.asarray([jnp.inf if t in BAD else 1.0, 1.0])}, state, params)
    return used


@pytest.mark.parametrize("run", ["default_start", "ceiling", "no_floor"])
def test_a_delayed_scale_is_mxnets_at_every_step(run):
    start, seq_len, steps = GOLDEN[f"{run}/config"]
    tx = dynamic_loss_scale(optax.sgd(0.1), float(start), growth_interval=int(seq_len), max_scale=2.0 ** 24,
                            delayed=True, check_updates=False, check_state=False)
    np.testing.assert_array_equal(np.asarray(_used_scales(tx, int(steps)), np.float32), GOLDEN[f"{run}/scales"])


def test_without_delay_the_scales_differ_from_mxnets():
    start, seq_len, steps = GOLDEN["default_start/config"]
    tx = dynamic_loss_scale(optax.sgd(0.1), float(start), growth_interval=int(seq_len), max_scale=2.0 ** 24)
    assert _used_scales(tx, int(steps)) != GOLDEN["default_start/scales"].tolist()


def test_the_trainers_dynamic_loss_scale_is_mxnet_amps():
    start, seq_len, steps = GOLDEN["default_start/config"]
    params = {"w": jnp.ones(2)}
    trainer = gx.Trainer(params, "sgd", {"learning_rate": 0.1}, loss_scale={"growth_interval": int(seq_len)},
                         devices=jax.devices()[:1])
    used = []
    for t in range(1, int(steps) + 1):
        used.append(trainer.loss_scale)
        grads = {"w": jnp.asarray([[jnp.inf if t in BAD else 1.0, 1.0]])}  # one device's gradients
        trainer.step(grads, 1)
    np.testing.assert_array_equal(np.asarray(used, np.float32), GOLDEN["default_start/scales"])


def test_a_delayed_state_round_trips_through_a_file_and_the_default_keeps_its_layout(tmp_path):
    params = {"w": jnp.ones(2)}
    delayed = dynamic_loss_scale(optax.sgd(0.1), delayed=True)
    state = delayed.update({"w": jnp.full(2, jnp.inf)}, delayed.init(params), params)[1]
    gx.save_state(tmp_path / "d.gxckpt", state)
    back = gx.load_state(tmp_path / "d.gxckpt", like=delayed.init(params))
    assert float(back.next_scale) == 2.0 ** 15 and float(back.scale) == 2.0 ** 16
    plain = dynamic_loss_scale(optax.sgd(0.1)).init(params)
    assert not [k for k in gx.load_state.__globals__["_describe"](plain)[0] if "next_scale" in k]


def test_a_loss_scaled_state_donates_and_refuses_the_other_kind_of_state():
    params = {"w": jnp.ones(2)}
    tx = dynamic_loss_scale(optax.sgd(0.1), delayed=True)
    jax.jit(lambda s, g: tx.update(g, s, params)[1], donate_argnums=0)(tx.init(params), params)  # one buffer each
    with pytest.raises(ValueError, match=r"delayed=True\): the state was made with delayed=False"):
        tx.update(params, dynamic_loss_scale(optax.sgd(0.1)).init(params), params)
