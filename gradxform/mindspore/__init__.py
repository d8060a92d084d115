"""The MindSpore 2.x / TinyMS optimizer family under MindSpore's keywords and
defaults (reached by name as ``gradxform.create('mindspore.<name>', ...)``).

Parameters are passed to ``init``, not at construction; MindSpore's
``params`` list of group dicts is the ``groups=`` keyword (see
`gradxform.mindspore._groups`). Every learning rate may be a number, a list / 1-D
array, or a `gradxform.schedules` schedule (FTRL: a number only).
"""
from .._optimizer import with_guard_option
from .._registry import by_class_name, register_family
from . import _adafactor, _adam, _adaptive, _momentum, _thor
from . import _rules
from ._adam import offloaded_moments
from ._common import accepts_params
from ._groups import beta_gamma_filter

# every gradxform optimizer takes skip_nonfinite=...; MindSpore's params (positional or params=)
_OPTIMIZERS = register_family("mindspore", (_momentum, _adam, _adaptive, _adafactor),
                              wrap=lambda f: accepts_params(with_guard_option(f)))
_OPTIMIZERS.update(register_family("mindspore", (_rules,), wrap=lambda f: accepts_params(with_guard_option(f))))
# THOR's statistics: gradxform.mindspore.thor_capture
_OPTIMIZERS.update(register_family("mindspore", (_thor,), wrap=with_guard_option))
globals().update(_OPTIMIZERS)
__getattr__ = by_class_name(_OPTIMIZERS, __name__)  # nn.Momentum(...), nn.AdamWeightDecay(...)
__all__ = [*_OPTIMIZERS, "beta_gamma_filter", "offloaded_moments"]
# MindSpore's learning_rate_schedule classes and dynamic_lr builders (nn.WarmUpLR, nn.warmup_lr, ...)
from ._dynamic_lr import (cosine_decay_lr, exponential_decay_lr, inverse_decay_lr, natural_exp_decay_lr,
                          piecewise_constant_lr, polynomial_decay_lr, warmup_lr)
from ..schedules import (CosineDecayLR, ExponentialDecayLR, InverseDecayLR, LearningRateSchedule,
                         NaturalExpDecayLR, PolynomialDecayLR, WarmUpLR)
__all__ += ["piecewise_constant_lr", "warmup_lr", "cosine_decay_lr", "exponential_decay_lr", "natural_exp_decay_lr",
            "inverse_decay_lr", "polynomial_decay_lr", "LearningRateSchedule", "WarmUpLR", "PolynomialDecayLR",
            "CosineDecayLR", "ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR"]
