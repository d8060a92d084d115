"""MXNet's imperative ``Updater``: ``updater(index, grad, weight)`` with per-index state.

For scripts that drive an optimizer by hand (``mx.optimizer.get_updater``)
rather than through Gluon. Each index gets the functional optimizer's state
for its one weight; the updater keeps MXNet's shared ``num_update`` across
indices, so schedules see the same count MXNet's optimizer object does.

Per-parameter multipliers follow MXNet's ``_get_lr``/``_get_wd`` by index:
index ``i`` is the parameter ``param_idx2name[i]`` (a string index is its
own name), which gets MXNet's ``_weight``/``_gamma`` decay rule and the
``lr_mult``/``wd_mult`` entries keyed by that name or by ``i``.
``opt.set_lr_mult``/``opt.set_wd_mult`` (`MXNetTransformation`) replace the
multipliers; the next update of every index uses them, as MXNet's does.
"""
from __future__ import annotations

import io
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base import GradientTransformation, apply_updates
from .._hyper import set_hyper
from .._registry import create
from ..schedules.internal import take_host_schedule
from .._state_paths import find_states, map_states, replace_fields, state_paths, written_out
from ..pieces.internal import StepState, per_leaf_counts
from ._common import live_multipliers, updater_index

_MULTIPLIER_FIELDS = ("lr_mult", "wd_mult")

__all__ = ["Updater", "get_updater"]


def _num_updates(state) -> list[int]:
    return [int(s.count) for s in find_states(state, StepState)]


