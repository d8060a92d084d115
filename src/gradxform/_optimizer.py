"""What every framework optimizer is built from: `Setup`, the one builder its
family's options configure (name, base learning rate and schedule, the step
counter, the family's hooks), and what wraps its chain
(`finalize`): float32 master weights or the float16 warning, the non-finite
guard when asked for, and the argument checks of `gradxform._errors.validated`."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

import jax

from ._base import GradientTransformation, chain, transformation
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
    """The one builder of every framework optimizer, configured from its keywords.

    Every optimizer is ``build(*body)``: its rule's pieces (``body``) between
    what its family puts around every rule::

        presented(finish(selected(chain(step, *before_rule, *rule(body)))))

    A family's options class (`gradxform.mxnet._common.MXNetOptions`,
    `gradxform.mindspore._common.MSOptions`, `gradxform.paddle._common.PaddleOptions`)
    is its profile: the data it decides for all of its optimizers (the
    float16 warning's text, whether master weights hold the rule only) and
    the hooks, each the identity here:

    * `step`: the chain's one writer of the learning rate (`track_step`, then
      MindSpore's group rates or Paddle's plateau and group ratios);
    * `before_rule`: pieces every rule of the family starts with (Paddle's clip and
      regularizer; MXNet and MindSpore rules place theirs in the body, in the
      order each of the framework's kernels applies them);
    * `rule`: the body as the chain holds it (Paddle: one sub-chain, under
      float32 master weights with ``multi_precision``);
    * `selected`: leaves no parameter group names stay as they are;
    * `presented`: what the caller gets (Paddle's `PaddleOptimizer` with
      ``get_lr``; MindSpore's schedules remembered for ``get_lr``).

    What no family decides is here, once: the step counter and learning rate
    (`gradxform.pieces.track_step`), and `finish` (`finalize`: master weights
    or the float16 warning, ``skip_nonfinite``, validation, donation).
    """
    owner: str                       # "mxnet.adam": messages, declared hyperparameter ranges
    learning_rate: float             # base learning rate (a schedule's base)
    schedule: Callable | None = None
    multi_precision: bool = False
    skip_nonfinite: bool = False
    read_lr: str = "after"           # track_step: the schedule read after (or before) the count moves

    #: the text float16/bfloat16 parameters without ``multi_precision`` warn with
    fp16_warning: ClassVar[str] = FP16_WARNING
    #: master weights already hold part of the chain (`rule`), so `finish` adds none
    master_weights_inside: ClassVar[bool] = False

    def build(self, *body: GradientTransformation, **profile) -> Any:
        """The optimizer whose rule is ``body``; ``profile``: fields this one
        optimizer sets otherwise than its family (``read_lr='before'``,
        ``skip_nonfinite=``, MXNet's ``warn_as='SGD'``, Paddle's
        ``regularize_kinds=()``)."""
        o = dataclasses.replace(self, **profile) if profile else self
        return o.presented(o.finish(o.selected(chain(o.step(), *o.before_rule(), *o.rule(body)))))

    # -- the family's hooks ---------------------------------------------------
    def step(self) -> GradientTransformation:
        return self.track()

    def before_rule(self) -> tuple[GradientTransformation, ...]:
        return ()

    def rule(self, body: tuple[GradientTransformation, ...]) -> tuple[GradientTransformation, ...]:
        return body

    def selected(self, tx: GradientTransformation) -> GradientTransformation:
        return tx

    def presented(self, tx: GradientTransformation) -> Any:
        return tx

    def warning(self) -> str:
        return self.fp16_warning

    # -- what every family shares ---------------------------------------------
    def track(self, *, lr_mult=None, begin_num_update: int = 0) -> GradientTransformation:
        return track_step(self.learning_rate, schedule=self.schedule, lr_mult=lr_mult,
                          begin_num_update=begin_num_update, read_lr=self.read_lr)

    def finish(self, tx: GradientTransformation) -> GradientTransformation:
        return finalize(tx, multi_precision=self.multi_precision, skip_nonfinite=self.skip_nonfinite,
                        fp16_warning=self.warning(), owner=self.owner,
                        master_weights_inside=self.master_weights_inside)


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
