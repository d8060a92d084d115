"""Paddle's ``ReduceOnPlateau`` in the graph (`PaddleReduceOnPlateau`): a learning rate driven by the
loss, so a stateful adjuster of the Paddle family's rate rather than a function of the step count
(re-exported by `gradxform.schedules` beside the other in-graph Paddle schedules, whence its
``Paddle`` prefix). Its comparison and its reduction, `is_better` and `reduced`, are also the rule of
Paddle's own object on the host (`gradxform.paddle.lr.ReduceOnPlateau`, which a ported script steps)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation
from ..pieces.internal import RateAdjuster, adjusted_rate
from ..pieces import track_step
from .._hyper import hyper_scalar
from ..schedules.internal import JAX32, Ops, check_number
from .._types import Hyper
from .._domains import COUNT, FINITE, FLAG, NON_NEGATIVE_FINITE

__all__ = ["PaddleReduceOnPlateau", "PlateauState", "is_better", "reduced"]

F32 = jnp.float32


def is_better(mode, threshold_mode, threshold, cur, best):
    """Paddle's ``ReduceOnPlateau._is_better`` (``threshold`` already cast by the caller)."""
    if mode == "min":
        return cur < (best - best * threshold if threshold_mode == "rel" else best - threshold)
    return cur > (best + best * threshold if threshold_mode == "rel" else best + threshold)


def reduced(lr, factor, min_lr, epsilon, o: Ops):
    """``new = max(lr * factor, min_lr)``, taken only when ``lr - new > epsilon``."""
    new = o.xp.maximum(lr * o.c(factor), o.c(min_lr))
    return o.xp.where(lr - new > o.c(epsilon), new, lr)


class PlateauState(NamedTuple):
    """``last_lr``: the learning rate now; ``best``/``has_best``: the best metric
    seen (``has_best`` int32 0/1); ``num_bad_epochs``/``cooldown_counter`` as Paddle's."""
    hyper: Hyper
    last_lr: jax.Array
    best: jax.Array
    has_best: jax.Array
    num_bad_epochs: jax.Array
    cooldown_counter: jax.Array
    domains = {"last_lr": NON_NEGATIVE_FINITE, "best": FINITE, "has_best": FLAG, "num_bad_epochs": COUNT,
               "cooldown_counter": COUNT}


class PaddleReduceOnPlateau:
    """Paddle's ReduceOnPlateau, in the graph. It needs the loss, so it is not a function of the
    step count: it adjusts the rate `track_step` computes (`adjuster`, run by
    `gradxform.pieces.adjusted_rate`), taking the loss as the extra argument
    ``loss=`` of ``update`` and giving every leaf its current value; `piece`
    is that rate piece, ready to chain in place of `track_step`. As in
    Paddle, the loss given with update ``t`` (the loss at the parameters
    before that update, fed to ``scheduler.step(loss)`` after
    ``optimizer.step()``) changes the learning rate from update ``t + 1`` on;
    Paddle's rule, cooldown included (a cooldown step does not look at the
    metric)::

        if cooldown_counter > 0: cooldown_counter -= 1
        else:
            if better(loss, best): best, num_bad = loss, 0  else: num_bad += 1
            if num_bad > patience:
                cooldown_counter, num_bad = cooldown, 0
                new = max(lr * factor, min_lr); if lr - new > epsilon: lr = new

    ``update_metric(state, loss)`` is the same rule on a state alone.
    """

    def __init__(self, learning_rate, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0.0, epsilon=1e-8):
        owner = "PaddleReduceOnPlateau"
        mode = str(mode).lower()
        if mode not in ("min", "max"):
            raise ValueError(f"{owner}(mode=...): must be 'min' or 'max'; got {mode!r}.")
        check_number(owner, "factor", factor, high=1.0, high_open=True)
        threshold_mode = str(threshold_mode).lower()
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"{owner}(threshold_mode=...): must be 'rel' or 'abs'; got {threshold_mode!r}.")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)):
            raise TypeError(f"{owner}(learning_rate=...): must be a number; got {learning_rate!r}.")
        check_number(owner, "patience", patience, low=0, integer=True)
        check_number(owner, "cooldown", cooldown, low=0, integer=True)
        self.mode, self.threshold_mode = mode, threshold_mode
        self.factor, self.patience, self.threshold = float(factor), patience, float(threshold)
        self.cooldown, self.min_lr, self.epsilon = cooldown, float(min_lr), float(epsilon)
        self.base_lr = float(learning_rate)

    def init_state(self) -> PlateauState:
        return PlateauState({}, hyper_scalar(self.base_lr), jnp.zeros((), F32), jnp.zeros((), jnp.int32),
                            jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def _better(self, cur, best):
        return is_better(self.mode, self.threshold_mode, F32(self.threshold), cur, best)

    def update_metric(self, s: PlateauState, loss) -> PlateauState:
        loss = jnp.asarray(loss, F32).reshape(())
        cooling = s.cooldown_counter > 0
        better = jnp.logical_or(s.has_best == 0, self._better(loss, s.best))
        best = jnp.where(better, loss, s.best)
        bad = jnp.where(better, 0, s.num_bad_epochs + 1)
        trigger = bad > self.patience
        lr = jnp.where(trigger, reduced(s.last_lr, self.factor, self.min_lr, self.epsilon, JAX32), s.last_lr)
        bad = jnp.where(trigger, 0, bad)
        cool = jnp.where(trigger, self.cooldown, 0)
        return PlateauState(s.hyper,
                            jnp.where(cooling, s.last_lr, lr), jnp.where(cooling, s.best, best),
                            jnp.where(cooling, s.has_best, 1).astype(jnp.int32),
                            jnp.where(cooling, s.num_bad_epochs, bad),
                            jnp.where(cooling, s.cooldown_counter - 1, cool).astype(jnp.int32))

    def adjuster(self) -> RateAdjuster:
        """The rate adjuster `adjusted_rate` runs (see the class docstring):
        every leaf's rate is the plateau's ``last_lr``."""

        def init(params):
            del params
            return self.init_state()

        def adjust(lr, count, updates, state, extra_args):
            del count, updates
            if "loss" not in extra_args or extra_args["loss"] is None:
                raise ValueError("PaddleReduceOnPlateau needs the loss: call update(grads, state, params, "
                                 "loss=loss_value).")
            lr = jax.tree.map(lambda l: jnp.broadcast_to(state.last_lr, jnp.shape(l)), lr)
            return lr, self.update_metric(state, extra_args["loss"])

        return RateAdjuster("PaddleReduceOnPlateau", init, adjust)

    def piece(self, track: GradientTransformation | None = None) -> GradientTransformation:
        """The chainable rate piece: ``track`` (default ``track_step`` from
        this plateau's ``learning_rate``) adjusted by the plateau; it provides
        the step context's ``lr``, ``count`` and ``mask``, so it takes
        `track_step`'s place in a chain. Its state is ``(StepState,
        PlateauState)``."""
        return adjusted_rate(track_step(self.base_lr) if track is None else track, self.adjuster())
