"""Schedules a user already has: MXNet-style callables, optax schedules, and
Python objects that JAX cannot trace.

What a schedule may be (wherever an optimizer takes one: MXNet's
``lr_scheduler=``, any family's ``learning_rate=``, a MindSpore group's
``'lr'``, `gradxform.pieces.track_step`'s ``schedule=``):

1. a `gradxform.schedules` class (MXNet, MindSpore, Paddle): it carries its
   framework's step convention (``indexed_by``);
2. a JAX-traceable callable of one argument, the step index, with an
   optional ``base_lr`` attribute: MXNet's ``LRScheduler`` protocol
   ``f(num_update)``, or an optax schedule ``f(count)``;
3. a callable ``f(step, base_lr)`` of two arguments (gradxform's older
   function protocol; indexed as in 4);
4. an object JAX cannot trace (Python ``if``/``min``/``while`` on the step,
   or attributes it changes when called: MXNet's and GluonCV's scheduler
   classes). `gradxform.Trainer` and `gradxform.mxnet.get_updater` evaluate
   it on the host before each update and feed the value in as the
   ``learning_rate`` hyperparameter (no recompile). Anywhere else (an
   optimizer you jit yourself) it raises at construction, naming these two
   ways out.
5. an object that the user steps and that holds the rate of the next
   update, Paddle's ``LRScheduler`` protocol (`holds_its_rate`: ``step()``,
   ``last_epoch``, ``last_lr``, and ``obj()`` returns the rate, as Paddle's
   optimizer reads it at each ``optimizer.step()``). Any family's optimizer
   built with one reads ``obj()`` in each update, inside the user's own jit
   (`gradxform.schedules._held.HeldRate`: a host callback; no sync call);
   `gradxform.Trainer` and `gradxform.mxnet.get_updater` read it on the host
   before each update and feed the value in.

**Which step a bare callable counts.** MXNet's ``num_update`` is 1 on the
first update; optax's ``count``, MindSpore's ``global_step`` and Paddle's
``last_epoch`` are 0 on the first update. A bare callable (no
``indexed_by``) follows the keyword it is given to: ``lr_scheduler=`` is
MXNet's keyword, so MXNet's convention (1 on the first update);
``learning_rate=`` and a group's ``'lr'`` take optax's (0 on the first
update). A function defined in optax always counts from 0. Say it
explicitly with `mxnet_style(f)` or `optax_style(f)`.

**What a changed base learning rate does.** With a ``base_lr`` (its own
attribute, or the optimizer's explicit ``learning_rate``, which MXNet writes
into ``scheduler.base_lr`` at construction, as here), a later
``set_hyper(learning_rate=x)`` multiplies the schedule by ``x / base_lr``
(exactly 1 while ``x`` is that base); without one it is ignored.
"""
from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING, Any, Callable, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._domains import MAX_COUNT
from .._ranges import NON_NEGATIVE, check_value
from ._common import COMPLETED, NUM_UPDATE, REPLACE, SCALE, FunctionSchedule, Schedule, check_number
from ._held import HeldRate

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs: Python 3.13

__all__ = ["UserSchedule", "mxnet_style", "optax_style", "adapt", "HostScheduleError", "HostSchedule",
           "take_host_schedule", "holds_its_rate", "as_update_schedule", "as_schedule"]

_CONVENTIONS = (NUM_UPDATE, COMPLETED)


class HeldScheduler(Protocol):
    """Paddle's ``LRScheduler`` protocol as `holds_its_rate` tests it: the user
    calls ``step()``, and ``obj()`` is the rate it holds (it also has
    ``last_lr`` and ``last_epoch``)."""

    def __call__(self) -> Any: ...

    def step(self, *args: Any, **kwargs: Any) -> Any: ...


class HostScheduleError(TypeError):
    """A schedule that JAX cannot trace was given where the optimizer runs
    inside ``jit`` (see the module docstring for the two ways out)."""


