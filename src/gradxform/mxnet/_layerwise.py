"""MXNet 1.x layer- and row-wise rules: lamb (GluonNLP's BERT pretraining optimizer), lars,
groupadagrad (``mx.optimizer.contrib.GroupAdaGrad``).

Source: ``mxnet/optimizer/optimizer.py`` (1.9.1) ``LAMB._update_impl`` and its
kernels ``lamb_update_phase1`` / ``lamb_update_phase2`` (``mp_`` variants for
float16 with ``multi_precision``); ``LARS._update_impl`` (``multi_sum_sq``,
``multi_lars``, ``preloaded_multi_sgd[_mom]_update``).
"""
from __future__ import annotations

import numpy as np

from .._registry import Declaration
from .._base import GradientTransformation, LocalKey, identity
from .._ranges import check_bool, check_hyper
from .._selectors import multipliers
from ..pieces import (add_decayed_weights, provide_lars_ratio, provide_weight_decay, scale_by_adam_moments,
                      scale_by_corrected_moments,
                      scale_by_lr, scale_by_row_accumulated_squares, scale_by_trust_ratio, trace,
                      trace_with_lr_ratio)
from ._common import _mxnet_names, check_unit, parse_options

__all__ = ["lamb", "lars", "groupadagrad"]
DECLARED = (  # registered as 'mxnet.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('lamb', classes=('LAMB',), migrates=True),
    Declaration('lars', classes=('LARS',), migrates=True),
    Declaration('groupadagrad', classes=('GroupAdaGrad',), migrates=True),
)


