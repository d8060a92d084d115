"""The moment pieces (gradxform/pieces/_moments.py) at the edges the families never
reach (issue 28, mutation run in docs/mutation.md): the families validate their own
arguments and always pass every hyperparameter, so the pieces' own defaults and
range checks were untested.

* Defaults: a piece built with no arguments follows optax's transform with *its*
  defaults (optax 0.2.8, an independent library): scale_by_rms ~ optax.scale_by_rms
  (decay 0.9, eps 1e-8 inside the root), scale_by_centered_rms ~
  optax.scale_by_stddev, scale_by_adam_moments + bias_correction ~
  optax.scale_by_adam (0.9, 0.999, 1e-8; eps placement and float32 beta powers: 1.1e-5
  apart), scale_by_adamax + bias_correction(beta2=None) ~ optax.scale_by_adamax (0.9,
  0.999), scale_by_accumulated_squares ~ optax.scale_by_rss (eps 1e-7; the initial
  history 0 as MXNet's AdaGrad). Three steps, float32, rtol 1e-5 (Adam 5e-5).
* Ranges, as the docstrings state them: momentum/decay in [0, 1]; Adam and Adamax
  betas in [0, 1); epsilon > 0 (>= 0 for the accumulated squares).
"""
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform import pieces as X

G = [{"w": jnp.asarray(np.random.default_rng(t).standard_normal(5).astype(np.float32))} for t in range(3)]


def _run(tx):
    s = tx.init(G[0])
    outs = []
    for g in G:
        u, s = tx.update(g, s, G[0])
        outs.append(np.asarray(u["w"]))
    return outs


@pytest.mark.parametrize("ours, theirs, rtol", [
    (lambda: X.scale_by_rms(), lambda: optax.scale_by_rms(), 1e-5),
    (lambda: X.scale_by_centered_rms(), lambda: optax.scale_by_stddev(), 1e-5),
    (lambda: gx.chain(X.track_step(1.0), X.scale_by_adam_moments(), X.bias_correction(), X.scale_by_lr()),
     lambda: optax.chain(optax.scale_by_adam(), optax.scale(-1.0)), 5e-5),
    (lambda: gx.chain(X.track_step(1.0), X.scale_by_adamax(), X.bias_correction(beta2=None), X.scale_by_lr()),
     lambda: optax.chain(optax.scale_by_adamax(), optax.scale(-1.0)), 1e-5),
    # MXNet AdaGrad's history starts at zeros (gradxform's initial=0.0); optax's default is 0.1
    (lambda: X.scale_by_accumulated_squares(), lambda: optax.scale_by_rss(initial_accumulator_value=0.0), 1e-5),
], ids=["rms", "centered_rms", "adam", "adamax", "accumulated_squares"])
def test_defaults_follow_optax_defaults(ours, theirs, rtol):
    # adam: the moments use float32 betas (1 - float32(0.999) is 4.7e-5 from 0.001) while
    # the correction is exact in gradxform and float32 in optax: 1.1e-5 apart, so rtol 5e-5
    for a, b in zip(_run(ours()), _run(theirs())):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-7)


OK, BAD = "ok", "bad"


@pytest.mark.parametrize("make, value, verdict", [
    (lambda v: X.trace(v), 1.0, OK), (lambda v: X.trace(v), 1.5, BAD), (lambda v: X.trace(v), 0.5, OK),
    (lambda v: X.ema(v), 1.0, OK), (lambda v: X.ema(v), 1.5, BAD), (lambda v: X.ema(v), 0.5, OK),
    (lambda v: X.scale_by_adam_moments(beta1=v), 1.0, BAD), (lambda v: X.scale_by_adam_moments(beta1=v), 0.5, OK),
    (lambda v: X.scale_by_adam_moments(beta2=v), 1.0, BAD), (lambda v: X.scale_by_adam_moments(beta2=v), 0.5, OK),
    (lambda v: X.scale_by_adam_moments(epsilon=v), 0.0, BAD),
    (lambda v: X.scale_by_adam_moments(epsilon=v), 0.5, OK),
    (lambda v: X.scale_by_rms(v), 0.5, OK), (lambda v: X.scale_by_rms(v), 1.0, OK),
    (lambda v: X.scale_by_rms(v), 1.5, BAD),
    (lambda v: X.scale_by_rms(epsilon=v), 0.0, BAD), (lambda v: X.scale_by_rms(epsilon=v), 0.5, OK),
    (lambda v: X.scale_by_centered_rms(v), 0.5, OK), (lambda v: X.scale_by_centered_rms(v), 1.5, BAD),
    (lambda v: X.scale_by_centered_rms(epsilon=v), 0.0, BAD),
    (lambda v: X.scale_by_centered_rms(epsilon=v), 0.5, OK),
    (lambda v: X.scale_by_adamax(beta1=v), 1.0, BAD), (lambda v: X.scale_by_adamax(beta1=v), 0.5, OK),
    (lambda v: X.scale_by_adamax(beta2=v), 1.0, BAD), (lambda v: X.scale_by_adamax(beta2=v), 0.5, OK),
    (lambda v: X.scale_by_accumulated_squares(v), 0.0, OK),
    (lambda v: X.scale_by_accumulated_squares(v), 0.5, OK),
    (lambda v: X.scale_by_accumulated_squares(v), -0.1, BAD),
    (lambda v: X.bias_correction(beta1=v), 1.0, BAD), (lambda v: X.bias_correction(beta1=v), 0.5, OK),
    (lambda v: X.bias_correction(beta2=v), 1.0, BAD), (lambda v: X.bias_correction(beta2=v), 0.5, OK),
])
def test_ranges_as_documented(make, value, verdict):
    if verdict == BAD:
        with pytest.raises(ValueError):
            make(value)
    else:
        make(value)