class UserSchedule(Schedule):
    """A user's one-argument callable ``fn(index) -> lr`` as a `Schedule`
    with a stated convention (``indexed_by``: `NUM_UPDATE` or `COMPLETED`).

    Called with an int32 index (a vector under group learning rates: ``fn``
    is then vmapped). ``base_lr``: see the module docstring."""

    rebase = SCALE

    def __init__(self, fn: Callable, *, indexed_by: str, base_lr: float | None = None):
        if indexed_by not in _CONVENTIONS:
            raise ValueError(f"UserSchedule(indexed_by=...): must be {NUM_UPDATE!r} or {COMPLETED!r}; "
                             f"got {indexed_by!r}.")
        if not callable(fn):
            raise TypeError(f"a schedule must be callable; got {fn!r}.")
        self.fn, self.indexed_by = fn, indexed_by
        base = getattr(fn, "base_lr", None) if base_lr is None else base_lr
        self.base_lr = float(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else None

    def __call__(self, step, base_lr=None):
        t = jnp.asarray(step, jnp.int32)
        if t.ndim == 0:
            v = jnp.asarray(self.fn(t), jnp.float32)
            v = v.reshape(()) if v.size == 1 else v  # a (1,) lr: MindSpore's get_lr reshapes it
        else:
            v = jax.vmap(lambda s: jnp.asarray(self.fn(s), jnp.float32))(t.reshape(-1)).reshape(t.shape)
        v = jnp.broadcast_to(v, t.shape)
        if base_lr is None or not self.base_lr:
            return v
        return v * (jnp.asarray(base_lr, jnp.float32) / jnp.float32(self.base_lr))

    def __repr__(self):
        style = "mxnet_style" if self.indexed_by == NUM_UPDATE else "optax_style"
        return f"{style}({self.fn!r})"


def mxnet_style(fn: Callable, *, base_lr: float | None = None) -> UserSchedule:
    """``fn(num_update) -> lr`` with MXNet's count: 1 on the first update
    (``mx.lr_scheduler.LRScheduler.__call__``)."""
    return UserSchedule(fn, indexed_by=NUM_UPDATE, base_lr=base_lr)


def optax_style(fn: Callable, *, base_lr: float | None = None) -> UserSchedule:
    """``fn(count) -> lr`` counted from 0 on the first update (optax; also
    MindSpore's ``global_step`` and Paddle's ``last_epoch``)."""
    return UserSchedule(fn, indexed_by=COMPLETED, base_lr=base_lr)


def _required_positional(fn) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty)


def _from_optax(fn) -> bool:
    return str(getattr(fn, "__module__", "") or "").split(".")[0] == "optax"


def wrap(sched, default: str) -> Schedule | None:
    """``sched`` as a `Schedule`, untested for traceability (see `adapt`)."""
    if sched is None or callable(getattr(sched, "lr_for_update", None)):
        return sched
    if not callable(sched):
        raise TypeError(f"a schedule must be a gradxform schedule or a callable of the step; got {sched!r}.")
    if _from_optax(sched):
        return UserSchedule(sched, indexed_by=COMPLETED)
    if _required_positional(sched) >= 2:  # fn(step, base_lr)
        return FunctionSchedule(sched, indexed_by=default, rebase=REPLACE if default == NUM_UPDATE else SCALE)
    # a subclass of LRScheduler / LearningRateSchedule keeps its framework's count
    return UserSchedule(sched, indexed_by=getattr(sched, "indexed_by", default))


def holds_its_rate(obj) -> TypeIs[HeldScheduler]:
    """Whether ``obj`` follows Paddle's ``LRScheduler`` protocol (item 5 of the
    module docstring): the user steps it, and ``obj()`` is the rate it holds."""
    return (callable(obj) and callable(getattr(obj, "step", None)) and hasattr(obj, "last_lr")
            and hasattr(obj, "last_epoch") and not callable(getattr(obj, "lr_for_update", None)))


def _snapshot(obj) -> dict | None:
    d = getattr(obj, "__dict__", None)
    return dict(d) if isinstance(d, dict) else None


def untraceable_reason(sched: Schedule) -> str | None:
    """Why ``sched`` cannot run inside jit (None when it can): tracing it
    fails, or calling it changes its own attributes (a stateful object)."""
    if not isinstance(sched, (UserSchedule, FunctionSchedule)):
        return None  # gradxform's own schedules are closed forms
    fn = sched.fn
    before = _snapshot(fn)
    reason = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jax.eval_shape(lambda c, b: sched.lr_for_update(c, b), jax.ShapeDtypeStruct((), jnp.int32),
                           jax.ShapeDtypeStruct((), jnp.float32))
    except Exception as err:  # noqa: BLE001  (any failure to trace: evaluate on the host)
        reason = f"tracing it raised {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
    after = _snapshot(fn)
    if before is not None and after is not None and (set(before) != set(after) or any(
            after[k] is not v for k, v in before.items())):
        fn.__dict__.clear()
        fn.__dict__.update(before)  # undo what the trace wrote (tracers)
        reason = reason or "calling it changes its own attributes (a stateful object)"
    return reason


