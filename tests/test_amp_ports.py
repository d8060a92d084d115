"""The frameworks' loss-scaling names (``gradxform.paddle.amp``, ``gradxform.mindspore.amp`` and the
``nn`` cells, ``gradxform.mxnet.amp``) fail at once with the gradxform line that replaces them, filled with the script's
values; the line, run as written, gives the framework's scale after every step (Paddle's kernels:
tests/fixtures/paddle/loss_scaling.npz; MindSpore's cell: tests/fixtures/mindspore/loss_scale/)."""
from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
import gradxform.mindspore as nn
from gradxform.mindspore import amp as ms_amp
from gradxform.mxnet import amp as mx_amp
from gradxform.paddle import amp as paddle_amp

FIXTURES = Path(__file__).parent / "fixtures"


def _line(make) -> str:
    with pytest.raises(TypeError) as err:
        make()
    found = re.search(r"tx = (gradxform\.pieces\.dynamic_loss_scale\(opt, [^;]*?\))(?: with|;)", str(err.value))
    assert found, str(err.value)
    return found.group(1)


def _scales(expr: str, bad: set, steps: int) -> list[float]:
    tx = eval(expr, {"gradxform": gradxform, "opt": gradxform.paddle.sgd(0.1)})  # noqa: S307 - the message's own line
    params = {"w": jnp.ones(2)}
    state, step, out = tx.init(params), jax.jit(tx.update), []
    for t in range(1, steps + 1):
        _, state = step({"w": jnp.asarray([jnp.inf if t in bad else 1.0, 1.0])}, state, params)
        out.append(float(gradxform.get_loss_scale(state)))
    return out


def test_paddle_grad_scaler_names_a_line_that_gives_paddles_scales():
    golden = np.load(FIXTURES / "paddle" / "loss_scaling.npz")
    init, incr, decr, steps = golden["second_overflow/config"]
    expr = _line(lambda: paddle_amp.GradScaler(init_loss_scaling=float(init), incr_every_n_steps=int(incr),
                                               decr_every_n_nan_or_inf=int(decr)))
    got = _scales(expr, set(golden["bad_steps"].tolist()), int(steps))
    np.testing.assert_array_equal(np.asarray(got, np.float32), golden["second_overflow/scales"])


@pytest.mark.parametrize("make", [lambda: nn.DynamicLossScaleUpdateCell(4096, 2, 3),
                                  lambda: ms_amp.DynamicLossScaler(4096, 2, 3),
                                  lambda: ms_amp.DynamicLossScaleManager(4096, 2, 3)])
def test_mindspore_dynamic_scalers_name_a_line_that_gives_the_cells_scales(make):
    run = np.load(FIXTURES / "mindspore" / "loss_scale" / "run.npz")
    got = _scales(_line(make), set(run["overflow_steps"].tolist()), int(run["steps"]))
    np.testing.assert_array_equal(np.asarray(got, np.float32), run["scales"])


@pytest.mark.parametrize("make", [lambda: nn.FixedLossScaleUpdateCell(1024), lambda: ms_amp.StaticLossScaler(1024),
                                  lambda: ms_amp.FixedLossScaleManager(1024.0),
                                  lambda: paddle_amp.GradScaler(init_loss_scaling=1024, use_dynamic_loss_scaling=False)])
def test_fixed_scalers_name_a_line_that_keeps_the_scale(make):
    assert set(_scales(_line(make), {2, 3}, 6)) == {1024.0}


@pytest.mark.parametrize("make, says", [
    (lambda: nn.TrainOneStepWithLossScaleCell(None, None, None), "a training step is your own function"),
    (lambda: ms_amp.FixedLossScaleManager(1024.0, drop_overflow_update=False), "loss_scale=1024.0 and multiply"),
    (lambda: paddle_amp.GradScaler(enable=False), "leave the loss scale out"),
    (lambda: paddle_amp.auto_cast(), "JAX has no autocast"),
    (lambda: paddle_amp.decorate(None), "multi_precision=True"),
    (lambda: mx_amp.init(), "loss_scale='dynamic'"),
    (lambda: mx_amp.init_trainer(None), "loss_scale='dynamic'"),
    (lambda: mx_amp.scale_loss(1.0, None), "multiply the loss by trainer.loss_scale themselves"),
    (lambda: mx_amp.unscale(None), "would unscale twice"),
])
def test_the_other_names_say_what_to_write(make, says):
    with pytest.raises(TypeError, match=re.escape(says)):
        make()


def test_all_finite_is_mindspores():
    assert bool(ms_amp.all_finite({"a": jnp.ones(2), "b": [jnp.zeros(3)]}))
    assert not bool(ms_amp.all_finite([jnp.asarray([1.0, jnp.nan])]))
    assert not bool(jax.jit(ms_amp.all_finite)([jnp.asarray([jnp.inf])]))
