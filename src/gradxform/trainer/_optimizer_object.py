"""``trainer.optimizer``: MXNet's ``Optimizer`` object, bound to a `gradxform.Trainer` (issue 38).

Gluon scripts read and change their optimizer between steps
(``trainer.optimizer.set_learning_rate(trainer.optimizer.learning_rate * 0.1)``,
``trainer._optimizer.wd``, ``trainer.optimizer.num_update``). `MXNetOptimizer` is
that object: its getters read the Trainer's state and its setters write into it
(hyperparameters are state: no recompile). It is still the ``(init, update)``
transformation the Trainer was given or built (a tuple of those two functions,
so ``tx.init``/``tx.update``, unpacking and optax wrappers keep working;
``.tx`` is the transformation as given).

Every method and attribute of MXNet 1.9.1's ``Optimizer`` and its registered
subclasses (recorded in tests/data/surface/objects/mxnet.json) is here: read as
MXNet reads it, or raising at once with what to type instead. Where MXNet
ignores a call inside Gluon (``set_lr_mult``/``set_wd_mult``: the Trainer gives
its optimizer ``param_dict``, whose ``Parameter.lr_mult`` wins), this raises
rather than change the numbers MXNet would train with.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import numpy as np
import optax

from .._fused import FlatTree, flatten_state
from .._group_values import group_by_value
from .._hyper import get_hyper, hyper_names
from .._registry import registered_factory
from ..mxnet._create import create as mxnet_create, register as mxnet_register
from .._state_paths import find_states, replace_fields, state_paths
from ..pieces.internal import StepState, host_done

if TYPE_CHECKING:
    from ._trainer import Trainer

__all__ = ["MXNetOptimizer"]

SCHEDULER_DEFINED = ("LRScheduler of the optimizer has already been defined. Note that set_learning_rate can "
                     "mutate the value of the learning rate of the optimizer only when the LRScheduler of the "
                     "optimizer is undefined.")  # MXNet 1.9.1 optimizer.py, word for word
# MXNet attributes that are internal machinery there, and what to use here.
_ANSWERS = {
    "create_state": "gradxform keeps the whole optimizer state in the Trainer: read trainer.state "
                    "(or call trainer.optimizer.init(params) for a fresh one) instead.",
    "create_state_multi_precision": "pass multi_precision=True in optimizer_params; the state (float32 master "
                                    "weights included) is trainer.state; call trainer.optimizer.init(params) "
                                    "for a fresh one instead.",
    "update_multi_precision": "call trainer.step(grads, batch_size) (or trainer.update) instead; for "
                              "index-by-index updates use gradxform.mxnet.get_updater(name, optimizer_params).",
    "_update_count": "the Trainer counts updates itself at every step; read trainer.optimizer.num_update or "
                     "trainer.optimizer._index_update_count instead.",
    "sym_info": "gradxform has no Symbol: per-parameter multipliers are trainer.optimizer.param_dict[i].lr_mult "
                "(or optimizer_params={'lr_mult': {...}}) instead.",
}
_NOT_SET = object()
_UNSET_FIELDS = {"_trainer": lambda self: None, "_options": lambda self: {}, "_name": lambda self: None,
                 "tx": lambda self: optax.GradientTransformationExtraArgs(self[0], self[1])}


def install_state(t, params, state) -> None:
    """Puts a per-leaf ``state`` (one copy) into Trainer ``t`` as its layout keeps it: in the fused
    layout the groups follow the new multipliers, as after ``load_states`` (its programs retrace once)."""
    residual = t._place.per_device(t._leaf_form()[2]) if t._compression else []
    if t._fused:
        state = flatten_state(t._leaf_tx, state, params, max_leaf_size=t._max_leaf)
        layout = state.layout
        params = FlatTree(layout.ravel_concrete(params), layout)
        residual = [np.concatenate([np.reshape(residual[i], (t._n, -1)) for i in group], axis=1)
                    for group in layout.groups] if t._compression else []
    t._params, t._state = t._place.put(params), t._put_state(state)
    if t._compression:
        t._residual = t._place.put_per_device(residual)


class _Param:
    """``param_dict[i]``: a Gluon ``Parameter``'s name and multipliers, read from
    and written into the Trainer's state (setting ``lr_mult`` is Gluon's
    ``param.lr_mult = v``, which MXNet's optimizer reads at every update)."""

    def __init__(self, owner: "MXNetOptimizer", index: int):
        self._owner, self._index = owner, index
        self.name = owner._t("optimizer.param_dict")._names[index]

    def __repr__(self) -> str:
        return f"Parameter {self.name} (lr_mult={self.lr_mult}, wd_mult={self.wd_mult})"

    lr_mult = property(lambda self: self._owner._multiplier("lr_mult")[self._index],
                       lambda self, v: self._owner._set_multiplier("lr_mult", self._index, v))
    wd_mult = property(lambda self: self._owner._multiplier("wd_mult")[self._index],
                       lambda self, v: self._owner._set_multiplier("wd_mult", self._index, v))


