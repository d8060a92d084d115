"""MindSpore's ``LearningRateSchedule`` family (``mindspore.nn.learning_rate_schedule``,
2.x) and its list learning rate, as pure vectorised functions of ``global_step``.

Each class computes in float32 exactly as MindSpore's ``construct`` does
(including CosineDecayLR's ``sin(pi*(p + 0.5))`` form), so values agree
with MindSpore to float32 rounding. ``step`` is ``global_step``, the number
of updates completed before the current one; MindSpore optimizers here pass
it that way (`Schedule.lr_for_update`). Arguments are checked at
construction, with MindSpore's rules.

`LearningRateSchedule` is MindSpore's base class, with its protocol: a user's
subclass defines ``construct(self, global_step)`` in its own arithmetic (jnp,
or Python on numbers) and is passed as ``learning_rate=`` (or a group's
``'lr'``). Such a subclass is a user's callable, not one of these closed
forms: it has no ``lr_for_update``, and optimizers read it through the
user-schedule adapter (`gradxform.schedules._user`) counted as MindSpore's
``Optimizer.get_lr`` does: ``construct(global_step)`` with ``global_step`` the
updates completed before this one (0 on the first; MindSpore increments it
after reading the lr), its output reshaped to ``()`` (MindSpore's
``.reshape(())``: a ``(1,)`` result is accepted). Traced into the step when
JAX can trace it; evaluated on the host by `gradxform.Trainer` /
`gradxform.mxnet.get_updater` when it cannot.
"""
from __future__ import annotations

import math

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._common import DynamicLR, Schedule, check_number  # DynamicLR: shared with Paddle's list learning rates

__all__ = ["LearningRateSchedule", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR", "CosineDecayLR",
           "PolynomialDecayLR", "WarmUpLR", "DynamicLR", "MindSporeListLR"]


class MindSporeListLR(DynamicLR):
    """MindSpore's list learning rate (``learning_rate=[...]``, a group's
    ``'lr'``; also THOR's ``damping`` list and LARS's lists): a `DynamicLR`
    that refuses an update past the end of the list where the update count
    is known on the host: an update run op by op (no jit) and
    ``gradxform.mindspore.get_lr`` raise a ValueError naming the list's
    length, as MindSpore's CPU and GPU Gather kernels fail there. Inside jit
    the count is traced and the update reads the last value (`DynamicLR`
    says why, and what each MindSpore backend does). ``what`` names the
    argument in the message."""

    def __init__(self, values, what: str = "learning_rate=[...]"):
        super().__init__(values)
        self.what = what

    def lr_for_update(self, count, base_lr=None):
        if not isinstance(count, jax.core.Tracer):
            last = int(np.max(np.asarray(count))) if np.size(count) else 0
            n = int(self.values.size)
            if last > n:
                raise ValueError(
                    f"{self.what}: the list holds {n} values, one per update, and update {last} reads index "
                    f"{last - 1}, past its end. MindSpore fails there too (its CPU and GPU Gather kernels: "
                    f"'input_indices should be in the range [0, {n}), but got {last - 1}'). Give a list as long "
                    f"as the run ({last} or more values: e.g. total_step={last} for nn.cosine_decay_lr and the "
                    "other builders), or a LearningRateSchedule (nn.CosineDecayLR, ...). Inside jit this "
                    "cannot be checked and the last value is read.")
        return super().lr_for_update(count, base_lr)


class LearningRateSchedule(Schedule):
    """MindSpore's ``nn.LearningRateSchedule`` (learning_rate_schedule.py):
    ``construct(global_step)`` gives the learning rate at ``global_step``, and
    calling the object calls it. The classes below are its closed forms
    (vectorised over ``global_step``, float32); a subclass that defines its own
    ``construct`` is a user's schedule (see the module docstring)."""

    base_lr = None  # a user's subclass: the optimizer takes its value at the first update

    def __init__(self):
        """No arguments, as MindSpore's (a subclass calls ``super().__init__()``)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._users_construct = "construct" in vars(cls) or getattr(cls, "_users_construct", False)

    _users_construct = False

    @property  # a property: a user's construct subclass has none (pyright: intentional override of the method)
    def lr_for_update(self):  # pyright: ignore[reportIncompatibleMethodOverride]
        """`Schedule.lr_for_update` for the closed forms; a subclass with its own
        ``construct`` has none (AttributeError): optimizers adapt it as a user's
        callable, indexed by ``global_step``."""
        if self._users_construct:
            raise AttributeError(f"{type(self).__name__} defines its own construct(global_step): it is read as a "
                                 "user's schedule (gradxform.schedules._user), not as a closed form")
        return super().lr_for_update

    def construct(self, global_step):
        """The learning rate at ``global_step`` (float32, the shape of ``global_step``)."""
        if type(self).value is Schedule.value:
            raise NotImplementedError(f"{type(self).__name__}: a LearningRateSchedule subclass must define "
                                      "construct(self, global_step).")
        return Schedule.__call__(self, global_step)

    def __call__(self, global_step, base_lr=None):
        """``construct(global_step)``; for the closed forms also vectorised, and
        with ``base_lr`` scaled as `Schedule.__call__` says. A user's
        ``construct`` gets ``global_step`` as an int32 JAX value (a tracer under
        jit) and returns what it returns (MindSpore's optimizer reshapes it)."""
        if not self._users_construct:
            if type(self).value is Schedule.value:
                self.construct(global_step)  # raises: the base class has no schedule
            return Schedule.__call__(self, global_step, base_lr)
        lr = self.construct(jnp.asarray(global_step, jnp.int32))
        if base_lr is not None and self.base_lr:
            lr = lr * (jnp.asarray(base_lr, jnp.float32) / jnp.float32(self.base_lr))
        return lr


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


class _DecayLR(LearningRateSchedule):
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


class CosineDecayLR(LearningRateSchedule):
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


class PolynomialDecayLR(LearningRateSchedule):
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
        # 0 where the decay ends: XLA may take step / decay as step * (1 / decay), 1 - 6e-8 there,
        # whose fractional power (1e-4 for power 0.5) would never reach end_learning_rate
        rest = jnp.where(step >= decay, 0.0, 1.0 - step / decay)
        diff = jnp.float32(self.learning_rate - self.end_learning_rate)
        return diff * jnp.power(rest, jnp.float32(self.power)) + jnp.float32(self.end_learning_rate)


class WarmUpLR(LearningRateSchedule):
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
