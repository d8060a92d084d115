"""The one schedule protocol of gradxform (MXNet, MindSpore and Paddle families).

A schedule is an object with a ``base_lr`` and a pure function of the
framework's own step index, vectorised over it::

    sched(step_array, base_lr=None) -> lr   (float32, same shape as step_array)

Each schedule carries its framework's conventions as two class attributes,
so nothing outside it has to know which family it comes from:

``indexed_by`` (which step index ``step`` is)
    `NUM_UPDATE`: MXNet's ``num_update``, the update count *after* the bump
    (1 on the first update). `COMPLETED`: updates completed before the
    current one (0 on the first update): MindSpore's ``global_step`` (read
    before it is incremented) and Paddle's ``last_epoch`` (``scheduler.step()``
    runs after ``optimizer.step()``).

``rebase`` (what a given ``base_lr`` means: `set_hyper(learning_rate=...)`
on an optimizer with a schedule)
    `REPLACE` (MXNet): ``base_lr`` takes the place of the scheduler's own,
    as MXNet's optimizer overwrites ``scheduler.base_lr``; each MXNet class
    says which of its terms read it (PolyScheduler and CosineScheduler keep
    their constructor's value, as in MXNet). `SCALE` (MindSpore, Paddle):
    the whole schedule is multiplied by ``base_lr / sched.base_lr`` (its
    reference value: ``learning_rate``, ``max_lr``, first value, ...), exactly
    1 with the reference value itself. ``base_lr=None`` gives the schedule's
    own values in both.

`Schedule.lr_for_update` is the one question an optimizer asks:
``sched.lr_for_update(count, base_lr)`` is the learning rate of the update
whose count, that update included, is ``count`` (1 on the first update; what
`gradxform.pieces.track_step` counts); the schedule maps ``count`` to its own
index. An adapter for another convention is one small class: set
``indexed_by``, ``rebase`` and ``base_lr`` and define ``__call__`` (see
`FunctionSchedule`).
"""
from __future__ import annotations

from typing import Callable, cast

import jax.numpy as jnp
import numpy as np

from .._ranges import Range, check_value

__all__ = ["Schedule", "FunctionSchedule", "NUM_UPDATE", "COMPLETED", "REPLACE", "SCALE",
           "on_completed_steps", "Constant", "DynamicLR", "check_number"]

NUM_UPDATE = "num_update"  # MXNet: the count after the bump (1 on the first update)
COMPLETED = "completed"    # MindSpore, Paddle: updates completed before this one (0 on the first)
REPLACE = "replace"        # a given base_lr replaces the schedule's own (MXNet)
SCALE = "scale"            # a given base_lr scales the schedule by base_lr / self.base_lr (MindSpore, Paddle)


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
    """Base class of every schedule (see the module docstring).

    The defaults are the MindSpore/Paddle conventions (`COMPLETED`, `SCALE`):
    a subclass sets ``base_lr`` and implements ``value(step)`` (``step`` a
    float32 array of completed updates), and ``__call__`` rescales. A family
    with other conventions sets the class attributes and overrides
    ``__call__`` (`gradxform.schedules._mxnet.LRScheduler`)."""

    base_lr: float | None = 1.0  # None: taken from the optimizer at the first update (a user's schedule)
    indexed_by: str = COMPLETED
    rebase: str = SCALE

    def value(self, step):  # pragma: no cover - abstract
        raise NotImplementedError

    def step_index(self, count):
        """This schedule's own step index for the update whose count (that
        update included) is ``count``."""
        count = jnp.asarray(count)
        if self.indexed_by == NUM_UPDATE:
            return count
        if self.indexed_by == COMPLETED:
            return count - 1
        raise ValueError(f"{type(self).__name__}.indexed_by: must be {NUM_UPDATE!r} or {COMPLETED!r}; "
                         f"got {self.indexed_by!r}.")

    def lr_for_update(self, count, base_lr=None):
        """The learning rate of the update whose count is ``count`` (1 on the
        first update), with ``base_lr`` meaning what ``rebase`` says."""
        return self(self.step_index(count), base_lr)

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
        return jnp.full_like(step, cast(float, self.base_lr))  # set to a float in __init__


class FunctionSchedule(Schedule):
    """A plain function ``fn(step, base_lr) -> lr`` as a schedule with the
    given conventions: the adapter for a callable that is not a `Schedule`
    (an MXNet ``lr_scheduler`` given as a function is `NUM_UPDATE`-indexed,
    a MindSpore/Paddle one `COMPLETED`-indexed); what ``base_lr`` does is up
    to ``fn`` (``rebase`` records it)."""

    def __init__(self, fn: Callable, *, indexed_by: str, rebase: str = REPLACE, base_lr=None):
        self.fn, self.indexed_by, self.rebase = fn, indexed_by, rebase
        self.base_lr = getattr(fn, "base_lr", None) if base_lr is None else base_lr

    def __call__(self, step, base_lr=None):
        return self.fn(step, base_lr)


def on_completed_steps(sched: Callable) -> Callable:
    """Kept for compatibility (optimizers no longer use it: every `Schedule`
    maps the update count to its own index, `Schedule.lr_for_update`).

    ``(count, base) -> sched(count - 1, base)``: a `COMPLETED`-indexed
    schedule as a plain function of `track_step`'s count."""

    def shifted(count, base_lr=None):
        return sched(jnp.asarray(count) - 1, base_lr)

    shifted.base_lr = getattr(sched, "base_lr", None)  # pyright: ignore[reportFunctionMemberAccess]  # kept as it was
    shifted.wrapped = sched  # pyright: ignore[reportFunctionMemberAccess]
    return shifted


class DynamicLR(Schedule):
    """A learning rate given as a list or 1-D array (MindSpore's ``learning_rate=[...]``):
    update ``i`` (``step = i``) uses ``values[i]``; after the end, the last value.
    ``base_lr`` is ``values[0]``.

    Past the end, by backend. MindSpore 2.x holds the list as a Parameter read by
    ``ops.Gather(values, global_step, 0)`` (``nn/optim/optimizer.py``,
    ``_IteratorLearningRate``), and no backend gives a number there: the CPU
    kernel raises (2.10: "Gather ... input_indices should be in the range [0, n),
    but got n"); the GPU kernel
    (``ccsrc/plugin/device/gpu/kernel/cuda_impl/cuda_ops/gatherv2.cu``, 2.x)
    asserts ``CUDA_KERNEL_ASSERT(indices[j] < input_dim1)``, a device-side assert
    that aborts the step (an older revision of that kernel wrote 0 there); and
    ``mindspore.ops.gather``'s documentation (r2.2 to master) says an index out
    of range raises on CPU and GPU and gives an undefined result on Ascend.
    MindSpore's optimizers therefore use `MindSporeListLR`, which raises where
    the update count is known on the host (an update run op by op, without
    jit; ``gradxform.mindspore.get_lr``); inside jit nothing can raise (a
    raising callback would lose the donated parameters), and the last value is
    read, as here (Paddle's and the neutral family's optimizers take no list)."""

    def __init__(self, values):
        arr = np.asarray(values, np.float32).reshape(-1)
        if arr.size == 0:
            raise ValueError("DynamicLR(values=...): must not be empty.")
        self.values = arr
        self.base_lr = float(arr[0])

    def value(self, step):
        idx = jnp.clip(step.astype(jnp.int32), 0, self.values.size - 1)
        return jnp.asarray(self.values)[idx]
