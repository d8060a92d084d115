"""A scheduler object the user steps on the host, read by the update itself.

Paddle's optimizer reads ``scheduler()`` at every ``optimizer.step()``; the
user calls ``scheduler.step()`` after it, per batch or per epoch, and may
subclass the scheduler with any Python. Such an object cannot be traced, and
its value changes between calls of a jitted update that the user compiled
once. `HeldRate` makes the update read it anyway: the learning rate is a
host callback (`jax.pure_callback`) that returns ``float32(obj())`` when the
update runs, inside the user's own ``jit``, ``scan``, ``vmap`` or
``nnx.jit`` alike. Nothing has to be synced by hand, so no update can run at
a stale rate.

**Why a barrier.** JAX dispatches asynchronously: ``train_step(...)``
returns before the device has run it, and the script's next line may be
``scheduler.step()``. The callback would then read the next rate. So a
watched object waits, before it changes, for the computations in flight
(`wait_for_updates`: every live array ready, which includes the outputs of
any update not yet run): `gradxform.paddle.lr.LRScheduler` waits in
``__setattr__`` (a subclass that writes ``self.last_lr`` in its own
``step()`` is covered), any other object following the protocol gets an
instance ``step`` that waits first. An update therefore reads the value the
object held when the update was dispatched, as Paddle's eager step does.

**What it costs** (``benchmarks/bench_held_rate.py``). A pure callback keeps
jit's fast dispatch (an ``io_callback``, an effect, sends every call through
JAX's Python dispatch, about 7 us per state array: 1.4 ms a step for a
16-leaf Paddle Momentum). The wait costs about 0.2 us per live array when
nothing is in flight; with an update in flight it is the wait for that
update, so a scheduler stepped per batch gives up JAX's run-ahead of one
step.

**Where it cannot run.** A host callback cannot be serialised
(`jax.export`) and needs a backend that runs Python callbacks; there the
trace or the call raises, it never trains on a stale value.
`gradxform.Trainer` and `gradxform.mxnet.get_updater` read the object on
the host themselves and feed the value in, with no callback.
"""
from __future__ import annotations

import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ._common import COMPLETED, SCALE, Schedule

__all__ = ["HeldRate", "ScheduleRestartError", "watch", "wait_for_updates"]

_WRAPPERS: weakref.WeakSet = weakref.WeakSet()  # the after_updates wrappers `watch` installed
_inside = threading.local()  # set while a callback reads an object: a barrier there would wait for itself


def wait_for_updates() -> None:
    """Blocks until every dispatched computation is done (so none of them reads
    a value changed after it was dispatched): an update in flight holds its
    outputs among the live arrays until it has run."""
    if not getattr(_inside, "reading", False):
        jax.block_until_ready(jax.live_arrays())


class ScheduleRestartError(ValueError):
    """An update would read a scheduler object that is where it was built
    while the optimizer state has done updates that object never served: a
    resumed run whose scheduler was not restored (it would restart its
    schedule). Restore the scheduler's ``state_dict()`` first."""


def changes(obj) -> int:
    """How often ``obj`` was stepped or loaded since an optimizer began to read it."""
    return obj.__dict__.get("_gx_changes", 0) if hasattr(obj, "__dict__") else 0


def _count_change(obj) -> None:
    obj.__dict__["_gx_changes"] = changes(obj) + 1


def watch(obj) -> None:
    """Makes ``obj`` wait for dispatched updates before it changes, and count
    its changes (see the module docstring). `gradxform.paddle.lr.LRScheduler`
    has the hook built in (``_hold``); any other object gets an instance
    ``step`` (and ``set_state_dict``/``set_dict``, where it has them) that
    waits and counts."""
    hold = getattr(obj, "_hold", None)
    if callable(hold):
        hold()
        return
    for name in ("step", "set_state_dict", "set_dict"):
        method = getattr(obj, name, None)
        if method is None or method in _WRAPPERS:
            continue

        def after_updates(*args, _method=method, **kwargs):
            wait_for_updates()
            out = _method(*args, **kwargs)
            _count_change(obj)
            return out

        _WRAPPERS.add(after_updates)
        try:
            setattr(obj, name, after_updates)
        except (AttributeError, TypeError) as err:  # __slots__ or a read-only attribute
            raise TypeError(f"{obj!r}: a scheduler object read inside jit must let its {name}() be wrapped (to "
                            "wait for updates in flight before it changes); give it to gradxform.Trainer by "
                            "name, which reads it on the host.") from err


