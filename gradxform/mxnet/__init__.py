"""The MXNet 1.x optimizer family under MXNet's names, keywords and defaults."""
from .._registry import register
from ._adaptive import adadelta, adagrad, adam, adamax, ftml, ftrl, nadam, rmsprop
from ._momentum import ccsgd, dcasgd, lbsgd, nag, sgd, sgld, signum
from ._common import with_common_keywords
from ._updater import Updater, get_updater

__all__ = [
    "sgd", "ccsgd", "nag", "signum", "lbsgd", "dcasgd", "sgld", "adam", "adamax", "nadam",
    "adagrad", "rmsprop", "adadelta", "ftml", "ftrl", "Updater", "get_updater",
]

for _f in (sgd, ccsgd, nag, signum, lbsgd, dcasgd, sgld, adam, adamax, nadam, adagrad, rmsprop,
           adadelta, ftml, ftrl):
    register(family="mxnet")(with_common_keywords(_f))  # help() lists the common keywords
del _f