def _uncalled(sched, reason: str) -> str:
    """What to type when ``sched`` is a schedule's class or maker, not a
    schedule (``nn.WarmUpLR`` for ``nn.WarmUpLR(0.1, 10)``, an uncalled
    ``optax.cosine_decay_schedule``); '' otherwise."""
    is_class = inspect.isclass(sched)
    if not is_class and not (inspect.isfunction(sched) and "required positional argument" in reason):
        return ""
    try:
        sig = inspect.signature(sched)
    except (TypeError, ValueError):
        return ""
    need = [p.name for p in sig.parameters.values() if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    root = getattr(sched, "__module__", "").split(".")[0]
    name = sched.__name__ if is_class or root in ("", "gradxform", "__main__") else f"{root}.{sched.__name__}"
    what = f"the class {sched.__name__}" if is_class else f"{name}, a function that makes a schedule"
    more = ", ..." if len(need) < len(sig.parameters) else ""
    return f"got {what}, not a schedule: call it: {name}({', '.join(need)}{more}) gives the schedule to pass."


def adapt(sched, *, default: str, owner: str, arg: str, optimizer: str | None = None) -> Schedule | None:
    """The schedule an optimizer uses for ``sched`` (see the module docstring),
    checked at construction: a schedule JAX cannot trace raises
    `HostScheduleError` naming the two ways out."""
    if holds_its_rate(sched):  # a scheduler the user steps: the update reads it on the host (_held)
        return HeldRate(sched)
    out = wrap(sched, default)
    reason = untraceable_reason(out) if out is not None else None
    if reason and _uncalled(sched, reason):
        raise HostScheduleError(f"{owner}({arg}=...): {_uncalled(sched, reason)}")
    if reason:
        name = optimizer or owner
        raise HostScheduleError(
            f"{owner}({arg}=...): {sched!r} cannot run inside jit ({reason}). Two ways out: "
            f"(1) give it by name to gradxform.Trainer(params, {name!r}, {{{arg!r}: schedule, ...}}) or "
            f"gradxform.mxnet.get_updater({name!r}, {{{arg!r}: schedule, ...}}), which evaluate it on the "
            "host before each update and feed the value in as the learning rate (no recompile); or "
            "(2) build the optimizer without it and, before each jitted step, set "
            "state = gradxform.set_learning_rate(state, schedule(step)) (a hyperparameter: no recompile).")
    return out


class HostSchedule:
    """An untraceable schedule evaluated on the host, one call per update,
    with the convention of the keyword it came from (`UserSchedule`), or an
    object that holds its rate (`holds_its_rate`), read as it stands."""

    def __init__(self, sched: UserSchedule | FunctionSchedule | HeldScheduler, arg: str, begin_num_update: int = 0):
        self.sched, self.arg = sched, arg
        self.begin = int(begin_num_update)
        self.num_update: int | None = None  # updates done; None: read it from the state first

    def lr_at(self, num_update: int) -> float:
        """The learning rate of the update whose count (it included) is ``num_update``."""
        s = self.sched
        if holds_its_rate(s):  # Paddle: the rate it holds now, whatever the count
            value, fn = float(s()), s
        else:
            index = num_update if s.indexed_by == NUM_UPDATE else num_update - 1
            value = s.fn(index) if isinstance(s, UserSchedule) else s.fn(index, s.base_lr)
            value = float(value.reshape(()) if getattr(value, "size", 0) == 1 else value)  # (1,): as above
            fn = s.fn
        check_value(f"schedule {fn!r}", "learning_rate", value, NON_NEGATIVE)
        return value

    def next_lr(self, done: Callable[[], int]) -> float:
        """The learning rate of the next update; ``done()`` gives the updates
        done so far when this object does not know yet. The update is not
        counted here: a schedule that raises, or a step that fails, leaves the
        count where it was, so the retried update gets its own rate."""
        if self.num_update is None:
            self.num_update = int(done())
        return self.lr_at(min(self.num_update + 1, MAX_COUNT))  # counts stop there (track_step)

    def _object(self) -> Any:
        """The object whose own attributes carry its position (a held scheduler, or
        an MXNet-style scheduler that changes itself when called), or None: a
        user's object of any type, read by duck typing."""
        obj = self.sched if holds_its_rate(self.sched) else getattr(self.sched, "fn", None)
        return obj if hasattr(obj, "__dict__") else None

    def position(self) -> dict:
        """What a checkpoint keeps of the scheduler (``{"lr_scheduler": ...}``): a
        Paddle-protocol object's ``state_dict()``, else the plain attributes of an
        object that changes itself (MXNet pickles its scheduler with the
        optimizer, so a loaded Gluon Trainer goes on where the file stopped)."""
        obj = self._object()
        if obj is None:
            return {}
        if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "set_state_dict", None)):
            return {"lr_scheduler": {"state_dict": obj.state_dict()}}
        plain = {k: v for k, v in vars(obj).items() if not k.startswith("_") and _plain(v)}
        return {"lr_scheduler": {"attributes": plain}} if plain else {}

    def resume(self, meta: dict | None) -> None:
        """After a checkpoint loaded: the scheduler goes back to where the file's
        run stopped (`position`), and the update count is read again from the
        loaded state. A file without a position (written before 0.1.1) leaves
        the scheduler where it is, with a warning when it holds its own rate."""
        self.num_update = None
        saved = (meta or {}).get("lr_scheduler")
        obj = self._object()
        if obj is None:
            return
        if saved is None:
            if holds_its_rate(obj):
                warnings.warn(f"load_states: the file records no position of the scheduler {obj!r}; it stays "
                              "where it is (restore it with set_state_dict if the run had moved it).",
                              UserWarning, stacklevel=3)
            return
        if "state_dict" in saved:
            obj.set_state_dict(saved["state_dict"])
        else:
            for k, v in saved["attributes"].items():
                setattr(obj, k, v)

    def commit(self, *, counted: bool = True) -> None:
        """After an update ran: count it, or (``counted=False``: a guard may
        have skipped it) forget the count, so the next `next_lr` reads it from
        the state."""
        self.num_update = min(self.num_update + 1, MAX_COUNT) if counted and self.num_update is not None else None


