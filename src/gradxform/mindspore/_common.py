"""What every MindSpore optimizer shares (``mindspore.nn.Optimizer``, 2.x):
the learning rate (fixed, list, or schedule, per group), weight decay with
the beta/gamma filter or per group, gradient centralization, the static
``loss_scale``, and the order MindSpore applies them in::

    g = (g + weight_decay * loss_scale * w)      # decay_weight (filtered)
    g = centralize(g)                            # gradients_centralization (groups)
    g = g / loss_scale                           # scale_grad
    lr = get_lr()  (at global_step, read before it is incremented)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .._base import GradientTransformation, chain, identity
from ._groups import (beta_gamma_filter, check_weight_decay, group_learning_rate, group_weight_decay, list_lr,
                      parse_groups, unselected_frozen)
from .._optimizer import Setup
from ._get_lr import remember
from .._selectors import as_names
from ..pieces import centralize_gradients, unscale
from ..pieces.internal import adjusted_rate, no_adjustment
from .._ranges import check_bool, check_hyper
from ..schedules.internal import MindSporeListLR, as_schedule, check_number

__all__ = ["MSOptions", "parse", "check_float", "check_bool", "params_as_groups"]


def params_as_groups(owner: str, params, groups=None):
    """MindSpore's ``params`` as gradxform's group list: a list of group dicts
    (MindSpore's group params), a list of parameter objects with a ``.name``
    or of names (only those are optimized, as in MindSpore: one group of them), or the
    parameter pytree itself or None (every parameter; gradxform sees them at
    ``init``). ``groups``: the same list given by its gradxform keyword. An empty
    list, and a list mixing group dicts with anything else, are refused, as
    MindSpore's ``Optimizer.__init__`` refuses them (``optimizer.py``
    ``_parameters_base_check`` and "all elements ... must be 'Parameter' or 'dict'")."""
    if params is None:
        return groups
    if isinstance(params, (list, tuple)) and not params:
        raise ValueError(f"{owner}(params=...): must not be empty (MindSpore's Optimizer refuses an empty "
                         "list too); give None for every parameter.")
    if isinstance(params, (list, tuple)) and all(isinstance(g, dict) for g in params):
        found = list(params)
    elif isinstance(params, (list, tuple)) and any(isinstance(g, dict) for g in params):
        raise TypeError(f"{owner}(params=...): every element must be a group dict, or none may be (MindSpore: "
                        f"all 'Parameter' or all 'dict'); got {[type(g).__name__ for g in params]}.")
    elif as_names(params) is not None:
        found = [{"params": as_names(params)}]
    elif isinstance(params, dict) or hasattr(params, "shape") or isinstance(params, (list, tuple)):
        found = None
    else:
        raise TypeError(f"{owner}(params=...): must be a list of group dicts, a list of parameters with a .name, "
                        f"the parameter pytree, or None; got {type(params).__name__}. MindSpore's order is "
                        f"{owner.split('.', 1)[-1]}(params, learning_rate, ...): the parameters come first.")
    if found is not None and groups is not None:
        raise TypeError(f"{owner}: give the group list as params= or as groups=, not both.")
    return groups if found is None else found


def check_float(owner: str, name: str, value, *, ints: bool = False, **range_kw) -> float:
    """MindSpore's ``check_value_type(name, value, [float])`` (ints too where
    MindSpore converts them) and range check; errors name the argument.
    Without range keywords the range is the hyperparameter's declared one
    (`gradxform._ranges`, the one `set_hyper` checks too)."""
    allowed = (int, float) if ints else (float,)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise TypeError(f"{owner}({name}=...): {name} must be a float; got {value!r}.")
    if range_kw:
        check_number(owner, name, value, **range_kw)
    else:
        check_hyper(owner, name, value)
    return float(value)


def _ms_gc_select(owner, specs):
    """MindSpore 2.x's rule for a group with grad_centralization=True
    (``optimizer.py`` ``_tensor_apply_grad_centralization``): a gradient of
    rank >= 2 whose axis 1 is a multiple of 16 is centralized over axes
    1..rank-1; every other parameter of the group (biases, norms, kernels
    with other channel counts) is left as it is, silently, as MindSpore does
    (the seed says non-convolution parameters raise; the code skips them)."""
    del owner

    def select(name, shape):
        spec = next((s for s in specs if s.matches(name)), None)
        if spec is None or not spec.grad_centralization:
            return False
        return len(shape) >= 2 and shape[1] % 16 == 0

    return select


@dataclasses.dataclass(frozen=True, kw_only=True)
class MSOptions(Setup):
    """MindSpore's ``Optimizer`` base arguments: decay, loss scale, parameter groups."""
    weight_decay: float
    loss_scale: float
    specs: Any
    order: Any

    @property
    def grouped(self) -> bool:
        return self.specs is not None

    # -- the family's hooks (`Setup.build`) -----------------------------------
    def step(self) -> GradientTransformation:
        """`track_step` (the default lr), then the per-group lr override: one
        rate piece (`adjusted_rate`), the chain's one writer of ``lr``."""
        return adjusted_rate(self.track(), group_learning_rate(self.owner, self.specs, self.order)
                             if self.grouped else no_adjustment())

    def decay(self, *, loss_scaled: bool = True, add: bool = True,
              decay_filter: Callable[[str], bool] | None = beta_gamma_filter) -> GradientTransformation:
        return group_weight_decay(self.owner, self.weight_decay, self.specs, self.order,
                                  decay_filter=decay_filter, add=add,
                                  loss_scale=self.loss_scale if loss_scaled else None)

    def centralize(self) -> GradientTransformation:
        if not self.grouped or not any(s.grad_centralization for s in self.specs):
            return identity()
        return centralize_gradients(_ms_gc_select(self.owner, self.specs), output_axis=0)

    def unscale(self) -> GradientTransformation:
        return unscale(self.loss_scale)

    def head(self, *, decay_filter=beta_gamma_filter) -> GradientTransformation:
        """``decay_weight -> gradients_centralization -> scale_grad``."""
        return chain(self.decay(decay_filter=decay_filter), self.centralize(), self.unscale())

    def selected(self, tx: GradientTransformation) -> GradientTransformation:
        """Parameters no group lists keep their values (`unselected_frozen`)."""
        return unselected_frozen(self.owner, self.specs, self.order, tx)

    def presented(self, tx: GradientTransformation) -> GradientTransformation:
        return remember(tx, self)  # get_lr(optimizer, state) reads the schedules


