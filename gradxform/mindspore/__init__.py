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
from . import _adafactor, _adam, _adaptive, _momentum, _thor
from ._adam import offloaded_moments
from ._classes import (AdaFactor, Adagrad, Adam, AdamOffload, AdamWeightDecay, FTRL, LARS, Lamb, LazyAdam, Momentum,
                       ProximalAdagrad, RMSProp, SGD)
from ._groups import beta_gamma_filter

# THOR's statistics: gradxform.mindspore.thor_capture
_OPTIMIZERS = register_family("mindspore", (_momentum, _adam, _adaptive, _adafactor, _thor))
globals().update(_OPTIMIZERS)
__all__ = [*_OPTIMIZERS, "AdaFactor", "Adagrad", "Adam", "AdamOffload", "AdamWeightDecay", "FTRL", "LARS", "Lamb",
           "LazyAdam", "Momentum", "ProximalAdagrad", "RMSProp", "SGD", "beta_gamma_filter", "offloaded_moments"]
