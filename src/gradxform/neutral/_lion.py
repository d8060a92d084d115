"""Lion (Chen et al. 2023), as ``optax.lion`` builds it: ``chain(scale_by_lion,
add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate))``."""
from __future__ import annotations

import jax
import numpy as np

from .._base import GradientTransformation, transformation
from .._optimizer import Setup
from .._ranges import check_bool, check_hyper
from .._registry import Declaration, registered_name
from .._state_paths import is_optax_placeholder
from ..pieces import add_decayed_weights, scale_by_lion, scale_by_lr
from ..schedules.internal import DynamicLR, as_schedule

__all__ = ["lion"]
DECLARED = (  # registered as 'neutral.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('lion', no_goldens="no framework has it: tests/test_neutral.py runs optax.lion beside it"),
)


def lion(learning_rate=1e-4, b1=0.9, b2=0.99, mu_dtype=None, weight_decay=1e-3, mask=None, *,
         multi_precision=False, skip_nonfinite=False) -> GradientTransformation:
    """Lion (Chen et al. 2023), ``optax.lion`` bit for bit::

        c  = (1 - b1) * g + b1 * mu
        w -= lr * (sign(c) + weight_decay * w)       (weight_decay * w where mask says so)
        mu = (1 - b2) * g + b2 * mu

    in optax's order of operations (`gradxform.pieces.scale_by_lion`, then
    `gradxform.pieces.add_decayed_weights`, then the learning rate). Lion
    keeps one moment and steps by its sign, so every coordinate moves by
    ``lr`` (plus the decay): optax advises a learning rate 3-10x smaller than
    AdamW's and a weight decay 3-10x larger.

    Args:
      learning_rate: >= 0; or a schedule: an optax-style ``count -> lr``
        (``count`` 0 on the first update, as optax counts) or a
        `gradxform.schedules` one. optax requires it; 1e-4 is this family's
        default, so ``create('neutral.lion')`` works.
      b1: in [0, 1], the weight of the momentum in the sign.
      b2: in [0, 1], the decay of the momentum.
      mu_dtype: the momentum's dtype (static; None: the parameters').
      weight_decay: >= 0, a number (optax also takes a schedule here; this
        family does not). It is multiplied by the learning rate, as in optax.
      mask: which parameters are decayed, as optax's: a tree of bools shaped
        like the parameters (or a prefix of them), or a function ``params ->
        such a tree``; None decays every parameter. Resolved once, at
        ``init``, into per-parameter decay multipliers of 1 or 0.
      multi_precision: gradxform's own (keyword-only): run the rule in
        float32 on master copies of float16/bfloat16 parameters.
      skip_nonfinite: gradxform's own (keyword-only): a step with a NaN/Inf
        gradient changes nothing.

    ``learning_rate``, ``b1``, ``b2`` and ``weight_decay`` are hyperparameters
    in the state (`gradxform.set_hyper`, no recompile). The updates and the
    momentum equal optax's bit for bit on the same backend, jitted or op by
    op (tests/test_neutral.py), for ``1 - b1, 1 - b2 >= 1e-4``.

    Reference: Chen et al., "Symbolic Discovery of Optimization Algorithms",
    2023 (https://arxiv.org/abs/2302.06675); optax ``optax/_src/alias.py::lion``.
    """
    owner = registered_name(lion)
    if not callable(learning_rate) and (isinstance(learning_rate, (bool, str, bytes, list, tuple, dict))
                                        or np.ndim(learning_rate) != 0):
        raise TypeError(f"{owner}(learning_rate=...): a number or an optax-style schedule (count -> lr); "
                        f"got {learning_rate!r}.")
    base, schedule = as_schedule(owner, learning_rate, DynamicLR)
    for k, v in (("b1", b1), ("b2", b2), ("weight_decay", weight_decay)):
        check_hyper(owner, k, v)
    check_bool(owner, "multi_precision", multi_precision)
    rule = scale_by_lion(b1, b2, mu_dtype)
    setup = Setup(owner=owner, learning_rate=base, schedule=schedule, multi_precision=multi_precision,
                  skip_nonfinite=skip_nonfinite)
    return setup.build(rule, _decay(owner, weight_decay, mask), scale_by_lr())


def _decay(owner: str, weight_decay, mask) -> GradientTransformation:
    """``add_decayed_weights(weight_decay)`` on the leaves optax's ``mask`` selects:
    the mask becomes each leaf's ``wd_mult`` (1 or 0) at ``init``, so the update is
    the one piece's (``u + weight_decay * 1 * w`` is optax's ``u + weight_decay * w``,
    and a masked leaf's ``u + 0 * w`` is ``u``)."""
    plain = add_decayed_weights(weight_decay, name="weight_decay")
    if mask is None:
        return plain

    def init(params):
        if is_optax_placeholder(params):  # optax.tree_map_params: the per-leaf field, unresolved
            return add_decayed_weights(weight_decay, wd_mult={}, name="weight_decay").init(params)
        flags = _mask_flags(owner, mask, params)
        return add_decayed_weights(weight_decay, wd_mult=lambda names: flags, name="weight_decay").init(params)

    return transformation(init, plain.update)


def _mask_flags(owner: str, mask, params) -> np.ndarray:
    """optax's mask as one float32 flag per leaf of ``params`` (flatten order): a
    tree of bools with the parameters' structure or a prefix of it (a flag then
    covers its subtree), or a function of the parameters giving one."""
    flags, treedef = jax.tree.flatten(mask(params) if callable(mask) else mask)
    try:
        subtrees = treedef.flatten_up_to(params)
        out = [bool(f) for f, sub in zip(flags, subtrees) for _ in jax.tree.leaves(sub)]
    except (ValueError, TypeError, jax.errors.ConcretizationTypeError) as err:
        raise ValueError(f"{owner}(mask=...): the mask must be a tree of Python bools shaped like the parameters "
                         f"(or a prefix of them), or a function of the parameters giving one: {err}") from None
    return np.asarray(out, np.float32)