class Updater:
    """``updater(index, grad, weight)`` updates ``weight`` for parameter ``index``.

    A NumPy ``weight`` is updated in place (as MXNet mutates its NDArray); the
    new weight is also returned, which is the only way for a JAX array.
    """

    def __init__(self, optimizer: GradientTransformation, host_schedule=None):
        self.optimizer = optimizer
        self.host_schedule = host_schedule  # an untraceable schedule, evaluated here per update
        self.states: dict[Any, Any] = {}
        self.num_update = 0
        self._pending: dict[Any, list[np.ndarray]] = {}
        self._step = jax.jit(self._step_impl)
        self._live = live_multipliers(optimizer)  # what opt.set_lr_mult / set_wd_mult replace
        self._seen = self._live_version()
        self._templates: dict[Any, jax.ShapeDtypeStruct] = {}

    def _live_version(self) -> int:
        return 0 if self._live is None else int(self._live.get("version", 0))

    def _init(self, index, w):
        """Index ``index``'s state, its multipliers held even where 1: states of one shape then share
        one structure whatever their multipliers (the checks inside update compare by shape)."""
        with updater_index(index):  # MXNet parameter `index`: its multipliers by index and name
            return _multipliers_held(self.optimizer.init(w), w)

    def _refresh_multipliers(self) -> None:
        """After ``set_lr_mult``/``set_wd_mult``: each index's multipliers, resolved again (MXNet reads
        them at every update); the rest of its state stays."""
        for index, state in self.states.items():
            t = self._templates[index]
            self.states[index] = _multipliers_of(self._init(index, jnp.zeros(t.shape, t.dtype)), state)
        self._seen = self._live_version()

    def _step_impl(self, grad, state, weight):
        updates, state = self.optimizer.update(grad, state, weight)
        return apply_updates(weight, updates), state

    def __call__(self, index, grad, weight):
        if isinstance(index, bytes):
            index = index.decode()
        if isinstance(index, (list, tuple)):  # MXNet's aggregated form
            return [self(i, g, w) for i, g, w in zip(index, grad, weight)]
        w = jnp.asarray(weight)
        if self._live_version() != self._seen:
            self._refresh_multipliers()
        if index not in self.states:
            # its own count per index (MXNet's _index_update_count), apart from num_update
            state = per_leaf_counts(self._init(index, w), w)
            if index in self._pending:
                leaves = self._pending.pop(index)
                # states written before multipliers were held (None where 1) read back too
                with updater_index(index):
                    forms = [state, per_leaf_counts(self.optimizer.init(w), w)]
                treedef = next((t for t in map(jax.tree.structure, forms) if t.num_leaves == len(leaves)), None)
                if treedef is None:
                    raise ValueError(f"Updater.set_states: index {index!r} has {len(leaves)} state "
                                     f"arrays; this optimizer keeps {len(jax.tree.leaves(state))}.")
                # MXNet keeps multipliers on the optimizer, not in the states: the current ones apply
                state = _multipliers_of(state, _multipliers_held(
                    jax.tree.unflatten(treedef, [jnp.asarray(x) for x in leaves]), w))
            self.states[index] = state
            self._templates[index] = jax.ShapeDtypeStruct(w.shape, w.dtype)
        shared = self.num_update
        state = map_states(lambda _, s: s._replace(count=jnp.maximum(s.count, shared)),
                           self.states[index], StepState)
        if self.host_schedule is not None:
            # MXNet: _update_count(index), then lr_scheduler(num_update)
            counts = [int(c) for s in find_states(state, StepState) if s.leaf_counts is not None
                      for c in np.asarray(s.leaf_counts).reshape(-1)]
            num_update = max([shared] + [c + 1 for c in counts])
            state = set_hyper(state, learning_rate=self.host_schedule.lr_at(num_update))
        with updater_index(index):  # the checks inside update compare with init's state for this index
            new_w, state = self._step(jnp.asarray(grad, w.dtype), state, w)
        self.states[index] = state
        self.num_update = max([self.num_update] + _num_updates(state))
        if isinstance(weight, np.ndarray):
            weight[...] = np.asarray(new_w)
            return weight
        return new_w

    def get_states(self, dump_optimizer: bool = False) -> bytes:
        """The per-index states as bytes (an ``.npz`` of their arrays, no
        pickle). ``dump_optimizer`` is accepted for MXNet compatibility; the
        hyperparameters are part of each state already."""
        del dump_optimizer
        arrays = {"num_update": np.asarray(self.num_update)}
        for index, state in self.states.items():
            for j, leaf in enumerate(jax.tree.leaves(state)):
                arrays[f"{index!r}|{j}"] = np.asarray(leaf)
        buf = io.BytesIO()
        # numpy's stub lets **arrays fill allow_pickle (a bool); the keys here are index strings
        np.savez(buf, **arrays)  # pyright: ignore[reportArgumentType]
        return buf.getvalue()

    def set_states(self, states: bytes) -> None:
        """Restores what `get_states` returned; each index's arrays are put
        back when that index is next updated (its structure comes from the
        optimizer)."""
        import ast  # noqa: PLC0415
        with np.load(io.BytesIO(states), allow_pickle=False) as data:
            pending: dict[Any, dict[int, np.ndarray]] = {}
            num_update = int(data["num_update"])
            for key in data.files:
                if key == "num_update":
                    continue
                index_repr, j = key.rsplit("|", 1)
                pending.setdefault(ast.literal_eval(index_repr), {})[int(j)] = data[key]
        self.states, self._templates = {}, {}
        self._pending = {i: [d[j] for j in sorted(d)] for i, d in pending.items()}
        self.num_update = num_update


def _multipliers_held(state, w):
    def held(_, node):
        for f in _MULTIPLIER_FIELDS:
            if f in getattr(type(node), "optional_fields", {}):
                node = written_out(node, f, w)
        return node
    return map_states(held, state)


def _multipliers_of(fresh, state):
    """``state`` with the multipliers of ``fresh`` (an init of the same index)."""
    edits = {path: {f: getattr(node, f) for f in _MULTIPLIER_FIELDS if f in node._fields}
             for path, node in state_paths(fresh) if any(f in getattr(node, "_fields", ()) for f in _MULTIPLIER_FIELDS)}
    return replace_fields(state, edits)


def get_updater(optimizer, optimizer_params: dict | None = None) -> Updater:
    """Returns an `Updater` for ``optimizer`` (``mx.optimizer.get_updater``):
    a transformation, or a name and its keywords (as `gradxform.create`).
    Given by name, an ``lr_scheduler`` that JAX cannot trace (a Python class
    with control flow or state, as MXNet's and GluonCV's) is evaluated here on
    the host at each update's ``num_update`` and fed in as the learning rate."""
    if isinstance(optimizer, str):
        params, host = take_host_schedule(optimizer_params)
        return Updater(create(optimizer, **params), host)
    if optimizer_params:
        raise ValueError("get_updater(optimizer_params=...): only with an optimizer name.")
    return Updater(optimizer)