class _ParamDict(dict):
    """Gluon's ``{index: Parameter}``; a parameter name also finds its entry."""

    def __init__(self, owner, items):
        super().__init__(items)
        self._owner = owner

    def __missing__(self, key):
        return self[self._owner._index_of(key)]


class MXNetOptimizer(optax.GradientTransformationExtraArgs):
    """MXNet's ``Optimizer`` face of a Trainer's transformation (see the module docstring).

    ``learning_rate`` is the schedule's value at ``num_update`` when an
    ``lr_scheduler`` is set (MXNet's property), else ``lr``. ``set_learning_rate``
    raises MXNet's UserWarning under a scheduler. ``param_dict[i]`` (an index in
    the Trainer's parameter order, or a parameter name) has Gluon's settable
    ``lr_mult``/``wd_mult``. Hyperparameters held in the state (``wd``,
    ``beta1``, ``epsilon``, ...) read and set by name; options fixed when the
    optimizer was built (``momentum`` of 'sgd', ``lazy_update``, ...) read as
    given (or the factory's default) and raise when set. Unbound (a copy that
    ``jax.tree.map`` rebuilt), it is only the transformation.
    """

    # set by __new__ (object.__setattr__), or by __getattr__ on a copy that _make/_replace built
    _trainer: Trainer | None
    tx: optax.GradientTransformationExtraArgs
    _options: dict[str, Any]
    _name: str | None

    def __new__(cls, init, update, trainer=None, tx=None, options=None, name=None):
        self = super().__new__(cls, init, update)
        object.__setattr__(self, "_trainer", trainer)
        object.__setattr__(self, "tx", tx if tx is not None else optax.GradientTransformationExtraArgs(init, update))
        object.__setattr__(self, "_options", dict(options or {}))
        object.__setattr__(self, "_name", name)
        return self

    @classmethod
    def bound(cls, tx, trainer, options, name) -> "MXNetOptimizer":
        """``tx`` as the object of ``trainer`` (built by ``name`` with ``options``, or given: None)."""
        return cls(tx.init, tx.update, trainer, tx, options, name)

    # -- what the Trainer holds ------------------------------------------------
    def _t(self, what: str) -> Trainer:
        if self._trainer is None:
            raise AttributeError(f"{what}: this optimizer object is not bound to a Trainer (a copy "
                                 "jax.tree.map rebuilt); use trainer.optimizer instead.")
        return self._trainer

    def _hyper(self):
        return self._t("optimizer")._hyper_view()

    def _scheduled(self) -> bool:
        t = self._t("optimizer")
        if t._host_lr is not None:
            return True
        state = self._hyper()
        return "scheduled" in hyper_names(state) and bool(get_hyper(state, "scheduled"))

    # -- MXNet's learning rate -------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The schedule's value at ``num_update`` with a scheduler, else ``lr`` (MXNet's property)."""
        return self._t("optimizer.learning_rate").learning_rate

    @property
    def lr(self) -> float:
        """The base learning rate (MXNet's ``optimizer.lr``)."""
        return float(get_hyper(self._hyper(), "learning_rate"))

    @lr.setter
    def lr(self, value) -> None:
        if self._scheduled():
            raise AttributeError("optimizer.lr = ...: this optimizer's learning rate comes from its lr_scheduler; "
                                 "MXNet would store lr and keep using the scheduler, gradxform's schedule may read "
                                 "lr as its base: set the scheduler's base_lr when you build it instead.")
        self.set_learning_rate(value)

    def set_learning_rate(self, lr) -> None:
        """MXNet's ``set_learning_rate``: UserWarning (raised) under an lr_scheduler."""
        t = self._t("optimizer.set_learning_rate")
        if self._scheduled():
            raise UserWarning(SCHEDULER_DEFINED)
        t.set_learning_rate(lr)

    def set_lr_scale(self, args_lrscale):
        raise DeprecationWarning("Use set_lr_mult instead.")  # MXNet 1.9.1

    @property
    def lr_scheduler(self):
        """The ``lr_scheduler`` given in optimizer_params (or a given optimizer's), else None."""
        found = self._options.get("lr_scheduler")
        return found if found is not None else getattr(self.tx, "lr_scheduler", None)

    # -- counts ------------------------------------------------------------------
    @property
    def num_update(self) -> int:
        """Updates done (MXNet's ``num_update``: the largest per-parameter count)."""
        return host_done(self._hyper())

    @property
    def begin_num_update(self) -> int:
        return int(self._options.get("begin_num_update", 0))

    @property
    def _index_update_count(self) -> dict:
        """``{index: count}`` in the Trainer's parameter order (MXNet's per-index counts)."""
        step = find_states(self._t("optimizer._index_update_count").state, StepState)
        if not step:
            return {}
        s = step[0]
        counts = [s.count] * len(self._t("optimizer._index_update_count")._names) if s.leaf_counts is None else list(np.asarray(s.leaf_counts))
        return {i: int(c) for i, c in enumerate(counts)}

    @property
    def _all_index_update_counts(self) -> dict:
        return {0: self._index_update_count}

    def _get_lr(self, index: int) -> float:
        """MXNet's ``_get_lr(index)``: ``learning_rate * lr_mult`` of parameter ``index``."""
        return self.learning_rate * self._multiplier("lr_mult")[self._index_of(index)]

    def _get_wd(self, index: int) -> float:
        return self.wd * self._multiplier("wd_mult")[self._index_of(index)]

    # -- per-parameter multipliers ---------------------------------------------------
    @property
    def param_dict(self) -> dict:
        """``{index: parameter}`` (Gluon's), each with settable ``lr_mult``/``wd_mult``."""
        return _ParamDict(self, {i: _Param(self, i) for i in range(len(self._t("optimizer.param_dict")._names))})

    @property
    def idx2name(self) -> dict:
        """``{index: name}`` of the Trainer's parameters (Gluon leaves MXNet's empty)."""
        return dict(enumerate(self._t("optimizer.idx2name")._names))

    @property
    def lr_mult(self) -> dict:
        """``{name: multiplier}`` for every parameter whose ``lr_mult`` is not 1."""
        return {n: m for n, m in zip(self._t("optimizer.lr_mult")._names, self._multiplier("lr_mult")) if m != 1.0}

    @property
    def wd_mult(self) -> dict:
        return {n: m for n, m in zip(self._t("optimizer.wd_mult")._names, self._multiplier("wd_mult")) if m != 1.0}

    def set_lr_mult(self, args_lr_mult):
        self._gluon_ignores("set_lr_mult", "lr_mult", args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._gluon_ignores("set_wd_mult", "wd_mult", args_wd_mult)

    def _gluon_ignores(self, method, field, args):
        example = next(iter(dict(args).items()), ("w", 0.0)) if isinstance(args, dict) else ("w", 0.0)
        raise UserWarning(
            f"trainer.optimizer.{method}({args!r}): in Gluon this changes nothing: the Trainer gives its optimizer "
            f"param_dict, and each Parameter's {field} wins over the optimizer's (MXNet 1.9.1 _get_lrs/_get_wds), "
            f"so MXNet trains on with the old multipliers. To train as MXNet does, delete the call. To change the "
            f"multiplier as Gluon's `param.{field} = v` does, type "
            f"trainer.optimizer.param_dict[{example[0]!r}].{field} = {example[1]!r} instead.")

    def _index_of(self, key) -> int:
        names = self._t("optimizer.param_dict")._names
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= key < len(names):
            return int(key)
        if isinstance(key, str) and key in names:
            return names.index(key)
        raise KeyError(f"optimizer.param_dict[{key!r}]: expected an index in 0..{len(names) - 1} or a parameter "
                       f"name ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}).")

    def _multiplier(self, field: str) -> list[float]:
        t = self._t(f"optimizer.{field}")
        state, n = t.state, len(t._names)
        nodes = [node for _, node in state_paths(state) if field in getattr(node, "_fields", ())]
        if not nodes:
            return [1.0] * n
        tree = getattr(nodes[0], field)
        return [1.0] * n if tree is None else [float(x) for x in np.asarray(tree).reshape(-1)]

    def _set_multiplier(self, field: str, index: int, value) -> None:
        t = self._t(f"optimizer.param_dict[...].{field}")
        index = self._index_of(index)
        if isinstance(value, bool) or not np.isfinite(np.float32(value)) or value < 0:
            raise ValueError(f"param_dict[{index}].{field} = {value!r}: expected a finite number >= 0.")
        params, state, _ = t._leaf_form()
        state = t._place.one(state)
        found = [(p, node) for p, node in state_paths(state) if field in getattr(node, "_fields", ())]
        if not found:
            raise ValueError(f"param_dict[{index}].{field}: this optimizer ({self._name or 'given'}) has no "
                             f"{field} (no {'weight decay' if field == 'wd_mult' else 'learning rate'} per "
                             "parameter); nothing to set.")
        template = t._place.one(params)
        edits = {}
        for path, node in found:
            old = getattr(node, field)
            mults = np.ones(len(t._names), np.float32) if old is None else np.array(old, np.float32).reshape(-1)
            mults[index] = np.float32(value)
            edits[path] = {field: group_by_value(mults)}  # a new group when no other leaf has this value
        install_state(t, template, replace_fields(state, edits))

    # -- hyperparameters and options by name (wd, beta1, momentum, ...) ----------------
    def __getattr__(self, name: str) -> Any:  # hyperparameters and options, by name
        if name in _UNSET_FIELDS:  # a copy made by _make/_replace: only the transformation
            return _UNSET_FIELDS[name](self)
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _ANSWERS:
            raise AttributeError(f"optimizer.{name}: {_ANSWERS[name]}")
        trainer = object.__getattribute__(self, "_trainer")
        if trainer is not None and name in hyper_names(state := trainer._hyper_view()):
            return float(get_hyper(state, name))
        options = object.__getattribute__(self, "_options")
        if name in options:
            return options[name]
        default = self._default(name)
        if default is not _NOT_SET:
            return default
        raise AttributeError(f"optimizer.{name}: {self._name or 'this optimizer'} has no option or hyperparameter "
                             f"{name!r}; gradxform.hyper_names(trainer.state) lists the ones held in the state "
                             "(read them as trainer.optimizer.<name>) instead.")

    def __setattr__(self, name: str, value) -> None:
        if isinstance(getattr(type(self), name, None), property):
            return object.__setattr__(self, name, value)
        trainer = self._t(f"optimizer.{name} = ...")
        if name in hyper_names(trainer._hyper_view()) and name not in ("learning_rate", "current_lr", "scheduled",
                                                                        "rescale_grad"):
            trainer._set_hyper(**{name: value})
            return None
        if name == "rescale_grad":
            raise AttributeError("optimizer.rescale_grad = ...: Gluon's Trainer overwrites it at every step "
                                 "(trainer._scale / batch_size); pass rescale_grad in optimizer_params or change "
                                 "the batch_size given to trainer.step instead.")
        raise AttributeError(f"optimizer.{name} = {value!r}: {name!r} is not a hyperparameter of "
                             f"{self._name or 'this optimizer'} held in its state (those are "
                             f"{[h for h in hyper_names(trainer._hyper_view()) if h not in ('current_lr', 'scheduled')]}); "
                             f"it is fixed when the optimizer is built: pass optimizer_params={{{name!r}: {value!r}}} "
                             "to gradxform.Trainer instead.")

    def _default(self, name: str):
        if not self._name:
            return _NOT_SET
        try:
            param = inspect.signature(registered_factory(self._name)).parameters.get(name)
        except (ValueError, TypeError, LookupError):
            return _NOT_SET
        if param is None or param.default is inspect.Parameter.empty or param.kind is param.VAR_KEYWORD:
            return _NOT_SET
        return param.default

    @property
    def allow_np_array(self) -> bool:
        return False  # MXNet's flag for mx.np arrays; gradxform's arrays are JAX's

    # -- MXNet's update(index, weight, grad, state) and the registry ----------------------
    @staticmethod
    def create_optimizer(name, **kwargs):
        """``Optimizer.create_optimizer``: `gradxform.mxnet.create`."""
        return mxnet_create(name, **kwargs)

    @staticmethod
    def register(klass):
        """``Optimizer.register``: `gradxform.mxnet.register`."""
        return mxnet_register(klass)

    def __repr__(self) -> str:
        return f"MXNetOptimizer({self._name or self.tx!r}{', bound' if self._trainer is not None else ''})"
