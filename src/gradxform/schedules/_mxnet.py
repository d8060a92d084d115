"""MXNet 1.x learning-rate schedulers (``mxnet.lr_scheduler``) as pure functions.

MXNet's schedulers are stateful objects called with increasing
``num_update``; each class here gives the same value as a closed form of
``num_update``, so it runs under jit and needs no state. In the protocol of
`gradxform.schedules._common` they are indexed by `NUM_UPDATE` (MXNet's
count after its bump: 1 on the first update) and re-based by `REPLACE`:
when an optimizer owns the scheduler, MXNet overwrites the scheduler's
``base_lr`` with the optimizer's ``learning_rate``; here the optimizer passes
its (settable) ``learning_rate`` hyperparameter as ``base_lr``, which takes
the place of the scheduler's own. As in MXNet, the warmup's target and
PolyScheduler/CosineScheduler's starting value are the scheduler's *own*
constructor ``base_lr`` (``warmup_final_lr`` and ``base_lr_orig`` are
captured before the optimizer overwrites ``base_lr``), so re-basing moves
FactorScheduler's and MultiFactorScheduler's values after the warmup only.

`gradxform.lr_scheduler` re-exports these classes (users import it as
``mxnet.lr_scheduler``).

**A user's subclass written to MXNet's protocol** (GluonCV's ``LRSequential``,
d2l's schedulers): a class that defines its own ``__call__(self, num_update)``
is not a closed form of ours but a user's callable, so it has no
``lr_for_update`` and every optimizer reads it through the user-schedule
adapter (`gradxform.schedules._user`) with MXNet's ``num_update`` (1 on the
first update) under MXNet's keyword ``lr_scheduler=``: traced into the step
when JAX can trace it, evaluated on the host by `gradxform.Trainer` /
`gradxform.mxnet.get_updater` when it cannot (Python ``if``/``while`` on
``num_update``, attributes it changes). As in MXNet, an explicit
``learning_rate`` beside it is written into its ``base_lr``; ``warmup_*``
and `LRScheduler.get_warmup_lr` are there for it to use.
"""
from __future__ import annotations

import math
import numbers

import jax.numpy as jnp

from ._common import NUM_UPDATE, REPLACE, Schedule

__all__ = ["LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler", "CosineScheduler"]


