"""The schedule protocol shared by the MindSpore and Paddle families.

A schedule is a pure, vectorised function of the framework's own step index
(MindSpore's ``global_step``, Paddle's ``last_epoch``: the number of updates
*completed* before the one being computed) and of a base learning rate::

    sched(step_array, base_lr=None) -> lr   (float32, same shape as step_array)

``base_lr=None`` gives the schedule's own values. A given ``base_lr`` rescales
the whole schedule by ``base_lr / sched.base_lr`` (``sched.base_lr`` is the
schedule's reference value: its ``learning_rate``, ``max_lr``, first value,
...), so an optimizer that keeps ``learning_rate`` as a hyperparameter in its
state and passes it here can be re-based with `gradxform.set_hyper` without a
recompile; with the reference value itself the factor is exactly 1.

`gradxform.pieces.track_step` hands its schedule the update count *after*
its bump (1 on the first update). `on_completed_steps` adapts a schedule to
that convention, which is what every MindSpore and Paddle optimizer here does.
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from .._ranges import Range, check_value

__all__ = ["Schedule", "on_completed_steps", "as_schedule", "Constant", "check_number"]


def check_number(owner: str, name: str, value, *, low=None, low_open=False, high=None, high_open=False,
                 integer: bool = False) -> None:
    """TypeError for a non-number (or a non-int where ``integer``), ValueError
    naming the range otherwise (`gradxform._ranges.check_value`: a float is
    judged as the float32 it is stored as, an int as it is)."""
    ok_types = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        kind = "an int" if integer else "a number"
        raise TypeError(f"{owner}({name}=...): {name} must be {kind}; got {value!r}.")
    check_value(owner, name, value, Range(low, high, low_open, high_open), as_stored=not integer)


class Schedule:
    """Base class: subclasses set ``base_lr`` and implement ``value(step)``
    (``step`` a float32 array of completed updates)."""

    base_lr: float = 1.0

    def value(self, step):  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, step, base_lr=None):
        t = jnp.asarray(step)
        v = jnp.asarray(self.value(t.astype(jnp.float32)), jnp.float32)
        v = jnp.broadcast_to(v, t.shape)
        if base_lr is None or self.base_lr == 0:
            return v
        return v * (jnp.asarray(base_lr, jnp.float32) / jnp.float32(self.base_lr))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class Constant(Schedule):
    """A fixed learning rate (used where a group or wrapper needs a schedule)."""

    def __init__(self, learning_rate: float):
        self.base_lr = float(learning_rate)

    def value(self, step):
        return jnp.full_like(step, self.base_lr)


def on_completed_steps(sched: Callable) -> Callable:
    """``(count, base) -> sched(count - 1, base)``: feeds a framework-indexed
    schedule from `track_step`'s count, which includes the update in progress.
    MindSpore's ``get_lr()`` reads ``global_step`` before incrementing it and
    Paddle's ``LRScheduler.step()`` runs after ``optimizer.step()``, so both
    use the value at "updates completed so far" for the current update."""

    def shifted(count, base_lr=None):
        return sched(jnp.asarray(count) - 1, base_lr)

    shifted.base_lr = getattr(sched, "base_lr", None)
    shifted.wrapped = sched
    return shifted


def as_schedule(owner: str, learning_rate, list_cls) -> tuple[float, Callable | None]:
    """Splits a framework ``learning_rate`` argument into (base value, schedule
    or None): a number is fixed; a list/tuple/1-D array becomes ``list_cls``;
    a `Schedule` (or any callable with a ``base_lr``) is used as it is."""
    import numpy as np  # noqa: PLC0415

    if isinstance(learning_rate, bool):
        raise TypeError(f"{owner}(learning_rate=...): must be a number, a list or 1-D array, or a "
                        f"schedule; got {learning_rate!r}.")
    if isinstance(learning_rate, (int, float)):
        check_number(owner, "learning_rate", learning_rate, low=0.0)
        return float(learning_rate), None
    if isinstance(learning_rate, (list, tuple)) or hasattr(learning_rate, "shape"):
        arr = np.asarray(learning_rate)
        if arr.ndim == 0:
            check_number(owner, "learning_rate", float(arr), low=0.0)
            return float(arr), None
        if arr.ndim > 1:
            raise ValueError(f"{owner}(learning_rate=...): a learning-rate array must be 0-D or 1-D; "
                             f"got {arr.ndim} dimensions.")
        if arr.size == 0:
            raise ValueError(f"{owner}(learning_rate=...): a learning-rate list must not be empty.")
        if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{owner}(learning_rate=...): every value must be a finite number >= 0.")
        s = list_cls(arr)
        return s.base_lr, s
    if callable(learning_rate):
        base = getattr(learning_rate, "base_lr", None)
        if base is None:
            raise TypeError(f"{owner}(learning_rate=...): a schedule must have a base_lr (use a "
                            f"gradxform.schedules class); got {learning_rate!r}.")
        return float(base), learning_rate
    raise TypeError(f"{owner}(learning_rate=...): must be a number, a list or 1-D array, or a "
                    f"schedule; got {type(learning_rate).__name__}.")