class HeldRate(Schedule):
    """The rate ``obj()`` of an object that holds it (Paddle's ``LRScheduler``
    protocol, `gradxform.schedules.holds_its_rate`), read by the update when it
    runs. The step count does not enter: the object is where the user stepped
    it. ``base_lr`` is the value at construction (what a Paddle optimizer's
    ``learning_rate`` hyperparameter records); a later ``set_hyper`` of the
    learning rate does not rescale it (Paddle's ``set_lr`` under a scheduler
    is an error)."""

    indexed_by = COMPLETED
    rebase = SCALE
    reads_host = True  # gradxform.pieces.track_step reads it once per update

    def __init__(self, obj):
        self.obj = obj
        self.base_lr = float(obj())
        watch(obj)
        self.changes_at_start = changes(obj)
        self.served = 0  # updates this object's reads have served

    def check_restart(self, done) -> None:
        """`ScheduleRestartError` when a state that has done ``done`` updates
        meets this scheduler where it was built (more updates than this reader
        has served, and the scheduler not stepped or loaded since). Run on the
        host before a step that donates its arrays (`gradxform.paddle`'s
        stateful optimizer), so the refusal loses nothing; the callback runs it
        again inside the step for loops that call ``update`` themselves."""
        done = int(done)
        if done > self.served and changes(self.obj) == self.changes_at_start:
            raise ScheduleRestartError(
                f"the optimizer state is a resumed one (its step count is {done}: the updates it has done, "
                "or, for a state read from a Paddle file, the saved scheduler's last_epoch, which counts "
                f"scheduler.step() calls), but the scheduler {self.obj!r} is where it was built (last_epoch "
                f"{getattr(self.obj, 'last_epoch', '?')}, not stepped or loaded since): a resumed run would "
                "restart its schedule. Restore the scheduler with the state, e.g. "
                "sched.set_state_dict(saved_scheduler_state) (a .pdopt holds it: gradxform.migrate."
                "read_paddle_state_dict(path)['LR_Scheduler']; save it with sched.state_dict(), or in "
                "gradxform.save_state(path, state, meta={'LR_Scheduler': sched.state_dict()})), or move "
                "it by hand (sched.step(epoch=...)) before the first update.")

    def host_value(self, done=None) -> np.float32:
        """``float32(obj())``: Paddle keeps its learning rate as a float32 tensor.

        ``done``: the updates the state records before this one. More than
        this reader has served, with the scheduler not stepped or loaded since
        it began to read it, means a state restored beside a scheduler that
        restarted: `ScheduleRestartError`, never an update at the restarted rate."""
        if done is not None:
            self.check_restart(done)
            self.served += 1
        _inside.reading = True
        try:
            return np.float32(self.obj())
        finally:
            _inside.reading = False

    def read(self, done=None) -> jax.Array:
        """The rate now, a float32 scalar, as a host callback in the program
        (``done``: the updates done before this one, an int32 scalar, checked
        against a restarted scheduler)."""
        shape = jax.ShapeDtypeStruct((), jnp.float32)
        if done is None:
            return jax.pure_callback(self.host_value, shape)
        return jax.pure_callback(self.host_value, shape, jnp.asarray(done, jnp.int32), vmap_method="sequential")

    def __call__(self, step, base_lr=None):
        del base_lr  # the object's value, whatever the base
        return jnp.broadcast_to(self.read(), jnp.shape(step))

    def __repr__(self):
        return f"HeldRate({self.obj!r})"