class LRScheduler(Schedule):
    """Base: linear or constant warmup from ``warmup_begin_lr`` to ``base_lr``
    over ``warmup_steps`` updates (MXNet ``LRScheduler.get_warmup_lr``).
    Indexed by MXNet's ``num_update``; a given ``base_lr`` replaces the
    scheduler's own (see the module docstring)."""

    indexed_by = NUM_UPDATE
    rebase = REPLACE

    def __init__(self, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0, warmup_mode="linear"):
        if not isinstance(warmup_steps, int):
            raise TypeError(f"{type(self).__name__}(warmup_steps=...): must be an int; got {warmup_steps!r}.")
        if warmup_begin_lr > base_lr:
            raise ValueError(f"{type(self).__name__}: base_lr has to be higher than warmup_begin_lr; "
                             f"got base_lr={base_lr}, warmup_begin_lr={warmup_begin_lr}.")
        if warmup_steps < 0:
            raise ValueError(f"{type(self).__name__}(warmup_steps=...): must be >= 0; got {warmup_steps}.")
        if warmup_mode not in ("linear", "constant"):
            raise ValueError(f"{type(self).__name__}(warmup_mode=...): must be 'linear' or 'constant'; "
                             f"got {warmup_mode!r}.")
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_final_lr = base_lr
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_mode = warmup_mode

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # a subclass with its own __call__ follows MXNet's protocol, f(num_update)
        cls._users_call = "__call__" in vars(cls) or getattr(cls, "_users_call", False)

    _users_call = False
    _bound = False  # set by `bind`: an optimizer reads its base from its own state from then on
    _base_drives_rate = False  # FactorScheduler, MultiFactorScheduler: MXNet's rate follows base_lr

    def bind(self, learning_rate=None) -> None:
        """MXNet's ``Optimizer.__init__``: ``lr_scheduler.base_lr = learning_rate``
        (when given), so the script's object reports the optimizer's base; from
        then on the optimizer's step reads the base from its state, and a later
        ``base_lr = ...`` on a closed form is refused (see ``__setattr__``)."""
        if learning_rate is not None:
            object.__setattr__(self, "base_lr", learning_rate)
        object.__setattr__(self, "_bound", True)

    def __setattr__(self, name, value):
        if name == "base_lr" and self._bound and self._base_drives_rate and not self._users_call:
            cls = type(self).__name__
            raise AttributeError(
                f"{cls}.base_lr = {value!r}: this scheduler is bound to an optimizer, whose step reads the base "
                f"learning rate from its own state (the schedule is a closed form of num_update), so the new "
                f"base would be ignored; MXNet's stateful {cls} would go on from it, decaying from here. Type "
                f"instead, for a pure transformation: state = gradxform.set_hyper(state, learning_rate=x / "
                f"factor**k) with x the new base and k the decays so far (the rate becomes x at once, as in "
                f"MXNet); for gradxform.Trainer, which holds no setter for a scheduled base: pass the base you "
                f"want as optimizer_params={{'learning_rate': ...}} when you build it.")
        object.__setattr__(self, name, value)

    @property  # a property: a user's __call__ subclass has none (pyright: intentional override of the method)
    def lr_for_update(self):  # pyright: ignore[reportIncompatibleMethodOverride]
        """`Schedule.lr_for_update` for gradxform's closed forms; a subclass with
        its own ``__call__(num_update)`` has none (AttributeError), so optimizers
        adapt it as a user's callable (see the module docstring)."""
        if self._users_call:
            raise AttributeError(f"{type(self).__name__} defines its own __call__(num_update): it is read as a "
                                 "user's schedule (gradxform.schedules._user), not as a closed form")
        return super().lr_for_update

    def get_warmup_lr(self, num_update):
        """MXNet's ``LRScheduler.get_warmup_lr``: ``warmup_begin_lr + (base_lr0 -
        warmup_begin_lr) * num_update / warmup_steps`` ('linear') or
        ``warmup_begin_lr`` ('constant'), ``base_lr0`` the constructor's
        ``base_lr``. A Python number gives a Python float, as MXNet computes it
        (float64; ``num_update`` must be below ``warmup_steps``, as MXNet
        asserts); an array or tracer gives float32, without that check."""
        if isinstance(num_update, numbers.Real):
            if not num_update < self.warmup_steps:
                raise ValueError(f"{type(self).__name__}.get_warmup_lr(num_update=...): must be below "
                                 f"warmup_steps={self.warmup_steps}; got {num_update}.")
            if self.warmup_mode == "linear":
                return self.warmup_begin_lr + (self.warmup_final_lr - self.warmup_begin_lr) \
                    * float(num_update) / float(self.warmup_steps)
            return self.warmup_begin_lr
        t = jnp.asarray(num_update, jnp.float32)
        if self.warmup_mode == "linear":
            return self.warmup_begin_lr + (self.warmup_final_lr - self.warmup_begin_lr) * (
                t / float(self.warmup_steps))
        return jnp.full_like(t, self.warmup_begin_lr)

    def _warmup(self, num_update, after):
        if self.warmup_steps == 0:
            return after
        return jnp.where(num_update < self.warmup_steps, LRScheduler.get_warmup_lr(self, num_update), after)

    def _after_warmup(self, t, base):
        raise NotImplementedError

    def __call__(self, num_update, base_lr=None):
        """The learning rate at ``num_update`` (an int or an int array);
        ``base_lr`` defaults to the scheduler's own."""
        t = jnp.asarray(num_update, jnp.float32)
        base = jnp.asarray(self.base_lr if base_lr is None else base_lr, jnp.float32)
        return self._warmup(t, self._after_warmup(t, base)).astype(jnp.float32)


