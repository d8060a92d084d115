"""The MXNet 1.x optimizer family under MXNet's names, keywords and defaults:
snake_case factories (``sgd(learning_rate, momentum, ...)``), MXNet's
classes in MXNet's positional order (``SGD(momentum, lazy_update, ...)``,
`gradxform.mxnet._classes`), ``create`` / ``register`` as ``mx.optimizer``'s."""
from .._registry import register_family
from . import _adaptive, _layerwise, _momentum
from ._classes import (AdaDelta, AdaGrad, Adam, Adamax, DCASGD, FTML, Ftrl, GroupAdaGrad, LAMB, LARS, LBSGD, NAG,
                       Nadam, RMSProp, SGD, SGLD, Signum, ccSGD)
from ._create import create, register
from ._updater import Updater, get_updater

_OPTIMIZERS = register_family("mxnet", (_momentum, _adaptive, _layerwise))
globals().update(_OPTIMIZERS)
__all__ = [*_OPTIMIZERS, "AdaDelta", "AdaGrad", "Adam", "Adamax", "DCASGD", "FTML", "Ftrl", "GroupAdaGrad", "LAMB",
           "LARS", "LBSGD", "NAG",
           "Nadam", "RMSProp", "SGD", "SGLD", "Signum", "ccSGD", "create", "register", "Updater", "get_updater"]
