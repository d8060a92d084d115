"""gradxform: functional gradient transformations for JAX, with MXNet, MindSpore
and Paddle optimizers that give their frameworks' numbers step for step."""
from . import lr_scheduler, mxnet, pieces
from ._base import GradientTransformation, apply_updates, chain, identity
from ._hyper import get_hyper, get_learning_rate, hyper_names, set_hyper, set_learning_rate
from ._registry import create, register, registered_names
from ._tree import param_names

__version__ = "0.1.0"

__all__ = [
    "GradientTransformation", "apply_updates", "chain", "identity",
    "create", "register", "registered_names",
    "get_hyper", "set_hyper", "hyper_names", "get_learning_rate", "set_learning_rate",
    "param_names", "lr_scheduler", "mxnet", "pieces",
]
