"""A Gluon run's own ``lr_scheduler`` class, read from a ``.states`` pickle as an inert record.

A Gluon script that subclasses ``mx.lr_scheduler.LRScheduler`` (GluonCV's and
d2l's pattern: ``class StepWarmup(mx.lr_scheduler.LRScheduler)`` in
``__main__``) pickles its scheduler under its own class path inside the
optimizer that ``Trainer.save_states`` writes, ``(states, optimizer)`` with
``optimizer.lr_scheduler`` that object. Continuing the run does not need it
(the port brings its own scheduler; the update counts come from the
optimizer), but the file must be read past it.

`load_gluon_pickle` reads the file as `safe_loads` does (no code the file
names is run or imported; see `gradxform.migrate._pickle`), except that a
global outside the allow-list resolves to a `_UserClass` recipe: called, or
made with arguments, it is refused as any unknown global is; made the way
pickle makes a plain object (NEWOBJ with no arguments at protocols 2-5,
``copyreg._reconstructor(cls, object, None)`` at 0 and 1) it is a `UserRecord`
that BUILD completes with its attribute dict, never the class itself. Once the
file is read, every `UserRecord` must be reachable only through
``optimizer.lr_scheduler`` of the file's ``(states, optimizer)`` pair (inside
that scheduler's own attributes too: GluonCV's ``LRSequential`` keeps its
schedulers in a list); one anywhere else, or a file that fails to read with an
unknown global in it, is refused with the `UnsafePickleError` every unknown
global had before.
"""
from __future__ import annotations

import sys

import numpy as np

from ._errors import UnsafePickleError, short
from ._pickle import _Machine, run_reporting, safe_loads
from ._recipes import BASIC_GLOBALS, MXNET_GLOBALS, NUMPY_GLOBALS, PickledObject, _Record
from .._warn import warn_at_caller

__all__ = ["UserRecord", "load_gluon_pickle", "check_user_scheduler"]

_MAX_PATH = 256  # characters of a class path (module + name)
_NOTE = (" (a class gradxform does not know is read, as an inert record, only where MXNet's optimizer keeps "
         "its lr_scheduler: a Gluon script's own LRScheduler subclass)")


def _refusal(path: str, note: str = "") -> str:
    """The message every unknown global gets (`_pickle._Machine.global_`'s)."""
    return (f"refusing to load the global '{path}' named in the pickle. These state files only hold framework "
            "arrays, optimizer/scheduler records and numpy arrays; anything else could run code, so nothing "
            f"was executed{note}. If the file is genuine, report the class.")


class UserRecord(PickledObject):
    """An object of a class outside the allow-list (a user's scheduler): its
    class path and attribute dict, nothing else."""

    def __init__(self, path: str, args: tuple = ()):
        super().__init__(args)
        self.cls_path = path


class _UserClass(_Record):
    """An unknown global: it makes a `UserRecord` the way pickle makes a plain
    object, and nothing else (it is never called)."""

    def __init__(self, path: str):
        self.name = path

    def cls(self, args: tuple) -> UserRecord:  # copyreg._reconstructor(cls, object, None): args == ()
        return UserRecord(self.name, args)

    def reduce(self, args, ctx):
        raise UnsafePickleError(_refusal(self.name))

    def newobj(self, args, ctx):
        if args != ():
            raise UnsafePickleError(_refusal(self.name))
        return UserRecord(self.name)


class _Table(dict):
    """The Gluon allow-list; any other global with a plausible class path is a
    `_UserClass` (one per path, charged to the read's budget)."""

    def __init__(self):
        super().__init__({**BASIC_GLOBALS, **MXNET_GLOBALS, **NUMPY_GLOBALS})
        self.unknown: dict[tuple, _UserClass] = {}
        self.machine: _Machine | None = None

    def get(self, key, default=None):
        found = super().get(key)
        if found is not None:
            return found
        if key not in self.unknown:
            module, name = key
            if len(module) + len(name) > _MAX_PATH or not all(
                    p.isidentifier() for p in (*module.split("."), *name.split("."))):
                return default  # refused by the reader, as before
            recipe = _UserClass(f"{module}.{name}")
            if self.machine is not None:
                self.machine.charge(sys.getsizeof(recipe) + sys.getsizeof(recipe.__dict__)
                                    + sys.getsizeof(recipe.name) + 2 * sys.getsizeof(key))
            self.unknown[key] = recipe
        return self.unknown[key]


