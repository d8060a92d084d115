"""The MindSpore 2.x / TinyMS optimizer family under MindSpore's keywords and
defaults (reached by name as ``gradxform.create('mindspore.<name>', ...)``).

MindSpore's classes take ``params`` first, as in MindSpore
(``Momentum(params, learning_rate, momentum, ...)``, each beside its
factory, listed in its module's ``CLASSES``); the snake_case factories keep
``learning_rate`` first and take the parameters as the keyword ``params=``
(or ``groups=``; see `gradxform.mindspore._groups`): gradxform sees the
parameters at ``init``.
Every learning rate may be a number, a list / 1-D array, or a
`gradxform.schedules` schedule (FTRL: a number only).

Each class takes MindSpore's positional order, its first argument ``params`` (a list of group
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
from .._registry import family_classes, register_family
from ..schedules import (CosineDecayLR, ExponentialDecayLR, InverseDecayLR, LearningRateSchedule,
                         NaturalExpDecayLR, PolynomialDecayLR, WarmUpLR)
from . import _adafactor, _adam, _adaptive, _momentum, _rules, _thor
from ._adam import offloaded_moments
# MindSpore's learning_rate_schedule classes and dynamic_lr builders (nn.WarmUpLR, nn.warmup_lr, ...)
from ._dynamic_lr import (cosine_decay_lr, exponential_decay_lr, inverse_decay_lr, natural_exp_decay_lr,
                          piecewise_constant_lr, polynomial_decay_lr, warmup_lr)
from ._get_lr import get_lr, get_lr_parameter
from ._groups import beta_gamma_filter

# THOR's statistics: gradxform.mindspore.thor_capture
_MODULES = (_momentum, _adam, _adaptive, _adafactor, _thor, _rules)
_OPTIMIZERS = register_family("mindspore", _MODULES)
_CLASSES = family_classes(_MODULES)
globals().update(_OPTIMIZERS, **_CLASSES)
__all__ = [*_OPTIMIZERS, *_CLASSES, "get_lr", "get_lr_parameter", "beta_gamma_filter", "offloaded_moments",
           "piecewise_constant_lr", "warmup_lr", "cosine_decay_lr", "exponential_decay_lr", "natural_exp_decay_lr",
           "inverse_decay_lr", "polynomial_decay_lr", "LearningRateSchedule", "WarmUpLR", "PolynomialDecayLR",
           "CosineDecayLR", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR"]