def _bound(owner: str, name: str, value):
    """MXNet passes a bound to the kernel only when it is truthy, and the
    kernel applies it only when it is >= 0: None, 0 and negatives mean none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}({name}=...): must be None or a number; got {value!r}.")
    return float(value) if value > 0 else None


def lamb(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-6, lower_bound=None, upper_bound=None,
         bias_correction=True, *, wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None,
         multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None,
         skip_nonfinite=False, param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet LAMB (``LAMB.update`` -> ``lamb_update_phase1`` + ``lamb_update_phase2``)::

        g = clip(rescale_grad * grad, clip_gradient)
        m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
        u = m^ / (sqrt(v^) + epsilon) + wd * w      m^ = m / (1 - beta1^t), v^ = v / (1 - beta2^t)
                                                    (m, v themselves when bias_correction=False)
        r1 = clip(|w|, lower_bound, upper_bound);   r2 = |u|
        w -= lr * r1 / r2 * u                       (lr * u where r1 or r2 is 0)

    ``t`` is the parameter's own update count; norms are per parameter (L2,
    float32; of the float32 master copy with ``multi_precision``). The decay
    is added after the clip, so it is never clipped.

    Args:
      learning_rate: >= 0 (MXNet's default 0.001).
      beta1: in [0, 1).
      beta2: in [0, 1).
      epsilon: > 0.
      lower_bound: None or a number; as MXNet, a bound that is not > 0 is no
        bound (static).
      upper_bound: the same.
      bias_correction: bool (static).

    ``wd``, ``rescale_grad``, ``clip_gradient``, ``lr_scheduler``,
    ``multi_precision``, ...: the common keywords (`gradxform.mxnet.sgd`).
    """
    o = parse_options(lamb, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    owner = o.owner
    check_unit(owner, beta1=beta1, beta2=beta2, epsilon=epsilon)
    check_bool(owner, "bias_correction", bias_correction)
    lower, upper = _bound(owner, "lower_bound", lower_bound), _bound(owner, "upper_bound", upper_bound)
    direction = (scale_by_corrected_moments(beta1, beta2, epsilon) if bias_correction
                 else scale_by_adam_moments(beta1, beta2, epsilon))
    return o.build(o.rescale(), o.clip(), direction, o.add_wd(), scale_by_trust_ratio(lower, upper), scale_by_lr())


# LARS's per-layer factor: local to the LARS chain, never on the shared context
LARS_RATIO = LocalKey("lars_ratio", "provide_lars_ratio (LARS's layer ratio)")
_NO_LARS = ("gamma", "beta", "bias")  # LARS._get_lars / _update_impl: these names keep the plain lr


def _mx_names(owner: str, idx2name, names):
    """The names MXNet's LARS sees: ``param_idx2name`` matched by name, never
    by position (`gradxform.mxnet._common._mxnet_names`)."""
    return _mxnet_names(owner, idx2name, list(names))[0]


def _lars_wd_mult(o):
    """Each leaf's wd multiplier as MXNet's LARS resolves it: with
    param_idx2name, LARS.set_wd_mult gives every name not ending in '_weight'
    0 (the base class spares '_gamma' too); then ``wd_mult`` entries (names,
    patterns, or indices as MXNet's ``_get_wd``) and ``param_dict`` objects'
    ``wd_mult`` win. Without param_idx2name every multiplier is 1 unless set."""
    idx2name, spec, pd = o.param_idx2name, o.wd_mult, o.param_dict

    def resolve(names):
        mx = _mx_names(o.owner, idx2name, names)
        default = (lambda n: 1.0 if n.endswith("_weight") else 0.0) if idx2name else 1.0
        by_name = {k: v for k, v in (spec or {}).items() if not isinstance(k, int)}
        out = multipliers(mx, by_name, default, "wd_mult")
        for k, v in (spec or {}).items():
            if isinstance(k, int):
                if not 0 <= k < len(names):
                    raise ValueError(f"wd_mult: index {k} is out of range for {len(names)} parameters.")
                out[k] = float(v)
        for k, obj in (pd or {}).items():
            i = k if isinstance(k, int) else (mx.index(k) if k in mx else names.index(k) if k in names else None)
            if i is None or not 0 <= i < len(names):
                raise ValueError(f"param_dict: {k!r} is not a parameter index or name here; "
                                 f"{len(names)} parameters, named {list(names)[:8]}.")
            out[i] = float(obj.get("wd_mult", 1.0) if isinstance(obj, dict) else getattr(obj, "wd_mult", 1.0))
        return out

    if spec is not None and (callable(spec) and not isinstance(spec, dict)):
        raise TypeError(f"{o.owner}(wd_mult=...): a dict of name, pattern or index -> multiplier; "
                        f"got {type(spec).__name__}.")
    return resolve


def lars(learning_rate=None, momentum=0.0, lazy_update=False, eta=0.001, eps=0.0, momentum_correction=True, *,
         wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None, multi_precision=False,
         begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None, skip_nonfinite=False,
         param_dict=None, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """MXNet LARS (``LARS.update``: ``multi_lars`` + ``preloaded_multi_sgd_mom_update``)::

        lr_i = lr * eta |w| / (rescale_grad |grad| + wd |w| + eps)   (|w| > 0 and |grad| > 0)
               lr                                                    (otherwise, and for names
                                                                      ending in gamma/beta/bias)
        g = clip(rescale_grad * grad, clip_gradient) + wd * w
        mom = momentum_t * mom - lr_i * g;   w += mom       (w -= lr_i * g when momentum is 0)
        momentum_t = momentum * lr_now / lr_before         (momentum_correction, lr_before != 0)

    The gradient norm is of the unclipped, rescaled gradient. Names come from
    ``param_idx2name`` (without it MXNet's names are indices, so every
    parameter takes the ratio and decays, as in a Gluon Trainer, which passes
    none); with it, only names ending in ``_weight`` decay unless ``wd_mult``
    says otherwise (LARS's own ``set_wd_mult``).

    ``momentum_correction`` compares each update's learning rate with the
    previous one, per parameter: MXNet compares per ``update`` call, so this is
    its Gluon Trainer's behaviour (one call for all parameters, up to
    ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` = 4 per call); with a schedule and
    one updater call per parameter, MXNet corrects only the first parameter of
    each step. Without a schedule the ratio is 1 either way.

    Args:
      momentum: in [0, 1) (0: no momentum buffer, static).
      lazy_update: accepted, no effect: MXNet's LARS reads it only on its
        row_sparse path; dense gradients take the aggregated kernels, which
        ignore it (so the default here is False, and True changes nothing).
      eta: >= 0.
      eps: >= 0.
      momentum_correction: bool (static).
      learning_rate: >= 0; None means 0.01, or the lr_scheduler's base_lr.

    ``wd``, ``rescale_grad``, ...: the common keywords (`gradxform.mxnet.sgd`).
    """
    o = parse_options(lars, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    owner = o.owner
    check_unit(owner, momentum=momentum)
    check_hyper(owner, "eta", eta)
    check_hyper(owner, "eps", eps)
    check_bool(owner, "lazy_update", lazy_update)
    check_bool(owner, "momentum_correction", momentum_correction)
    idx2name = o.param_idx2name
    layers = None
    if idx2name:
        layers = lambda names: np.asarray([0.0 if n.endswith(_NO_LARS) else 1.0  # noqa: E731
                                           for n in _mx_names(owner, idx2name, names)], np.float32)
    if momentum > 0:
        direction = trace_with_lr_ratio(momentum) if momentum_correction else trace(momentum)
    else:
        direction = identity()
    return o.build(provide_weight_decay(o.wd, wd_mult=_lars_wd_mult(o)), o.rescale(),
                   provide_lars_ratio(eta, eps, key=LARS_RATIO, layers=layers),
                   o.clip(), add_decayed_weights(None), scale_by_lr(factor_key=LARS_RATIO), direction)


def groupadagrad(learning_rate=None, eps=1e-5, *, wd=0.0, rescale_grad=1.0, clip_gradient=None,
                lr_scheduler=None, multi_precision=False, begin_num_update=0, lr_mult=None, wd_mult=None,
                param_idx2name=None, skip_nonfinite=False, param_dict=None, aggregate_num=None,
                use_fused_step=None) -> GradientTransformation:
    """MXNet GroupAdaGrad (``mx.optimizer.contrib.GroupAdaGrad.update``, dense path)::

        g = clip(rescale_grad * grad, clip_gradient)
        history += mean(g^2, axis=1, keepdims=True)      (one value per row)
        w -= lr * g / sqrt(history + eps)

    MXNet takes 2-D weights only; here every axis but the first is averaged
    (a 1-D parameter has one row per element). Weight decay is not supported
    (MXNet asserts ``wd == 0``): ``wd`` must be 0. Not fusable: the history
    is not shaped like the parameter.

    Args:
      eps: >= 0, added inside the root.
      learning_rate: >= 0; None means 0.01, or the lr_scheduler's base_lr.

    ``wd``, ``rescale_grad``, ...: the common keywords (`gradxform.mxnet.sgd`).
    """
    o = parse_options(groupadagrad, learning_rate, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                      lr_scheduler=lr_scheduler, multi_precision=multi_precision, begin_num_update=begin_num_update,
                      lr_mult=lr_mult, wd_mult=wd_mult, param_idx2name=param_idx2name, skip_nonfinite=skip_nonfinite,
                      param_dict=param_dict, aggregate_num=aggregate_num, use_fused_step=use_fused_step)
    owner = o.owner
    check_hyper(owner, "eps", eps)
    if o.wd != 0:
        raise ValueError(f"{owner}(wd={o.wd!r}): weight decay is not supported for GroupAdaGrad "
                         "(MXNet asserts wd == 0); leave wd at 0.")
    return o.build(o.rescale(), o.clip(), scale_by_row_accumulated_squares(eps), scale_by_lr())



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def LARS(momentum=0.0, lazy_update=False, eta=0.001, eps=0.0, momentum_correction=True, *, rescale_grad=1.0,
         param_idx2name=None, wd=0.0, clip_gradient=None, learning_rate=None, lr_scheduler=None, begin_num_update=0,
         multi_precision=False, param_dict=None, lr_mult=None, wd_mult=None, skip_nonfinite=False,
         aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.LARS(momentum, lazy_update, eta, eps, momentum_correction, **kwargs)``:
    `gradxform.mxnet.lars`."""
    return lars(momentum=momentum, lazy_update=lazy_update, eta=eta, eps=eps, momentum_correction=momentum_correction,
                rescale_grad=rescale_grad, param_idx2name=param_idx2name, wd=wd, clip_gradient=clip_gradient,
                learning_rate=learning_rate, lr_scheduler=lr_scheduler, begin_num_update=begin_num_update,
                multi_precision=multi_precision, param_dict=param_dict, lr_mult=lr_mult, wd_mult=wd_mult,
                skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num, use_fused_step=use_fused_step)


def GroupAdaGrad(eps=1e-5, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
                 learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
                 lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
                 use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.contrib.GroupAdaGrad(eps, **kwargs)``: `gradxform.mxnet.groupadagrad`."""
    return groupadagrad(eps=eps, rescale_grad=rescale_grad, param_idx2name=param_idx2name, wd=wd,
                        clip_gradient=clip_gradient, learning_rate=learning_rate, lr_scheduler=lr_scheduler,
                        begin_num_update=begin_num_update, multi_precision=multi_precision, param_dict=param_dict,
                        lr_mult=lr_mult, wd_mult=wd_mult, skip_nonfinite=skip_nonfinite, aggregate_num=aggregate_num,
                        use_fused_step=use_fused_step)


LAMB = lamb
