"""What every framework optimizer is built from: the shared `Setup` (name,
base learning rate and schedule, the step counter), and what wraps its chain
(`finalize`): float32 master weights or the float16 warning, the non-finite
guard when asked for, and the argument checks of `gradxform._errors.validated`."""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax

from ._base import GradientTransformation, transformation
from ._errors import validated
from ._hyper import tag_owner
from ._state_paths import is_optax_placeholder, per_leaf_fields_unmarked
from ._tree import distinct_buffers
from .pieces.internal import skip_nonfinite as _skip_nonfinite
from .pieces.internal import masked_by_update_mask
from .pieces.internal import FP16_WARNING, is_low_precision, with_master_weights
from .pieces import track_step
from ._warn import warn_at_caller

__all__ = ["Setup", "finalize", "guard", "guarded"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setup:
    """The construction every family shares, configured from its keywords.

    A family's options class (`gradxform.mxnet._common.MXNetOptions`,
    `gradxform.mindspore._common.MSOptions`, `gradxform.paddle._common.PaddleOptions`)
    subclasses it with its own pieces (MXNet's rescale, clip and multiplied
    decay; MindSpore's groups, decay filter and loss scale; Paddle's parameter
    groups, regularizers and clips), which each rule places in its
    framework's order. Everything a family does not decide is here, once:

    * `track`: the step counter and learning rate (`gradxform.pieces.track_step`);
    * `finish`: the wrapping of the finished chain (`finalize`: master weights
      or the float16 warning, ``skip_nonfinite``, validation, donation).
    """
    owner: str                       # "mxnet.adam": messages, declared hyperparameter ranges
    learning_rate: float             # base learning rate (a schedule's base)
    schedule: Callable | None = None
    multi_precision: bool = False
    skip_nonfinite: bool = False

    def track(self, *, lr_mult=None, begin_num_update: int = 0, read_lr: str = "after") -> GradientTransformation:
        return track_step(self.learning_rate, schedule=self.schedule, lr_mult=lr_mult,
                          begin_num_update=begin_num_update, read_lr=read_lr)

    def finish(self, tx: GradientTransformation, *, fp16_warning: str = FP16_WARNING,
               master_weights_inside: bool = False, skip_nonfinite: bool | None = None) -> GradientTransformation:
        return finalize(tx, multi_precision=self.multi_precision,
                        skip_nonfinite=self.skip_nonfinite if skip_nonfinite is None else skip_nonfinite,
                        fp16_warning=fp16_warning, owner=self.owner, master_weights_inside=master_weights_inside)


def finalize(tx: GradientTransformation, *, multi_precision: bool = False,
             skip_nonfinite: bool = False, max_consecutive: int | None = 100,
             validate: bool = True, fp16_warning: str = FP16_WARNING,
             owner: str | None = None, master_weights_inside: bool = False) -> GradientTransformation:
    """Wraps a framework optimizer's chain, innermost first::

        validated(skip_nonfinite(with_master_weights(masked_by_update_mask(chain))))

    ``multi_precision``: run the chain in float32 on master copies of
    float16/bfloat16 parameters; otherwise such parameters warn at ``init``
    as MXNet does (``fp16_warning``: the text). ``skip_nonfinite``: a step with a NaN/Inf gradient, update
    or new state leaf (master weights included) changes nothing, parameters and state alike
    (`gradxform.pieces.skip_nonfinite`;
    ``max_consecutive`` bad steps in a row trip it, see
    `gradxform.check_guard`). ``validate``: check structures, shapes and
    dtypes of params, grads and state at trace time (`gradxform._errors`).
    ``owner``: the optimizer's name (``"mxnet.sgd"``); ``init`` marks the
    state's hyperparameters as its own, so `gradxform.set_hyper` checks them
    against that optimizer's declared ranges (`gradxform._ranges`).
    ``master_weights_inside``: with ``multi_precision``, the chain already
    holds its master weights around part of itself (Paddle keeps them around
    the rule only, after clip and regularization), so none are added here.
    """
    tx = masked_by_update_mask(tx)  # update_mask=: masked leaves get 0 and keep their state
    if multi_precision:
        tx = tx if master_weights_inside else with_master_weights(tx)
    else:
        inner = tx

        def init(params):
            if any(is_low_precision(p) for p in jax.tree.leaves(params)):
                warn_at_caller(fp16_warning)
            return inner.init(params)

        tx = transformation(init, inner.update)
    tx = guard(tx, skip_nonfinite, max_consecutive)
    if validate:
        tx = validated(tx, master_weights=multi_precision)
    return _donatable(tx, owner)


def guard(tx: GradientTransformation, skip_nonfinite: bool, max_consecutive: int | None = 100):
    """The one place an optimizer's ``skip_nonfinite=`` is applied
    (`gradxform.pieces.skip_nonfinite`); every family goes through it, via
    `finalize` or `guarded`."""
    if not isinstance(skip_nonfinite, bool):
        raise TypeError(f"skip_nonfinite must be a bool; got {skip_nonfinite!r}.")
    return _skip_nonfinite(tx, max_consecutive=max_consecutive) if skip_nonfinite else tx


def guarded(tx: GradientTransformation, skip_nonfinite: bool) -> GradientTransformation:
    """``skip_nonfinite=`` for an optimizer that wraps an already finished one
    (MindSpore's LARS): the guard outside it, its state still donatable."""
    out = guard(tx, skip_nonfinite)
    return _donatable(out) if skip_nonfinite else out


def _donatable(tx: GradientTransformation, owner: str | None = None) -> GradientTransformation:
    """The state from ``init`` holds no buffer twice, so a step may donate it
    (and, with an ``owner``, its hyperparameters are marked as that owner's)."""
    def init(params):
        state = tx.init(params)
        state = distinct_buffers(state if owner is None else tag_owner(state, owner))
        # optax.tree_map_params: per-leaf scalars are not parameter-shaped trees
        return per_leaf_fields_unmarked(state) if is_optax_placeholder(params) else state
    return transformation(init, tx.update)
