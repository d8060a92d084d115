"""MindSpore (2.x) AdaMax, Adadelta, Rprop and ASGD (their classes, ``params``
first as MindSpore's, are at the end of this module).

Sources: ``mindspore/nn/optim/adamax.py`` (``P.ApplyAdaMax``),
``adadelta.py`` (``P.ApplyAdadelta``), ``rprop.py`` and ``asgd.py`` (both in
Python over MindSpore ops). Each runs ``decay_weight -> gradients_centralization
-> scale_grad`` first and reads the learning rate before ``global_step`` is
incremented (`gradxform.mindspore._common`). All four have CPU kernels in
MindSpore 2.10, so each has goldens (tools/mindspore_new_goldens.py) and
continues from a MindSpore checkpoint (`gradxform.migrate.from_mindspore_checkpoint`,
checked against MindSpore runs in tests/fixtures/mindspore).
"""
from __future__ import annotations

from .._base import GradientTransformation
from .._registry import Declaration, registered_name
from ..pieces import (averaged_sgd_step, running_bias_correction, scale_by_adadelta, scale_by_infinity_norm,
                      scale_by_lr, scale_by_rprop)
from ._common import check_float, parse
from .._ranges import NON_NEGATIVE, POSITIVE, UNIT_CLOSED, UNIT_OPEN, Range

__all__ = ["adamax", "adadelta", "rprop", "asgd"]
# their constructors' checks (MindSpore's _checkparam), per optimizer
DECLARED = (  # registered as 'mindspore.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adamax', classes=('AdaMax',), ranges={"eps": POSITIVE}, migrates=True),
    Declaration('adadelta', classes=('Adadelta',), ranges={"rho": UNIT_CLOSED, "epsilon": NON_NEGATIVE},
                migrates=True),
    Declaration('rprop', classes=('Rprop',), migrates=True,
                ranges={"etaminus": UNIT_OPEN, "etaplus": Range(low=1.0, low_open=True), "step_size_min": NON_NEGATIVE,
                        "step_size_max": NON_NEGATIVE}),
    Declaration('asgd', classes=('ASGD',), migrates=True,
                ranges={"lambd": NON_NEGATIVE, "alpha": NON_NEGATIVE, "t0": NON_NEGATIVE}),
)


def adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.0, loss_scale=1.0, *,
           params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore AdaMax (``nn.AdaMax`` -> ``ApplyAdaMax``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        beta1_power *= beta1                                   (float32, shared, starts at 1)
        m = beta1 m + (1 - beta1) g;   v = max(beta2 v, |g|)
        w -= lr / (1 - beta1_power) * m / (v + eps)

    Args:
      params: MindSpore's ``params`` (group dicts, parameters with a ``.name``),
        or None / the parameter pytree: every leaf (given to ``init``); by
        keyword here, first in `gradxform.mindspore.AdaMax`.
      beta1: float in (0, 1).
      beta2: float in (0, 1).
      eps: float > 0.

    ``learning_rate``, ``weight_decay``, ``loss_scale``: as `gradxform.mindspore.momentum`.
    """
    owner = registered_name(adamax)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    for name, v in (("beta1", beta1), ("beta2", beta2)):
        check_float(owner, name, v)
    check_float(owner, "eps", eps, low=0.0, low_open=True)
    return o.build(o.head(), scale_by_infinity_norm(beta1, beta2, eps), running_bias_correction(beta1),
                   scale_by_lr())


def adadelta(learning_rate=1.0, rho=0.9, epsilon=1e-6, loss_scale=1.0, weight_decay=0.0, *,
             params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore Adadelta (``nn.Adadelta`` -> ``ApplyAdadelta``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        accum = rho accum + (1 - rho) g^2
        update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * g
        accum_update = rho accum_update + (1 - rho) update^2
        w -= lr * update

    Args: rho: float in [0, 1]; epsilon: float >= 0; others as `adamax`
    (note MindSpore's order here: ``loss_scale`` before ``weight_decay``).
    """
    owner = registered_name(adadelta)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    check_float(owner, "rho", rho, low=0.0, high=1.0)
    check_float(owner, "epsilon", epsilon, low=0.0)
    return o.build(o.head(), scale_by_adadelta(rho, epsilon), scale_by_lr())


def _pair(owner: str, name: str, value) -> tuple:
    if not isinstance(value, tuple):
        raise TypeError(f"{owner}({name}=...): must be a tuple; got {type(value).__name__}.")
    if len(value) != 2:
        raise ValueError(f"{owner}({name}=...): must be a tuple of 2; got {len(value)} values.")
    return value


def rprop(learning_rate=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.), weight_decay=0., *,
         params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore Rprop (``nn.Rprop``)::

        g = g + weight_decay * w                               (no decay for 'beta'/'gamma')
        first update: step_size = lr (per element)
        s = sign(g * prev):  eta = etaplus (s > 0), etaminus (s < 0), 1 (s == 0)
        step_size = clip(step_size * eta, step_sizes[0], step_sizes[1])
        g = 0 where s < 0;   w -= sign(g) * step_size;   prev = g

    The learning rate is read only on the first update (a schedule changes
    nothing afterwards, as in MindSpore).

    Args:
      etas: (etaminus, etaplus), floats, 0 < etaminus < 1 < etaplus.
      step_sizes: (min, max), floats, min <= max.
    """
    owner = registered_name(rprop)
    etaminus, etaplus = _pair(owner, "etas", etas)
    lo, hi = _pair(owner, "step_sizes", step_sizes)
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
        raise ValueError(f"{owner}(step_sizes=...): the maximal step size must not be less than the minimal; "
                         f"got {lo} > {hi}.")
    check_float(owner, "etaminus", etaminus, low=0.0, high=1.0, low_open=True, high_open=True)
    check_float(owner, "etaplus", etaplus, low=1.0, low_open=True)
    check_float(owner, "step_size_min", lo, low=0.0)
    check_float(owner, "step_size_max", hi, low=0.0)
    o = parse(owner, learning_rate, weight_decay, 1.0, groups, params=params, skip_nonfinite=skip_nonfinite)
    return o.build(o.head(), scale_by_rprop(etaminus, etaplus, lo, hi))


def asgd(learning_rate=0.1, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, *,
         params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore ASGD (``nn.ASGD``, averaged SGD), with ``t`` the global step after its increment::

        g = g + weight_decay * w                               (no decay for 'beta'/'gamma')
        t == 1:  eta = lr
        w_new = w (1 - lambd eta) - eta g
        ax = ax + (w_new - ax) mu  if mu != 1,  else ax = w_new
        eta = lr / (1 + lambd lr t)^alpha;   mu = 1 / max(1, t - t0)

    ``eta`` (starts at 0) and ``mu`` (starts at 1) are per parameter, in
    float32; ``ax`` (MindSpore's ``ax_`` parameters, the averaged weights) is
    in the state. The weights trained are ``w``.

    Args: lambd, alpha, t0: floats >= 0 (MindSpore checks they are floats).
    """
    owner = registered_name(asgd)
    for name, v in (("lambd", lambd), ("alpha", alpha), ("t0", t0)):
        check_float(owner, name, v, low=0.0)
    o = parse(owner, learning_rate, weight_decay, 1.0, groups, params=params, skip_nonfinite=skip_nonfinite)
    return o.build(o.head(), averaged_sgd_step(lambd, alpha, t0))



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def AdaMax(params, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.0, loss_scale=1.0, *,
           skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdaMax(params, learning_rate, ...)``: `gradxform.mindspore.adamax`."""
    return adamax(params=params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                  weight_decay=weight_decay, loss_scale=loss_scale, skip_nonfinite=skip_nonfinite)


def Adadelta(params, learning_rate=1.0, rho=0.9, epsilon=1e-6, loss_scale=1.0, weight_decay=0.0, *,
             skip_nonfinite=False) -> GradientTransformation:
    """``nn.Adadelta(params, learning_rate, ...)``: `gradxform.mindspore.adadelta`."""
    return adadelta(params=params, learning_rate=learning_rate, rho=rho, epsilon=epsilon, loss_scale=loss_scale,
                    weight_decay=weight_decay, skip_nonfinite=skip_nonfinite)


def Rprop(params, learning_rate=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.), weight_decay=0.0, *,
          skip_nonfinite=False) -> GradientTransformation:
    """``nn.Rprop(params, learning_rate, ...)``: `gradxform.mindspore.rprop`."""
    return rprop(params=params, learning_rate=learning_rate, etas=etas, step_sizes=step_sizes,
                 weight_decay=weight_decay, skip_nonfinite=skip_nonfinite)


def ASGD(params, learning_rate=0.1, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, *,
         skip_nonfinite=False) -> GradientTransformation:
    """``nn.ASGD(params, learning_rate, ...)``: `gradxform.mindspore.asgd`."""
    return asgd(params=params, learning_rate=learning_rate, lambd=lambd, alpha=alpha, t0=t0,
                weight_decay=weight_decay, skip_nonfinite=skip_nonfinite)