def _plain(v) -> bool:
    """A value a checkpoint's metadata holds as it is (numbers, strings, lists of them)."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return True
    return isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v)


def take_host_schedule(optimizer_params: dict | None) -> tuple[dict, HostSchedule | None]:
    """Splits an untraceable ``lr_scheduler`` (or callable ``learning_rate``)
    out of ``optimizer_params`` for a caller that evaluates it on the host
    (`gradxform.Trainer`, `gradxform.mxnet.get_updater`). Returns the
    parameters to build the optimizer with (``learning_rate``: the value at
    the first update) and the `HostSchedule`, or ``(params, None)``."""
    params = dict(optimizer_params or {})
    for arg, default in (("lr_scheduler", NUM_UPDATE), ("learning_rate", COMPLETED)):
        given = params.get(arg)
        if given is None or isinstance(given, (int, float, list, tuple)) or hasattr(given, "shape"):
            continue
        if holds_its_rate(given):
            del params[arg]
            host = HostSchedule(given, arg)
            params["learning_rate"] = host.lr_at(0)
            return params, host
        if not callable(given) or callable(getattr(given, "lr_for_update", None)) and \
                not isinstance(given, (UserSchedule, FunctionSchedule)):
            continue
        sched = wrap(given, default)
        if not isinstance(sched, (UserSchedule, FunctionSchedule)):
            continue  # gradxform's own schedules are closed forms (untraceable_reason: None)
        reason = untraceable_reason(sched)
        if reason is None:
            continue
        if _uncalled(given, reason):  # a class or schedule maker: the host cannot run it either
            raise HostScheduleError(f"{arg}=...: {_uncalled(given, reason)}")
        del params[arg]
        lr = params.get("learning_rate")
        if arg == "lr_scheduler" and isinstance(lr, (int, float)) and hasattr(sched.fn, "base_lr"):
            setattr(sched.fn, "base_lr", lr)  # as MXNet's Optimizer.__init__ does
        host = HostSchedule(sched, arg, params.get("begin_num_update", 0) or 0)
        params["learning_rate"] = host.lr_at(host.begin + 1)
        return params, host
    return params, None


# -- a framework's learning-rate argument as a schedule ---------------------------

def as_update_schedule(sched, indexed_by: str = NUM_UPDATE, rebase: str | None = None, *,
                       owner: str = "track_step", arg: str = "schedule"):
    """``sched`` as a `Schedule`: itself if it is one (anything with
    ``lr_for_update``); a user's callable adapted by
    `adapt` (a bare callable counts as
    ``indexed_by`` says; one JAX cannot trace raises at construction);
    None stays None. ``rebase`` is accepted for compatibility (a callable's
    own convention decides it)."""
    del rebase
    return adapt(sched, default=indexed_by, owner=owner, arg=arg)


def as_schedule(owner: str, learning_rate, list_cls) -> tuple[float, Schedule | None]:
    """Splits a framework ``learning_rate`` argument into (base value, schedule
    or None): a number is fixed; a list/tuple/1-D array becomes ``list_cls``;
    a `Schedule` (or any callable with a ``base_lr``) is used as it is."""
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
        # any schedule (see gradxform.schedules._user): a bare callable counts
        # from 0 on the first update, as optax, MindSpore and Paddle do
        sched = as_update_schedule(learning_rate, COMPLETED, owner=owner, arg="learning_rate")
        assert sched is not None  # adapt gives None only for None
        base = getattr(sched, "base_lr", None)
        if base is None:
            # no base of its own: the value at the first update stands for it
            base = float(sched.lr_for_update(jnp.asarray(1, jnp.int32)))
            if not isinstance(sched, FunctionSchedule):  # fn(step, base_lr) is handed the base itself
                sched.base_lr = base  # 0.0: no rescaling, in Schedule.__call__ and UserSchedule.__call__
        return float(base), sched
    raise TypeError(f"{owner}(learning_rate=...): must be a number, a list or 1-D array, or a "
                    f"schedule; got {type(learning_rate).__name__}.")
