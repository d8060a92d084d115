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
