"""MindSpore 2.x's optimizer classes, ``params`` first as in MindSpore.

``nn.Momentum(params, learning_rate, momentum, ...)``: each class here takes
MindSpore's positional order, its first argument ``params`` (a list of group
dicts, a list of parameter objects with a ``.name`` such as
``net.trainable_params()``, the parameter pytree, or None for every
parameter: `gradxform.mindspore._common.params_as_groups`), and forwards
every argument by name to the snake_case factory
(`gradxform.mindspore.momentum`, ...), which takes the parameters as the
keyword ``params=`` (or ``groups=``) because gradxform sees them at
``init``. ``skip_nonfinite`` is gradxform's guard. ``LARS`` (which wraps an
optimizer, not parameters) and ``thor`` (``net`` first) are the factories
themselves.
"""
from __future__ import annotations

from .._base import GradientTransformation
from ._adafactor import adafactor
from ._adam import adam, adam_offload, adam_weight_decay, lamb, lazy_adam
from ._adaptive import adagrad, ftrl, proximal_adagrad, rmsprop
from ._momentum import lars, momentum, sgd
from ._rules import adadelta, adamax, asgd, rprop

__all__ = ["ASGD", "AdaMax", "Adadelta", "Rprop", "AdaFactor", "Adagrad", "Adam", "AdamOffload", "AdamWeightDecay",
           "FTRL", "LARS", "Lamb", "LazyAdam",
           "Momentum", "ProximalAdagrad", "RMSProp", "SGD"]

LARS = lars
_momentum = momentum  # the class's own argument ``momentum`` shadows the factory's name


def Momentum(params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False, *,
             skip_nonfinite=False) -> GradientTransformation:
    """``nn.Momentum(params, learning_rate, momentum, ...)``: `gradxform.mindspore.momentum`."""
    return _momentum(**locals())


def SGD(params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, loss_scale=1.0,
        *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.SGD(params, learning_rate, momentum, ...)``: `gradxform.mindspore.sgd`."""
    return sgd(**locals())


def Adam(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
         weight_decay=0.0, loss_scale=1.0, use_amsgrad=False, *, use_lazy=False, use_offload=False,
         skip_nonfinite=False) -> GradientTransformation:
    """``nn.Adam(params, learning_rate, beta1, ..., use_amsgrad, **kwargs)`` (kwargs: use_lazy,
    use_offload): `gradxform.mindspore.adam`."""
    return adam(**locals())


def LazyAdam(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
             weight_decay=0.0, loss_scale=1.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.LazyAdam(params, learning_rate, ...)``: `gradxform.mindspore.lazy_adam`."""
    return lazy_adam(**locals())


def AdamOffload(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                use_nesterov=False, weight_decay=0.0, loss_scale=1.0, *,
                skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdamOffload(params, learning_rate, ...)``: `gradxform.mindspore.adam_offload`."""
    return adam_offload(**locals())


def AdamWeightDecay(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, *,
                    skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdamWeightDecay(params, learning_rate, ...)``: `gradxform.mindspore.adam_weight_decay`."""
    return adam_weight_decay(**locals())


def Lamb(params, learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, *, trust_ratio="update",
         skip_nonfinite=False) -> GradientTransformation:
    """``nn.Lamb(params, learning_rate, ...)``: `gradxform.mindspore.lamb`."""
    return lamb(**locals())


def Adagrad(params, accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0, weight_decay=0.0, *,
            skip_nonfinite=False) -> GradientTransformation:
    """``nn.Adagrad(params, accum, learning_rate, ...)``: `gradxform.mindspore.adagrad`."""
    return adagrad(**locals())


def ProximalAdagrad(params, accum=0.1, learning_rate=0.001, l1=0.0, l2=0.0, use_locking=False, loss_scale=1.0,
                    weight_decay=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.ProximalAdagrad(params, accum, learning_rate, ...)``: `gradxform.mindspore.proximal_adagrad`."""
    return proximal_adagrad(**locals())


def FTRL(params, initial_accum=0.1, learning_rate=0.001, lr_power=-0.5, l1=0.0, l2=0.0, use_locking=False,
         loss_scale=1.0, weight_decay=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.FTRL(params, initial_accum, learning_rate, ...)``: `gradxform.mindspore.ftrl`."""
    return ftrl(**locals())


def RMSProp(params, learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False, centered=False,
            loss_scale=1.0, weight_decay=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.RMSProp(params, learning_rate, decay, momentum, ...)``: `gradxform.mindspore.rmsprop`."""
    return rmsprop(**locals())


def AdaFactor(params, learning_rate=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=0.8, beta1=0.9,
              weight_decay=0.0, scale_parameter=True, relative_step=True, warmup_init=False, compression=False,
              loss_scale=1.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdaFactor(params, learning_rate, eps, ...)``: `gradxform.mindspore.adafactor`."""
    return adafactor(**locals())


def AdaMax(params, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.0, loss_scale=1.0, *,
           skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdaMax(params, learning_rate, ...)``: `gradxform.mindspore.adamax`."""
    return adamax(**locals())


def Adadelta(params, learning_rate=1.0, rho=0.9, epsilon=1e-6, loss_scale=1.0, weight_decay=0.0, *,
             skip_nonfinite=False) -> GradientTransformation:
    """``nn.Adadelta(params, learning_rate, ...)``: `gradxform.mindspore.adadelta`."""
    return adadelta(**locals())


def Rprop(params, learning_rate=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.), weight_decay=0.0, *,
          skip_nonfinite=False) -> GradientTransformation:
    """``nn.Rprop(params, learning_rate, ...)``: `gradxform.mindspore.rprop`."""
    return rprop(**locals())


def ASGD(params, learning_rate=0.1, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, *,
         skip_nonfinite=False) -> GradientTransformation:
    """``nn.ASGD(params, learning_rate, ...)``: `gradxform.mindspore.asgd`."""
    return asgd(**locals())
