"""The MXNet 1.x optimizer family under MXNet's names, keywords and defaults."""
from .._registry import by_class_name, register_family
from . import _adaptive, _momentum
from . import _layerwise
from ._common import with_common_keywords
from ._updater import Updater, get_updater

# help() lists the common keywords (wd, rescale_grad, clip_gradient, lr_mult, ...)
_OPTIMIZERS = register_family("mxnet", (_momentum, _adaptive), wrap=with_common_keywords)
_OPTIMIZERS.update(register_family("mxnet", (_layerwise,), wrap=with_common_keywords))
globals().update(_OPTIMIZERS)
__getattr__ = by_class_name(_OPTIMIZERS, __name__)  # mx.optimizer.SGD(...), NAG, RMSProp
__all__ = [*_OPTIMIZERS, "Updater", "get_updater"]