def parse(owner: str, learning_rate, weight_decay=0.0, loss_scale=1.0, groups=None, *,
          allow_dynamic_lr=True, allow_gc=True, check_loss_scale=True,
          params=None, skip_nonfinite: bool = False) -> MSOptions:
    """Checks the base-class arguments at construction (MindSpore's
    ``Optimizer.__init__`` rules) and returns the shared options.
    ``params``: MindSpore's first argument (`params_as_groups`);
    ``skip_nonfinite``: gradxform's guard (`gradxform._optimizer.finalize`)."""
    groups = params_as_groups(owner, params, groups)
    base, sched = as_schedule(owner, learning_rate, list_lr(f"{owner}(learning_rate=[...])"))
    if sched is not None and not allow_dynamic_lr:
        raise ValueError(f"{owner}(learning_rate=...): a dynamic learning rate is not supported; got {learning_rate!r}.")
    check_weight_decay(owner, weight_decay)
    check_hyper(owner, "weight_decay", weight_decay)
    if check_loss_scale:
        check_float(owner, "loss_scale", loss_scale, ints=True)
    specs, order = parse_groups(owner, groups, allow_gc=allow_gc, list_cls=MindSporeListLR)
    return MSOptions(owner=owner, learning_rate=base, schedule=sched, weight_decay=float(weight_decay),
                     loss_scale=float(loss_scale), specs=specs, order=order, skip_nonfinite=skip_nonfinite)
