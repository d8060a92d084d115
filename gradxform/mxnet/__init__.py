"""The MXNet 1.x optimizer family under MXNet's names, keywords and defaults:
snake_case factories (``sgd(learning_rate, momentum, ...)``), MXNet's
classes in MXNet's positional order (``SGD(momentum, lazy_update, ...)``,
each beside its factory, listed in its module's ``CLASSES``), ``create`` /
``register`` as ``mx.optimizer``'s.

``mx.optimizer.AdaDelta(0.9)`` sets ``rho``: each class here takes its
arguments in the order of MXNet's ``__init__`` (``AdaDelta(rho, epsilon)``,
``SGD(momentum, lazy_update)``, ``Ftrl(lamda1, learning_rate, beta)``,
``LBSGD(momentum, multi_precision, warmup_strategy, ...)``), and the base
``Optimizer`` keywords (``rescale_grad, param_idx2name, wd, clip_gradient,
learning_rate, lr_scheduler, begin_num_update, multi_precision,
param_dict``) by keyword, as MXNet's ``**kwargs`` pass them, plus
gradxform's own (``lr_mult``, ``wd_mult``, ``skip_nonfinite``,
``aggregate_num``, ``use_fused_step``). Each one forwards every argument by
name to the snake_case factory (`gradxform.mxnet.adadelta`, ...), which
keeps ``learning_rate`` first, so the rule, its checks and its messages are
the factory's. Where MXNet's order already starts with ``learning_rate``
(Adam, Adamax, Nadam, RMSProp, Signum, SGLD) the class is the factory itself.

``lazy_update`` defaults to False: MXNet's True acts only on row_sparse
gradients, and a dense JAX gradient gets MXNet's dense numbers with False.
"""
from .._registry import family_classes, register_family
from . import _adaptive, _layerwise, _momentum
from ._create import create, register
from ._updater import Updater, get_updater

_MODULES = (_momentum, _adaptive, _layerwise)
_OPTIMIZERS = register_family("mxnet", _MODULES)
_CLASSES = family_classes(_MODULES)
globals().update(_OPTIMIZERS, **_CLASSES)
__all__ = [*_OPTIMIZERS, *_CLASSES, "create", "register", "Updater", "get_updater"]
