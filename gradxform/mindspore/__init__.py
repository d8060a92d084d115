"""The MindSpore 2.x / TinyMS optimizer family under MindSpore's keywords and
defaults (reached by name as ``gradxform.create('mindspore.<name>', ...)``).

MindSpore's classes take ``params`` first, as in MindSpore
(``Momentum(params, learning_rate, momentum, ...)``, `gradxform.mindspore._classes`);
the snake_case factories keep ``learning_rate`` first and take the
parameters as the keyword ``params=`` (or ``groups=``; see
`gradxform.mindspore._groups`): gradxform sees the parameters at ``init``.
Every learning rate may be a number, a list / 1-D array, or a
`gradxform.schedules` schedule (FTRL: a number only).
"""
from .._registry import register_family
from ..schedules import (CosineDecayLR, ExponentialDecayLR, InverseDecayLR, LearningRateSchedule,
                         NaturalExpDecayLR, PolynomialDecayLR, WarmUpLR)
from . import _adafactor, _adam, _adaptive, _momentum, _rules, _thor
from ._adam import offloaded_moments
from ._classes import (ASGD, AdaFactor, AdaMax, Adadelta, Adagrad, Adam, AdamOffload, AdamWeightDecay, FTRL, LARS,
                       Lamb, LazyAdam, Momentum, ProximalAdagrad, RMSProp, Rprop, SGD)
# MindSpore's learning_rate_schedule classes and dynamic_lr builders (nn.WarmUpLR, nn.warmup_lr, ...)
from ._dynamic_lr import (cosine_decay_lr, exponential_decay_lr, inverse_decay_lr, natural_exp_decay_lr,
                          piecewise_constant_lr, polynomial_decay_lr, warmup_lr)
from ._groups import beta_gamma_filter

# THOR's statistics: gradxform.mindspore.thor_capture
_OPTIMIZERS = register_family("mindspore", (_momentum, _adam, _adaptive, _adafactor, _thor, _rules))
globals().update(_OPTIMIZERS)
__all__ = [*_OPTIMIZERS, "ASGD", "AdaFactor", "AdaMax", "Adadelta", "Adagrad", "Adam", "AdamOffload",
           "AdamWeightDecay", "FTRL", "LARS", "Lamb", "LazyAdam", "Momentum", "ProximalAdagrad", "RMSProp", "Rprop",
           "SGD", "beta_gamma_filter", "offloaded_moments",
           "piecewise_constant_lr", "warmup_lr", "cosine_decay_lr", "exponential_decay_lr", "natural_exp_decay_lr",
           "inverse_decay_lr", "polynomial_decay_lr", "LearningRateSchedule", "WarmUpLR", "PolynomialDecayLR",
           "CosineDecayLR", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR"]