class FactorScheduler(LRScheduler):
    """``lr = base_lr * factor^k`` with ``k = ceil(num_update/step) - 1`` (>= 0),
    held at ``stop_factor_lr`` once it falls below it."""

    _base_drives_rate = True

    def __init__(self, step, factor=1, stop_factor_lr=1e-8, base_lr=0.01, warmup_steps=0,
                 warmup_begin_lr=0, warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if step < 1:
            raise ValueError(f"FactorScheduler(step=...): must be >= 1; got {step}.")
        if factor > 1.0:
            raise ValueError(f"FactorScheduler(factor=...): must be no more than 1 to make lr reduce; got {factor}.")
        self.step, self.factor, self.stop_factor_lr = step, factor, stop_factor_lr

    def _after_warmup(self, t, base):
        # integer arithmetic: XLA turns t / step into t * (1/step), which can
        # round 21/7 up to 3.0000002 and decay one step early
        n = t.astype(jnp.int32)
        k = jnp.maximum((n - 1) // int(self.step), 0).astype(jnp.float32)
        decayed = jnp.maximum(base * jnp.float32(self.factor) ** k, jnp.float32(self.stop_factor_lr))
        return jnp.where(k > 0, decayed, base)


class MultiFactorScheduler(LRScheduler):
    """``lr = base_lr * factor^k``, ``k`` the number of milestones in ``step``
    that ``num_update`` has passed."""

    _base_drives_rate = True

    def __init__(self, step, factor=1, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0,
                 warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, (list, tuple)) or len(step) < 1:
            raise ValueError(f"MultiFactorScheduler(step=...): must be a non-empty list; got {step!r}.")
        for i, s in enumerate(step):
            if i and step[i] <= step[i - 1]:
                raise ValueError("MultiFactorScheduler(step=...): must be an increasing integer list.")
            if s < 1:
                raise ValueError("MultiFactorScheduler(step=...): every step must be >= 1.")
        if factor > 1.0:
            raise ValueError(f"MultiFactorScheduler(factor=...): must be no more than 1; got {factor}.")
        self.step, self.factor = list(step), factor

    def _after_warmup(self, t, base):
        k = sum((t > s).astype(jnp.float32) for s in self.step)
        return base * jnp.float32(self.factor) ** k


class PolyScheduler(LRScheduler):
    """``lr = final_lr + (base_lr0 - final_lr) * (1 - (t - warmup)/(max_update - warmup))^pwr``
    up to ``max_update``, then ``final_lr``; ``base_lr0`` is the constructor's ``base_lr``."""

    def __init__(self, max_update, base_lr=0.01, pwr=2, final_lr=0, warmup_steps=0,
                 warmup_begin_lr=0, warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(max_update, int) or max_update < 1:
            raise ValueError(f"PolyScheduler(max_update=...): must be an int >= 1; got {max_update!r}.")
        self.power, self.base_lr_orig, self.max_update, self.final_lr = pwr, base_lr, max_update, final_lr
        self.max_steps = max_update - warmup_steps

    def _after_warmup(self, t, base):
        del base
        # (max_update - t) is exact for integer counts, so one rounding, in the division
        frac = jnp.clip((self.max_update - t) / jnp.float32(self.max_steps), 0.0, None)
        return self.final_lr + (self.base_lr_orig - self.final_lr) * frac ** self.power


class CosineScheduler(LRScheduler):
    """``lr = final_lr + (base_lr0 - final_lr) * (1 + cos(pi (t - warmup)/(max_update - warmup))) / 2``
    up to ``max_update``, then ``final_lr``; ``base_lr0`` is the constructor's ``base_lr``.

    Evaluated as ``(1 + cos(pi x)) / 2 = sin(pi/2 * (1 - x))^2`` with
    ``1 - x = (max_update - t) / (max_update - warmup)`` (an exact integer
    numerator): MXNet's form in float32 loses digits as ``1 + cos`` goes to 0
    near the end of the decay (1.1e-5 relative from MXNet's float64 there);
    this one keeps float32 accuracy (a few ulp) over the whole schedule."""

    def __init__(self, max_update, base_lr=0.01, final_lr=0, warmup_steps=0, warmup_begin_lr=0,
                 warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(max_update, int) or max_update < 1:
            raise ValueError(f"CosineScheduler(max_update=...): must be an int >= 1; got {max_update!r}.")
        self.base_lr_orig, self.max_update, self.final_lr = base_lr, max_update, final_lr
        self.max_steps = max_update - warmup_steps

    def _after_warmup(self, t, base):
        del base
        steps = float(max(self.max_steps, 1))
        left = jnp.clip(self.max_update - t, 0.0, steps)  # updates left in the decay: exact
        s = jnp.sin(jnp.float32(math.pi / 2) * (left / jnp.float32(steps)))
        return self.final_lr + (self.base_lr_orig - self.final_lr) * (s * s)
