"""Schedule goldens that no test read (issue 28), against gradxform's own schedules
where they compute the same numbers:

* MindSpore 2.10 ``mindspore.nn.dynamic_lr`` lists (tests/goldens/mindspore/
  schedules.npz, ``dynamic_lr.*``; 41 steps). ``dynamic_lr.<fn>`` evaluates its
  rule at ``current_epoch = floor(i / step_per_epoch)`` with ``decay_epoch`` in
  place of ``decay_steps`` (mindspore/nn/dynamic_lr.py), which is the matching
  ``LearningRateSchedule`` at step ``current_epoch``; piecewise_constant_lr is
  Paddle's PiecewiseDecay rule (``lr[i] = learning_rates[k]`` for the first
  milestone ``> i``).
* Paddle 3.3.1 ``MultiplicativeDecay(0.5, lambda e: 0.95)`` (``lr * prod_{k<=e}
  0.95`` = ``ExponentialDecay(0.5, 0.95)``) and ``CosineAnnealingWarmRestarts(0.5,
  T_0=5, T_mult=2, eta_min=0.01)``: each cycle is ``CosineAnnealingDecay`` with
  ``T_max = T_i`` at the step within it (cycles start at epochs 0, 5, 15, 35).

Tolerance: the frameworks compute these in float64, gradxform in float32:
rtol 5e-6 (as test_schedules' Paddle goldens), atol 1e-9.
"""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from gradxform import schedules as S

HERE = os.path.join(os.path.dirname(__file__), "goldens")
MS = np.load(os.path.join(HERE, "mindspore", "schedules.npz"))
MS_META = json.loads(str(MS["meta"]))["entries"]
PD = np.load(os.path.join(HERE, "paddle", "schedules.npz"))
PD_META = json.loads(str(PD["meta"]))["entries"]
TOL = dict(rtol=5e-6, atol=1e-9)


def _dynamic_lr(fn, kw):
    """The gradxform schedule and the step it is read at, for ``dynamic_lr.<fn>(**kw)``."""
    kw = dict(kw)
    if fn == "piecewise_constant_lr":
        return S.PaddlePiecewiseDecay(boundaries=kw["milestone"][:-1], values=kw["learning_rates"]), np.arange(
            kw["milestone"][-1])
    n, per = kw.pop("total_step"), kw.pop("step_per_epoch")
    epochs = np.arange(n) // per
    if fn == "warmup_lr":
        return S.WarmUpLR(kw["learning_rate"], kw["warmup_epoch"]), epochs
    if fn == "cosine_decay_lr":
        return S.CosineDecayLR(kw["min_lr"], kw["max_lr"], kw["decay_epoch"]), epochs
    if fn == "polynomial_decay_lr":
        return S.PolynomialDecayLR(kw["learning_rate"], kw["end_learning_rate"], kw["decay_epoch"], kw["power"],
                                   update_decay_steps=kw.get("update_decay_epoch", False)), epochs
    cls = {"exponential_decay_lr": S.ExponentialDecayLR, "natural_exp_decay_lr": S.NaturalExpDecayLR,
           "inverse_decay_lr": S.InverseDecayLR}[fn]
    return cls(kw["learning_rate"], kw["decay_rate"], kw["decay_epoch"], is_stair=kw.get("is_stair", False)), epochs


DYNAMIC = sorted(k for k in MS_META if k.startswith("dynamic_lr."))


def test_all_nine_dynamic_lr_goldens_are_read():
    assert len(DYNAMIC) == 9 and all(k in MS.files for k in DYNAMIC)


@pytest.mark.parametrize("key", DYNAMIC)
def test_mindspore_dynamic_lr_golden(key):
    m = MS_META[key]
    sched, steps = _dynamic_lr(m["function"], m["kwargs"])
    got = np.asarray(sched(jnp.asarray(steps, jnp.int32)))
    assert got.shape == MS[key].shape
    np.testing.assert_allclose(got, MS[key], **TOL)


def test_paddle_multiplicative_decay_golden():
    m = PD_META["MultiplicativeDecay"]
    assert m["kwargs"] == {"learning_rate": 0.5, "lr_lambda": "lambda e: 0.95"}
    got = np.asarray(S.PaddleExponentialDecay(0.5, gamma=0.95)(jnp.arange(41)))
    np.testing.assert_allclose(got, PD["MultiplicativeDecay"], **TOL)


def test_paddle_cosine_annealing_warm_restarts_golden():
    kw = PD_META["CosineAnnealingWarmRestarts"]["kwargs"]
    assert kw == {"learning_rate": 0.5, "T_0": 5, "T_mult": 2, "eta_min": 0.01}
    got, start, length = [], 0, kw["T_0"]
    while start < 41:
        cycle = S.PaddleCosineAnnealingDecay(kw["learning_rate"], T_max=length, eta_min=kw["eta_min"])
        steps = np.arange(start, min(start + length, 41)) - start
        got.extend(np.asarray(cycle(jnp.asarray(steps))).tolist())
        start, length = start + length, length * kw["T_mult"]
    want = PD["CosineAnnealingWarmRestarts"]
    np.testing.assert_allclose(got, want, **TOL)
    # the restarts themselves, at the epochs Paddle's step() restarts
    np.testing.assert_allclose(want[[0, 5, 15, 35]], 0.5, rtol=1e-12)
