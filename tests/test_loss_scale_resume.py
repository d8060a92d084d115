"""A mixed-precision run resumed with its loss scale (`gradxform.migrate._loss_scale`):

* MindSpore: ``from_mindspore_checkpoint`` of a ``TrainOneStepWithLossScaleCell`` training
  checkpoint restores ``scale_sense`` and ``DynamicLossScaleUpdateCell``'s counters, and the run
  continues as MindSpore's did (tests/fixtures/mindspore/loss_scale/, written by
  tools/mindspore_loss_scale_fixture.py: the scales exactly, the weights within rtol 1e-5, JAX
  computing its own gradients of the same MLP); a ``tx`` that scales no loss is refused.
* Paddle: ``from_paddle_state_dict(..., scaler=GradScaler.state_dict())`` restores ``scale``,
  ``incr_count`` and ``decr_count``."""
from __future__ import annotations

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
import gradxform.mindspore as nn
from gradxform.migrate import MigrateError, from_mindspore_checkpoint, from_paddle_state_dict, read_mindspore_checkpoint
from gradxform.pieces import dynamic_loss_scale

MS = Path(__file__).parent / "fixtures" / "mindspore" / "loss_scale"
RUN = np.load(MS / "run.npz")
CKPT = MS / "step7.ckpt"
NAMES = ["fc1/weight", "fc1/bias", "fc2/weight", "fc2/bias"]


def _params_from_checkpoint():
    c = read_mindspore_checkpoint(CKPT)
    return {layer: {k: jnp.asarray(c[f"{layer}.{k}"]) for k in ("weight", "bias")} for layer in ("fc1", "fc2")}


def _mse(p, x, y):
    h = jax.nn.relu(x @ p["fc1"]["weight"].T + p["fc1"]["bias"])
    return jnp.mean(jnp.square(h @ p["fc2"]["weight"].T + p["fc2"]["bias"] - y))


def _ms_port():
    # nn.TrainOneStepWithLossScaleCell(net, nn.Momentum(..., 0.05, 0.9), DynamicLossScaleUpdateCell(4096, 2, 3))
    return dynamic_loss_scale(nn.Momentum(None, 0.05, 0.9), 4096.0, growth_interval=3, growth=2.0, backoff=0.5,
                              min_scale=1.0, check_updates=False, check_state=False)


