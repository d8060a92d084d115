"""``create`` and ``register``: optimizers by name, as ``mx.optimizer.create``.

Names are case-insensitive. A bare name means the MXNet flavour (Gluon's API
is the default); other families are reached by a namespaced name such as
``mindspore.rmsprop`` or ``paddle.asgd``.
"""
from __future__ import annotations

import inspect
import warnings
from typing import Callable

from ._base import GradientTransformation

__all__ = ["create", "register", "registered_names"]

_REGISTRY: dict[str, Callable[..., GradientTransformation]] = {}
DEFAULT_FAMILY = "mxnet"


def register(name: str | None = None, *, family: str = DEFAULT_FAMILY):
    """Decorator: registers an optimizer factory as ``family.name`` (and, for
    the default family, under the bare name). Re-registering a name warns and
    replaces it, as MXNet does."""

    def deco(factory):
        key = f"{family}.{(name or factory.__name__).lower()}"
        if key in _REGISTRY and _REGISTRY[key] is not factory:
            warnings.warn(f"register: {key!r} is being overridden by {factory.__module__}."
                          f"{factory.__qualname__}.", UserWarning, stacklevel=2)
        _REGISTRY[key] = factory
        return factory

    return deco


def registered_names() -> list[str]:
    """Every registered name, namespaced."""
    return sorted(_REGISTRY)


def _resolve(name: str) -> str:
    key = name.lower()
    if "." not in key:
        key = f"{DEFAULT_FAMILY}.{key}"
    return key


def create(name: str, **kwargs) -> GradientTransformation:
    """Builds the optimizer registered under ``name`` with ``kwargs``.

    Raises ValueError for an unknown name (listing the known ones) and
    TypeError for a keyword the optimizer does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"create: name must be a string; got {type(name).__name__}.")
    key = _resolve(name)
    if key not in _REGISTRY:
        bare = sorted(k.split(".", 1)[1] for k in _REGISTRY if k.startswith(DEFAULT_FAMILY + "."))
        others = sorted(k for k in _REGISTRY if not k.startswith(DEFAULT_FAMILY + "."))
        raise ValueError(f"Cannot find optimizer {name!r}. Known names: {', '.join(bare)}"
                         + (f"; and namespaced: {', '.join(others)}" if others else "") + ".")
    factory = _REGISTRY[key]
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as err:
        raise TypeError(f"create({name!r}): {err}") from None
    return factory(**kwargs)