def _misplaced(obj) -> UserRecord | None:
    """A `UserRecord` reachable other than through the optimizer's ``lr_scheduler``."""
    opt = obj[1] if isinstance(obj, tuple) and len(obj) == 2 else None
    if not (isinstance(opt, PickledObject) and not isinstance(opt, UserRecord)
            and opt.cls_path.startswith("mxnet.optimizer.")):
        opt = None
    seen: set[int] = set()
    todo = [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, UserRecord):
            return x
        if not isinstance(x, (tuple, list, dict, set, frozenset, PickledObject)) or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, PickledObject):
            todo.extend(v for k, v in x.attrs.items() if not (x is opt and k == "lr_scheduler"))
            todo.append(x.args)
        elif isinstance(x, dict):
            todo.extend(x)
            todo.extend(x.values())
        else:
            todo.extend(x)
    return None


def load_gluon_pickle(data: bytes, what: str):
    """`safe_loads` of a Gluon/Module states pickle, reading a user scheduler
    class as a `UserRecord` (see the module docstring)."""
    table = _Table()
    machine = _Machine(bytes(data), what, table)
    table.machine = machine
    try:
        obj = run_reporting(machine, what)  # safe_loads' rule: every failure names the file
    except UnsafePickleError:
        if table.unknown:
            return safe_loads(data, what)  # fails as the strict reader does: at the first unknown global
        raise
    bad = _misplaced(obj) if table.unknown else None
    if bad is not None:
        raise UnsafePickleError(f"{what}: {_refusal(bad.cls_path, _NOTE)}")
    return obj


def _comparable(v) -> bool:
    return isinstance(v, (str, int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def check_user_scheduler(sched, port, who: str, num_update) -> None:
    """One warning when the run's scheduler is a `UserRecord` whose state is
    not known to match ``port`` (tx's scheduler object, or None when tx holds
    none gradxform can see): the attributes both hold that differ (numbers
    and text), and those that could not be compared."""
    if not isinstance(sched, UserRecord):
        return
    attrs = {k: v for k, v in sched.attrs.items() if isinstance(k, str)}
    mine = vars(port) if port is not None and hasattr(port, "__dict__") else {}
    differ, unchecked = [], []
    for k, v in attrs.items():
        if k not in mine or not (_comparable(v) and _comparable(mine[k])):
            unchecked.append(k)
        elif isinstance(v, str) or isinstance(mine[k], str):
            if v != mine[k]:
                differ.append(f"{k}: tx {mine[k]!r} vs file {v!r}")
        elif not np.isclose(float(mine[k]), float(v), rtol=1e-6, atol=0):
            differ.append(f"{k}: tx {mine[k]!r} vs file {v!r}")
    if not differ and not unchecked:
        return
    step = f" from update {int(num_update) + 1} on" if isinstance(num_update, (int, np.integer)) else ""
    if port is None:
        warn_at_caller(f"{who}: the run's lr_scheduler is the user class {sched.cls_path!r}; its state "
                       f"({short(attrs)}) is not checked, as tx holds no scheduler object to compare with: "
                       f"make sure tx's schedule gives the run's learning rates{step}.")
        return
    said = f"its attributes differ from tx's scheduler's ({', '.join(differ)})" if differ else ""
    if unchecked:
        said += ("; " if said else "") + f"{', '.join(map(repr, unchecked[:8]))} not checked"
    warn_at_caller(f"{who}: the run's lr_scheduler is the user class {sched.cls_path!r}, read as a record: {said}. "
                   f"The next rates come from tx's {type(port).__name__}{step}: set those attributes on it to "
                   "continue the same run.")
