"""MindSpore's ``LearningRateSchedule`` family (``mindspore.nn.learning_rate_schedule``,
2.x) and its list learning rate, as pure vectorised functions of ``global_step``.

Each class computes in float32 exactly as MindSpore's ``construct`` does
(including CosineDecayLR's ``sin(pi*(p + 0.5))`` form), so values agree
with MindSpore to float32 rounding. ``step`` is ``global_step``, the number
of updates completed before the current one; MindSpore optimizers here pass
it that way (`Schedule.lr_for_update`). Arguments are checked at
construction, with MindSpore's rules.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ._common import DynamicLR, Schedule, check_number  # DynamicLR: shared with Paddle's list learning rates

__all__ = ["ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR",
           "PolynomialDecayLR", "WarmUpLR", "DynamicLR"]


def _check_decay(owner, learning_rate, decay_rate, decay_steps, is_stair):
    check_number(owner, "decay_steps", decay_steps, low=0, low_open=True, integer=True)
    if not isinstance(learning_rate, float):
        raise TypeError(f"{owner}(learning_rate=...): must be a float; got {learning_rate!r}.")
    check_number(owner, "learning_rate", learning_rate, low=0.0, low_open=True)
    if not isinstance(decay_rate, float):
        raise TypeError(f"{owner}(decay_rate=...): must be a float; got {decay_rate!r}.")
    check_number(owner, "decay_rate", decay_rate, low=0.0, low_open=True)
    if not isinstance(is_stair, bool):
        raise TypeError(f"{owner}(is_stair=...): must be a bool; got {is_stair!r}.")


class _DecayLR(Schedule):
    """The arguments the exponential, natural-exponential and inverse decays share."""

    def __init__(self, learning_rate, decay_rate, decay_steps, is_stair=False):
        _check_decay(type(self).__name__, learning_rate, decay_rate, decay_steps, is_stair)
        self.learning_rate, self.decay_rate, self.decay_steps, self.is_stair = (
            learning_rate, decay_rate, decay_steps, is_stair)
        self.base_lr = learning_rate


class ExponentialDecayLR(_DecayLR):
    """``lr * decay_rate ** p``, ``p = step / decay_steps`` (floored when ``is_stair``)."""

    def value(self, step):
        p = step / jnp.float32(self.decay_steps)
        if self.is_stair:
            p = jnp.floor(p)
        return jnp.float32(self.learning_rate) * jnp.power(jnp.float32(self.decay_rate), p)


class NaturalExpDecayLR(_DecayLR):
    """``lr * e ** (-decay_rate * p)``, ``p = step`` (rounded down to a multiple of
    ``decay_steps`` when ``is_stair``; note: not divided by decay_steps, as in MindSpore)."""

    def value(self, step):
        p = step
        if self.is_stair:
            p = jnp.floor_divide(p, jnp.float32(self.decay_steps)) * jnp.float32(self.decay_steps)
        return jnp.float32(self.learning_rate) * jnp.power(jnp.float32(math.e), -jnp.float32(self.decay_rate) * p)


class InverseDecayLR(_DecayLR):
    """``lr / (1 + decay_rate * p)``, ``p = step / decay_steps`` (floored when ``is_stair``)."""

    def value(self, step):
        p = step / jnp.float32(self.decay_steps)
        if self.is_stair:
            p = jnp.floor(p)
        return jnp.float32(self.learning_rate) / (1 + jnp.float32(self.decay_rate) * p)


class CosineDecayLR(Schedule):
    """``min_lr + 0.5 (max_lr - min_lr) (1 + cos(pi * min(step, decay_steps) / decay_steps))``
    (computed as MindSpore does, with ``sin(pi * (p + 0.5))``). ``base_lr`` is ``max_lr``."""

    def __init__(self, min_lr, max_lr, decay_steps):
        owner = "CosineDecayLR"
        if not isinstance(min_lr, float):
            raise TypeError(f"{owner}(min_lr=...): must be a float; got {min_lr!r}.")
        check_number(owner, "min_lr", min_lr, low=0.0)
        if not isinstance(max_lr, float):
            raise TypeError(f"{owner}(max_lr=...): must be a float; got {max_lr!r}.")
        check_number(owner, "max_lr", max_lr, low=0.0, low_open=True)
        check_number(owner, "decay_steps", decay_steps, low=0, low_open=True, integer=True)
        if min_lr >= max_lr:
            raise ValueError(f"{owner}(max_lr=...): max_lr must be greater than min_lr; got "
                             f"max_lr={max_lr}, min_lr={min_lr}.")
        self.min_lr, self.max_lr, self.decay_steps = min_lr, max_lr, decay_steps
        self.base_lr = max_lr

    def value(self, step):
        p = jnp.minimum(step, jnp.float32(self.decay_steps))
        delta = jnp.float32(0.5 * (self.max_lr - self.min_lr))
        return jnp.float32(self.min_lr) + delta * (
            1.0 + jnp.sin(jnp.float32(math.pi) * (p / jnp.float32(self.decay_steps) + 0.5)))


class PolynomialDecayLR(Schedule):
    """``(lr - end) * (1 - p) ** power + end``, ``p = min(step, decay_steps) / decay_steps``;
    with ``update_decay_steps`` the horizon grows to ``decay_steps * max(ceil(step/decay_steps), 1)``."""

    def __init__(self, learning_rate, end_learning_rate, decay_steps, power, update_decay_steps=False):
        owner = "PolynomialDecayLR"
        if not isinstance(learning_rate, float):
            raise TypeError(f"{owner}(learning_rate=...): must be a float; got {learning_rate!r}.")
        check_number(owner, "learning_rate", learning_rate, low=0.0, low_open=True)
        if not isinstance(end_learning_rate, float):
            raise TypeError(f"{owner}(end_learning_rate=...): must be a float; got {end_learning_rate!r}.")
        check_number(owner, "end_learning_rate", end_learning_rate, low=0.0)
        check_number(owner, "decay_steps", decay_steps, low=0, low_open=True, integer=True)
        if not isinstance(update_decay_steps, bool):
            raise TypeError(f"{owner}(update_decay_steps=...): must be a bool; got {update_decay_steps!r}.")
        if not isinstance(power, float):
            raise TypeError(f"{owner}(power=...): must be a float; got {power!r}.")
        check_number(owner, "power", power, low=0.0, low_open=True)
        self.learning_rate, self.end_learning_rate, self.decay_steps = learning_rate, end_learning_rate, decay_steps
        self.power, self.update_decay_steps = power, update_decay_steps
        self.base_lr = learning_rate

    def value(self, step):
        decay = jnp.float32(self.decay_steps)
        if self.update_decay_steps:
            decay = decay * jnp.maximum(jnp.ceil(step / decay), 1.0)
        else:
            step = jnp.minimum(step, decay)
        p = step / decay
        diff = jnp.float32(self.learning_rate - self.end_learning_rate)
        return diff * jnp.power(1.0 - p, jnp.float32(self.power)) + jnp.float32(self.end_learning_rate)


class WarmUpLR(Schedule):
    """``lr * min(step, warmup_steps) / warmup_steps`` (0 on the first update, as in MindSpore)."""

    def __init__(self, learning_rate, warmup_steps):
        owner = "WarmUpLR"
        if not isinstance(learning_rate, float):
            raise TypeError(f"{owner}(learning_rate=...): must be a float; got {learning_rate!r}.")
        check_number(owner, "learning_rate", learning_rate, low=0.0)
        check_number(owner, "warmup_steps", warmup_steps, low=0, low_open=True, integer=True)
        self.learning_rate, self.warmup_steps = learning_rate, warmup_steps
        self.base_lr = learning_rate

    def value(self, step):
        return jnp.float32(self.learning_rate) * (
            jnp.minimum(step, jnp.float32(self.warmup_steps)) / jnp.float32(self.warmup_steps))