def test_a_mindspore_loss_scaled_run_continues_with_its_scale():
    tx = _ms_port()
    params = _params_from_checkpoint()
    state = from_mindspore_checkpoint(CKPT, params, tx)
    assert float(gx.get_loss_scale(state)) == RUN["scales"][int(RUN["save_at"]) - 1]
    x, y = jnp.asarray(RUN["x"]), jnp.asarray(RUN["y"])
    overflow = set(RUN["overflow_steps"].tolist())
    for step in range(int(RUN["save_at"]) + 1, int(RUN["steps"]) + 1):
        factor = 1e38 if step in overflow else 1.0
        grads = jax.grad(lambda p: gx.scale_loss(_mse(p, x, y) * factor, state))(params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        assert float(gx.get_loss_scale(state)) == RUN["scales"][step - 1], step
        for name in NAMES:
            layer, k = name.split("/")
            np.testing.assert_allclose(np.asarray(params[layer][k]), RUN[f"{layer}.{k}/{step}"], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} after step {step}")


def test_without_the_scale_the_resumed_run_would_have_another_one():
    # the restored scale is what makes the test above pass: from the initial scale, step 8 differs
    tx = _ms_port()
    state = tx.init(_params_from_checkpoint())
    assert float(gx.get_loss_scale(state)) != RUN["scales"][int(RUN["save_at"]) - 1]


def test_a_checkpoint_with_a_loss_scale_and_a_tx_without_one_is_refused_saying_what_to_wrap():
    with pytest.raises(MigrateError, match=r"'scale_sense' = 2048.*gradients 2048 times too large.*"
                                           r"dynamic_loss_scale\(tx, 2048"):
        from_mindspore_checkpoint(CKPT, _params_from_checkpoint(), nn.Momentum(None, 0.05, 0.9))


def test_a_tx_that_scales_the_loss_resumed_from_an_optimizer_checkpoint_warns():
    # ms.save_checkpoint(optimizer, ...) holds no scale: the scale restarts, said once
    from gradxform.migrate._loss_scale import mindspore_scale  # noqa: PLC0415

    c = {k: v for k, v in read_mindspore_checkpoint(CKPT).items() if k != "scale_sense"}
    tx = _ms_port()
    with pytest.warns(UserWarning, match="holds no 'scale_sense'.*restarts at 4096"):
        mindspore_scale(c, tx.init(_params_from_checkpoint()), "from_mindspore_checkpoint")


PADDLE_PARAMS = {"w": jnp.ones(3)}


def _paddle_tx(**kw):
    return dynamic_loss_scale(gx.paddle.sgd(0.1), 1024.0, growth_interval=3, backoff_interval=2, min_scale=1.0,
                              check_updates=False, check_state=False, **kw)


def _scaler_sd(**over):
    sd = {"scale": np.asarray([256.0], np.float32), "incr_ratio": 2.0, "decr_ratio": 0.5, "incr_every_n_steps": 3,
          "decr_every_n_nan_or_inf": 2, "incr_count": 2, "decr_count": 0, "use_dynamic_loss_scaling": True}
    sd.update(over)
    return sd


def test_a_paddle_grad_scaler_state_is_restored_and_its_counters_act():
    state = from_paddle_state_dict({}, PADDLE_PARAMS, _paddle_tx(), scaler=_scaler_sd())
    assert float(gx.get_loss_scale(state)) == 256.0
    tx = _paddle_tx()
    _, grown = tx.update({"w": jnp.ones(3)}, state, PADDLE_PARAMS)  # incr_count 2 -> the third clean step grows
    assert float(gx.get_loss_scale(grown)) == 512.0
    state = from_paddle_state_dict({}, PADDLE_PARAMS, tx, scaler=_scaler_sd(incr_count=0, decr_count=1))
    _, backed = tx.update({"w": jnp.full(3, jnp.inf)}, state, PADDLE_PARAMS)  # the second overflow in a row
    assert float(gx.get_loss_scale(backed)) == 128.0


def test_paddle_scaler_settings_that_differ_warn_and_a_tx_without_scaling_is_refused():
    with pytest.warns(UserWarning, match=r"incr_every_n_steps=1000 \(tx's growth_interval=3\)"):
        from_paddle_state_dict({}, PADDLE_PARAMS, _paddle_tx(), scaler=_scaler_sd(incr_every_n_steps=1000))
    with pytest.raises(MigrateError, match=r"tx does not scale the loss.*dynamic_loss_scale\(tx, 256.*"
                                           r"backoff_interval=2"):
        from_paddle_state_dict({}, PADDLE_PARAMS, gx.paddle.sgd(0.1), scaler=_scaler_sd())
    with pytest.raises(MigrateError, match="expected GradScaler.state_dict"):
        from_paddle_state_dict({}, PADDLE_PARAMS, _paddle_tx(), scaler={"incr_count": 1})


def test_the_restored_counters_are_the_cells():
    # saved after step 7: current_iterator_step 8, last_overflow_iterator_step 5 -> steps 6 and 7 were clean
    state = from_mindspore_checkpoint(CKPT, _params_from_checkpoint(), _ms_port())
    node = gx._state_paths.find_states(state, gx.pieces._guards.LossScaleState)[0]
    assert (int(node.good_steps), int(node.guard.consecutive)) == (2, 0)


def _ckpt_with(**entries):
    c = dict(read_mindspore_checkpoint(CKPT))
    c.update({k: np.asarray(v) for k, v in entries.items()})
    return c


def test_a_mindspore_scale_and_counters_no_run_reaches_are_refused_and_a_scale_below_one_is_taken():
    from gradxform.migrate._loss_scale import mindspore_scale  # noqa: PLC0415

    state = _ms_port().init(_params_from_checkpoint())
    with pytest.raises(MigrateError, match="'last_overflow_iterator_step' \\(8\\) is not before"):
        mindspore_scale(_ckpt_with(last_overflow_iterator_step=8), state, "who")
    with pytest.raises(MigrateError, match="scale_sense"):
        mindspore_scale(_ckpt_with(scale_sense=np.float32(0.0)), state, "who")
    assert float(gx.get_loss_scale(mindspore_scale(_ckpt_with(scale_sense=np.float32(0.5)), state, "who"))) == 0.5
    without_counters = {k: v for k, v in _ckpt_with().items() if k != "last_overflow_iterator_step"}
    node = gx._state_paths.find_states(mindspore_scale(without_counters, state, "who"),
                                       gx.pieces._guards.LossScaleState)[0]
    assert int(node.good_steps) == 0  # a FixedLossScaleUpdateCell's file: no counters


def test_a_paddle_scaler_without_counters_starts_them_at_zero_and_a_default_interval_is_paddles():
    state = from_paddle_state_dict({}, PADDLE_PARAMS, _paddle_tx(), scaler={"scale": np.float32(64.0)})
    node = gx._state_paths.find_states(state, gx.pieces._guards.LossScaleState)[0]
    assert (float(node.scale), int(node.good_steps), int(node.guard.consecutive)) == (64.0, 0, 0)
    plain = dynamic_loss_scale(gx.paddle.sgd(0.1), 1024.0, growth_interval=3, min_scale=1.0)  # backoff_interval 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Paddle's default decr_every_n_nan_or_inf=1 is tx's default
        from_paddle_state_dict({}, PADDLE_PARAMS, plain, scaler=_scaler_sd(decr_every_n_nan_or_inf=1))
    with pytest.raises(MigrateError) as err:
        from_paddle_state_dict({}, PADDLE_PARAMS, gx.paddle.sgd(0.1), scaler=_scaler_sd(decr_every_n_nan_or_inf=1))
    assert "backoff_interval" not in str(err.value)


@pytest.mark.parametrize("bad", [{"scale": "big"}, {"scale": np.float32(8.0), "incr_ratio": np.asarray([1.0, 2.0])},
                                 {"scale": np.float32(8.0), "incr_every_n_steps": "often"}])
def test_a_paddle_scaler_state_with_text_or_a_vector_is_refused_whatever_tx_is(bad):
    for tx in (_paddle_tx(), gx.paddle.sgd(0.1)):
        with pytest.raises(MigrateError, match=r"scaler=\.\.\.\): '"):
            from_paddle_state_dict({}, PADDLE_PARAMS, tx, scaler=bad)
