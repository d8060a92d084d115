"""The MindSpore 2.x / TinyMS optimizer family under MindSpore's keywords and
defaults (reached by name as ``gradxform.create('mindspore.<name>', ...)``).

Parameters are passed to ``init``, not at construction; MindSpore's
``params`` list of group dicts is the ``groups=`` keyword (see
`gradxform.mindspore._groups`). Every learning rate may be a number, a list / 1-D
array, or a `gradxform.schedules` schedule (FTRL: a number only).
"""
from ._common import accepts_params
from ._groups import beta_gamma_filter
from .._optimizer import with_guard_option
from .._registry import register
from ._adafactor import adafactor
from ._adam import adam, adam_offload, adam_weight_decay, lamb, lazy_adam, offloaded_moments
from ._adaptive import adagrad, ftrl, proximal_adagrad, rmsprop
from ._momentum import lars, momentum, sgd

# every gradxform optimizer takes skip_nonfinite=...; MindSpore's params (positional or params=)
(momentum, sgd, lars, adam, adam_weight_decay, lazy_adam, adam_offload, lamb, adagrad, proximal_adagrad,
 ftrl, rmsprop, adafactor) = (accepts_params(with_guard_option(f)) for f in (
    momentum, sgd, lars, adam, adam_weight_decay, lazy_adam, adam_offload, lamb, adagrad, proximal_adagrad, ftrl,
    rmsprop, adafactor))

__all__ = [
    "momentum", "sgd", "lars", "adam", "adam_weight_decay", "lazy_adam", "adam_offload", "lamb",
    "adagrad", "proximal_adagrad", "ftrl", "rmsprop", "adafactor", "beta_gamma_filter",
    "offloaded_moments",
]

for _f in (momentum, sgd, lars, adam, adam_weight_decay, lazy_adam, adam_offload, lamb, adagrad,
           proximal_adagrad, ftrl, rmsprop, adafactor):
    register(family="mindspore")(_f)
del _f

# -- THOR (issue 15; gradxform/mindspore/_thor.py, statistics: gradxform.mindspore.thor_capture) --
from ._thor import thor  # noqa: E402
register(family="mindspore")(thor := with_guard_option(thor)); __all__.append("thor")  # noqa: E702
