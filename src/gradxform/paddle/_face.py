"""Paddle's stateful optimizer object (``paddle.optimizer.Optimizer``), as a
face over the functional pair (issue 38 item 2).

``gradxform.paddle.AdamW(learning_rate=..., parameters=<arrays>)`` returns an
`Optimizer` that holds the parameters and the state and steps them in place,
so a Paddle training loop runs with its imports changed and its
``loss.backward()`` written the JAX way::

    sched = gradxform.paddle.lr.LinearWarmup(
        gradxform.paddle.lr.CosineAnnealingDecay(1e-3, T_max=1000), 100, 0.0, 1e-3)
    opt = gradxform.paddle.AdamW(learning_rate=sched, parameters=params)
    for x, y in loader:
        grads = jax.grad(loss_fn)(opt.parameters, x, y)   # loss.backward()
        opt.step(grads)                                   # opt.step()
        opt.clear_grad()                                  # a no-op, kept for the port
        if isinstance(opt._learning_rate, gradxform.paddle.lr.LRScheduler):
            opt._learning_rate.step()
    state = opt.state_dict()       # Paddle's layout: '<param>_moment1_0', ..., 'LR_Scheduler'
    opt.set_state_dict(state)      # or a .pdopt saved by Paddle, through gradxform.migrate
    opt.set_state_dict("x.pdopt", names={"fc1/weight": "linear_0.w_0", ...})  # Paddle's names differ

Arrays bind (``parameters=`` a pytree of arrays, a list of ``(name, array)``,
an ``nnx.Module`` or ``nnx.State``, or group dicts whose ``'params'`` are such
arrays); names and predicates still select, and give the pure pair, as before.

The face only wraps: ``opt.tx`` is the pure ``(init, update)`` pair
(`PaddleOptimizer`), which a user's own jit/scan keeps using with explicit
state; ``opt.step`` is ``tx.update`` + `gradxform.apply_updates` under one
``jax.jit`` that donates the held parameters and state (read ``opt.parameters``
again after a step: arrays read before it were given to it). The numbers are
the pair's, bit for bit.

Paddle reference: ``paddle/optimizer/optimizer.py`` (3.3.1): ``step``,
``clear_grad``, ``get_lr``, ``set_lr``, ``state_dict`` (accumulators by their
variable names, ``master_weights``, ``LR_Scheduler``), ``set_state_dict``
(the scheduler's state first, then the accumulators).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._base import apply_updates
from .._hyper import READ_ONLY, get_hyper, hyper_names, set_hyper
from .._state_paths import find_states
from ..migrate import _paddle as migrate_paddle  # a module: gradxform.migrate may be importing this package
from ..migrate import _pickle as migrate_pickle
from ..pieces.internal import StepState, host_done
from ._bind import Bound, nnx_module
from ._plateau import PlateauState

__all__ = ["Optimizer"]

_JAX_GRADS = ("JAX arrays carry no .grad: compute the gradients and pass them, "
              "grads = jax.grad(loss_fn)(opt.parameters, *batch); opt.step(grads)")


class _Group(dict):
    """One of ``opt._param_groups``: read it; writing it would not reach the update."""

    def __setitem__(self, key, value):
        raise TypeError(f"opt._param_groups[...][{key!r}] = ...: gradxform fixes each group's options when the "
                        "optimizer is built (they are in its compiled update); build the optimizer with the "
                        "group's new value, or use opt.set_lr(value) for the learning rate of every group.")


def _not_here(what: str, instead: str):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"optimizer.{what}: {instead}")
    method.__name__ = what
    method.__doc__ = f"Paddle's ``{what}``: not meaningful here; raises saying what to write instead."
    return method


# public attributes of Paddle's optimizer instances that have no counterpart here
_NO_ATTRIBUTE = {
    "helper": "Paddle's LayerHelper builds static-graph ops; there are none in JAX.",
    "fusion_storage": "Paddle's fused optimizer storage: use gradxform.fused(tx) for fused buffers.",
    "fused_buffer_version": "Paddle's fused optimizer storage: use gradxform.fused(tx) for fused buffers.",
    "fused_states_buffer": "Paddle's fused optimizer storage: use gradxform.fused(tx) for fused buffers.",
    "fused_states_buffer_ipc_meta": "Paddle's fused optimizer storage: use gradxform.fused(tx).",
    "fused_states_accumulators_meta": "Paddle's fused optimizer storage: read opt.state_dict() instead.",
    "fused_states_master_weights_meta": "Paddle's fused optimizer storage: read opt.state_dict() instead.",
    "merged_model_params": "Paddle's fused model parameters: read opt.parameters instead.",
    "initial_accumulator_value": "not kept on the object: it is the value you passed to Adagrad(...).",
    "always_adapt": "not kept on the object: it is the value you passed to Lamb(...).",
}


_HELD = ("tx", "_options", "_module", "params", "state", "_step", "_stepped")  # what the object itself holds


class Optimizer:
    """Paddle's ``paddle.optimizer.Optimizer`` as an object holding the
    parameters and the state (what ``gradxform.paddle.<Class>(...,
    parameters=<arrays>)`` returns; also the class to annotate with or test
    ``isinstance`` against, as ``paddle.optimizer.Optimizer``).

    ``step(grads)`` applies one update (Paddle's ``opt.step()``; the
    gradients are an argument, as JAX arrays have no ``.grad``);
    ``clear_grad()`` does nothing (there is no ``.grad`` to clear; kept so
    ports run); ``get_lr()`` is the rate the next step applies (under a
    scheduler, ``scheduler()`` now: between ``opt.step()`` and
    ``sched.step()`` the rate just applied, as Paddle); ``set_lr``,
    ``state_dict``, ``set_state_dict`` as Paddle's; ``_learning_rate`` the
    scheduler object or the number, ``_parameter_list`` the parameters,
    ``_param_groups`` the groups (read-only), ``_accumulators`` and
    ``_master_weights`` Paddle's views of the state. ``params`` /
    ``parameters`` the current parameters, ``state`` the state, ``tx`` the
    pure pair (``init``/``update`` delegate to it)."""

    def __init__(self, tx, bound: Bound, options):
        self.tx = tx
        self._options = options
        self._module = bound.module
        # the held arrays are the face's own (its step donates them), not the caller's
        self.params = jax.tree.map(jnp.array, bound.params)
        self.state = tx.init(self.params)
        self._step = jax.jit(_step_fn(tx.update), donate_argnums=(0, 1))

    # -- the pure pair ------------------------------------------------------------
    @property
    def init(self):
        return self.tx.init

    @property
    def update(self):
        return self.tx.update

    @property
    def parameters(self):
        """The current parameters (the tree ``parameters=`` gave, stepped)."""
        return self.params

    # -- Paddle's methods ------------------------------------------------------------
    def step(self, grads=None, **extra_args):
        """One update: ``params, state <- apply(tx.update(grads, state, params))``,
        jitted once (rates come from the state or the held scheduler, so a
        new rate does not retrace). ``extra_args``: ``loss=`` for a
        `PaddleReduceOnPlateau` learning rate. With an ``nnx.Module`` bound, its
        parameters are updated in place (as ``nnx.Optimizer.update``)."""
        if grads is None:
            raise TypeError(f"optimizer.step(): {_JAX_GRADS}.")
        want, got = jax.tree.structure(self.params), jax.tree.structure(grads)
        if want != got:
            raise ValueError(f"optimizer.step(grads): grads must have the structure of opt.parameters ({want}); "
                             f"got {got}. Differentiate with respect to opt.parameters.")
        if self._module is not None:
            self._read_module()
        held = getattr(self._options, "schedule", None)
        if held is not None and getattr(held, "reads_host", False) and self.state is not self.__dict__.get("_stepped"):
            # a state this object's last step did not make (a resumed one): a restarted scheduler is refused
            # here, on the host, before the step takes (donates) the arrays; the read of its count syncs,
            # so only then
            held.check_restart(host_done(self.state))
        self.params, self.state = self._step(self.params, self.state, grads, extra_args)
        self._stepped = self.state
        if self._module is not None:
            nnx = nnx_module()
            assert nnx is not None  # a bound module: flax.nnx is imported
            nnx.update(self._module, self.params)

    def _read_module(self) -> None:
        """The bound module's parameters are the truth: weights a script loaded into
        it after building the optimizer (``model.set_state_dict(...)``, as Paddle
        scripts resume) are the ones stepped, not the copy taken at construction.
        Arrays the last step wrote back are the face's own; only others are copied
        (the step donates what it holds)."""
        nnx = nnx_module()
        assert nnx is not None  # a bound module: flax.nnx is imported
        current = nnx.state(self._module, nnx.Param)
        if jax.tree.structure(current) != jax.tree.structure(self.params):
            raise ValueError("optimizer.step(): the bound nnx module's parameters no longer have the structure "
                             "the optimizer was built with; build the optimizer again from the module.")
        self.params = jax.tree.map(lambda mine, now: mine if now is mine else jnp.array(now), self.params, current)

    def clear_grad(self, set_to_zero: bool = True) -> None:
        """Paddle's ``clear_grad``: nothing to do (JAX gradients are values, not
        ``.grad`` slots); kept so a ported loop runs unchanged."""
        del set_to_zero

    zero_grad = clear_grad
    clear_gradients = clear_grad

    def get_lr(self) -> float:
        """Paddle's ``get_lr()``: the rate the next ``step`` applies (the
        scheduler's ``scheduler()`` now, the number, or the schedule's value);
        without the group ratios."""
        return self.tx.get_lr(self.state)

    def set_lr(self, value: float) -> None:
        """Paddle's ``set_lr``: a new rate for the next steps (no retrace); a
        RuntimeError under a scheduler, a TypeError for a non-number, as Paddle."""
        self.state = self.tx.set_lr(self.state, value)

    def state_dict(self) -> dict:
        """Paddle's ``opt.state_dict()``: ``{'<param>_<accumulator>_0': array,
        'master_weights': {...}, 'LR_Scheduler': scheduler.state_dict()}``
        (`gradxform.migrate.to_paddle_state_dict`; a parameter's Paddle name is
        its gradxform name with '/' as '.'). Host numpy copies."""
        return migrate_paddle.to_paddle_state_dict(self.state, self.params, self._scheduler_state())

    def set_state_dict(self, state_dict, names=None) -> None:
        """Paddle's ``opt.set_state_dict(sd)``: the accumulators (and master
        weights) of ``sd`` and, under a scheduler, ``sd['LR_Scheduler']``
        into the scheduler object, so the schedule continues where it stopped
        (a `gradxform.paddle.lr.ReduceOnPlateau` too: its best metric and
        counters). ``sd`` is this layout from `state_dict` or a ``.pdopt``
        Paddle saved (a dict, a path; `gradxform.migrate.from_paddle_state_dict`).
        ``names``: ``{gradxform name: Paddle name}`` when the file names the
        parameters otherwise (Paddle's automatic ``linear_0.w_0`` for a
        port's ``fc1/weight``; a gradxform addition, Paddle's method has no
        such argument). All or nothing: a `MigrateError` naming the key
        leaves the optimizer and its scheduler as they were."""
        MigrateError = migrate_pickle.MigrateError  # noqa: N806 (a class)
        sd = migrate_paddle.read_paddle_state_dict(state_dict)
        sched = self.tx.lr_scheduler
        lr_state = sd.get("LR_Scheduler")
        if sched is not None and lr_state is None and type(sched).__name__ != "LambdaDecay":
            raise MigrateError("set_state_dict: the optimizer's learning rate is an LRScheduler and the state has "
                               "no 'LR_Scheduler' entry (Paddle: LR_Scheduler state must be included in the state "
                               "dict except LambdaDecay); save it with opt.state_dict().")
        epoch = lr_state.get("last_epoch") if isinstance(lr_state, dict) else None
        if sched is not None and isinstance(epoch, float):
            # a subclass counting in fractions of an epoch (PaddleVideo's CustomWarmupCosineDecay): the
            # position is the scheduler object's alone, not a step count of the state
            sd = {k: v for k, v in sd.items() if k != "LR_Scheduler"}
        new_state = migrate_paddle.from_paddle_state_dict(sd, self.params, self.tx, names, state=self.state)
        if sched is not None and lr_state:
            before = sched.state_dict()
            try:
                sched.set_state_dict(lr_state)
            except Exception as e:
                sched.set_state_dict(before)
                raise MigrateError(f"set_state_dict: 'LR_Scheduler' does not fit the optimizer's scheduler "
                                   f"{type(sched).__name__}: {e}") from e
        self.state = new_state

    load_state_dict = set_state_dict  # Paddle's alias

    def get_opti_var_name_list(self) -> list:
        """The accumulator keys of `state_dict` (Paddle's ``_opti_name_list``)."""
        return [k for k in self.state_dict() if k not in ("master_weights", "LR_Scheduler")]

    minimize = _not_here("minimize(loss)", "JAX has no loss tensor to differentiate from; write grads = "
                         "jax.grad(loss_fn)(opt.parameters, *batch); opt.step(grads).")
    backward = _not_here("backward(loss)", "JAX has no loss tensor; write grads = jax.grad(loss_fn)"
                         "(opt.parameters, *batch), then opt.step(grads).")
    apply_gradients = _not_here("apply_gradients(params_grads)", "pass the gradients as one tree shaped like "
                                "opt.parameters: opt.step(grads).")
    append_regularization_ops = _not_here("append_regularization_ops", "weight_decay= (a float, L1Decay, "
                                          "L2Decay) is part of the optimizer's update; there are no ops to add.")
    set_lr_scheduler = _not_here("set_lr_scheduler(scheduler)", "the rate's kind is fixed in the compiled "
                                 "update: build the optimizer with learning_rate=scheduler (gradxform.paddle.lr).")
    need_refuse = _not_here("need_refuse", "Paddle's fused-storage bookkeeping has no counterpart here.")
    reset_need_refuse = _not_here("reset_need_refuse", "Paddle's fused-storage bookkeeping has no counterpart.")
    set_merged_model_params = _not_here("set_merged_model_params", "Paddle's fused model parameters: set "
                                        "opt.params = tree instead.")
    use_fusion_storage = _not_here("use_fusion_storage", "for fused buffers wrap the pure pair: "
                                   "gradxform.fused(opt.tx).")
    sharded_state_dict = _not_here("sharded_state_dict", "Paddle's distributed checkpoint: use "
                                   "opt.state_dict() (shard the arrays with jax.sharding).")

    # -- Paddle's attributes -------------------------------------------------------------
    @property
    def _learning_rate(self):
        """The scheduler object (``gradxform.paddle.lr``), the gradxform schedule
        or `PaddleReduceOnPlateau` given as ``learning_rate``, else the number now
        (``set_lr`` changes it), as Paddle's ``optimizer._learning_rate``."""
        if self.tx.lr_scheduler is not None:
            return self.tx.lr_scheduler
        if self._options.plateau is not None:
            return self._options.plateau
        if self.tx.schedule is not None:
            return self.tx.schedule
        return self.get_lr()

    @_learning_rate.setter
    def _learning_rate(self, value):
        """``opt._learning_rate = 0.01``: a number is `set_lr` (a RuntimeError under
        a scheduler, as Paddle's ``set_lr``); a scheduler cannot replace the
        rate's kind in the compiled update."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("optimizer._learning_rate = <scheduler>: the kind of rate is fixed in the compiled "
                            "update; build the optimizer with learning_rate=scheduler (gradxform.paddle.lr).")
        self.set_lr(float(value))

    @property
    def _parameter_list(self) -> list:
        """The parameters as a list in leaf order (groups: Paddle's list of group dicts)."""
        if len(self._options.groups) > 1 or self._options.groups[0].select is not None:
            return self._param_groups
        return jax.tree.leaves(self.params)

    @property
    def _param_groups(self) -> list:
        """Each group as Paddle's ``_param_groups`` entry (read-only): ``params``
        (its arrays), ``learning_rate`` (the ratio), ``weight_decay``, ``grad_clip``."""
        slots = np.asarray(self._options.slots(self.params))
        leaves = jax.tree.leaves(self.params)
        return [_Group(params=[p for p, s in zip(leaves, slots) if s == g.index], learning_rate=g.lr_ratio,
                       weight_decay=g.reg, grad_clip=g.clip, **g.extra) for g in self._options.groups]

    @property
    def _accumulators(self) -> dict:
        """``{accumulator: {paddle_name: array}}`` (copies), as Paddle's."""
        return migrate_paddle.paddle_accumulators(self.state, self.params)[0]

    @property
    def _master_weights(self) -> dict:
        """``{paddle_name: float32 array}`` for float16/bfloat16 leaves under multi_precision."""
        return migrate_paddle.paddle_accumulators(self.state, self.params)[1]

    @property
    def _grad_clip(self):
        return self._options.grad_clip

    @_grad_clip.setter
    def _grad_clip(self, value):
        raise AttributeError("optimizer._grad_clip = ...: the clip is part of the compiled update; pass "
                             "grad_clip= when building the optimizer.")

    @property
    def _multi_precision(self) -> bool:
        return self._options.multi_precision

    @property
    def regularization(self):
        """The optimizer's ``weight_decay`` regularizer (Paddle's ``regularization``)."""
        return self._options.weight_decay

    @property
    def type(self) -> str:
        """Paddle's op type: the optimizer's name (``'adamw'``)."""
        return self._options.owner.rpartition(".")[2]

    _name = None  # Paddle's name= (only a prefix of accumulator names there)

    def _hyper_attribute(self, name: str) -> str | None:
        """The hyperparameter Paddle keeps as ``optimizer._<name>`` (``_beta1``,
        ``_epsilon``, AdamW's ``_weight_decay``, ``_momentum``, ...), when the
        state holds it; None otherwise."""
        state = self.__dict__.get("state")
        if state is None or not name.startswith("_") or name[1:] in READ_ONLY + ("learning_rate",):
            return None
        return name[1:] if name[1:] in hyper_names(state) else None

    def __getattr__(self, name):
        if name in _NO_ATTRIBUTE:
            raise AttributeError(f"optimizer.{name}: {_NO_ATTRIBUTE[name]}")
        hyper = self._hyper_attribute(name)
        if hyper is not None:  # Paddle's self._beta1: read from the state, where the update reads it
            return float(get_hyper(self.state, hyper))
        if name.startswith("_") and "state" in self.__dict__:
            raise AttributeError(f"optimizer.{name}: not kept on this object. {self._settable()}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        # Paddle's update reads self._beta1 etc. at every step, so scripts assign them: here they are
        # hyperparameters in the state (no recompile); any other private name would be set and never read
        if name == "tx" and "tx" in self.__dict__:  # its state, step and parameters were made by the first
            raise AttributeError("optimizer.tx = ...: the optimizer is fixed when built (its state was made by it). "
                                 "To wrap it (gradxform.pieces.dynamic_loss_scale, skip_nonfinite), build the pure "
                                 "pair without parameters=, wrap that, and step it: updates, state = "
                                 "tx.update(grads, state, params).")
        if name in _HELD or not name.startswith("_") or hasattr(type(self), name):
            object.__setattr__(self, name, value)
            return
        hyper = self._hyper_attribute(name)
        if hyper is None:
            raise AttributeError(f"optimizer.{name} = ...: this optimizer's update would never read it. "
                                 f"{self._settable()}")
        state = set_hyper(self.state, **{hyper: value})
        if host_done(state) == 0:
            # Paddle creates its beta1_pow_acc at the first step, filled with self._beta1 then
            state = _powers_filled(state, hyper + "_pow", get_hyper(state, hyper))
        self.state = state

    def _settable(self) -> str:
        names = [n for n in hyper_names(self.state) if n not in READ_ONLY + ("learning_rate",)]
        return (f"Its hyperparameters are read and set as optimizer._<name> (the update reads them from the state, "
                f"no recompile): {', '.join('_' + n for n in names) or 'none'}; the rate with get_lr()/set_lr(); "
                "anything else is fixed when the optimizer is built.")

    def _scheduler_state(self):
        """``LR_Scheduler``: the scheduler object's ``state_dict()``; for a
        gradxform schedule or PaddleReduceOnPlateau, their position in Paddle's keys."""
        if self.tx.lr_scheduler is not None:
            return self.tx.lr_scheduler.state_dict()
        count = int(find_states(self.state, StepState)[0].count)
        plateau = find_states(self.state, PlateauState)
        if plateau:
            p = plateau[0]
            return {"cooldown_counter": int(p.cooldown_counter), "best": float(p.best) if int(p.has_best) else None,
                    "num_bad_epochs": int(p.num_bad_epochs), "last_epoch": count, "last_lr": float(p.last_lr)}
        if self.tx.schedule is not None:
            return {"last_epoch": count, "last_lr": self.get_lr()}
        return None

    def __repr__(self):
        return (f"gradxform.paddle.Optimizer({self._options.owner}, {len(jax.tree.leaves(self.params))} "
                f"parameters, lr={self._learning_rate!r})")


Bound.face = Optimizer  # what `PaddleOptions.build` returns for bound arrays


def _powers_filled(state, field: str, value):
    """``state`` with every state node's ``field`` (a beta power, per leaf or per group) set to ``value``."""
    def fill(path, x):
        named = any(isinstance(k, jax.tree_util.GetAttrKey) and k.name == field for k in path)
        return jnp.full_like(x, value) if named else x
    return jax.tree_util.tree_map_with_path(fill, state)


def _step_fn(update):
    def step(params, state, grads, extra_args):
        updates, state = update(grads, state, params, **extra_args)
        return apply_updates(params, updates), state
    return step
