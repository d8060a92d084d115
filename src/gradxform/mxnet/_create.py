"""``mx.optimizer.create`` and ``mx.optimizer.register`` under their MXNet names.

``create(name, **kwargs)``: the optimizer MXNet registers as ``name``
(case-insensitive; ``'sgd'``, ``'Adam'``, ``'nag'``), built with keywords
only, as MXNet's ``Optimizer.create_optimizer``. ``register(klass)``: adds
``klass`` (a function or class returning a transformation) under its own
``__name__``, lower-cased, and returns it, as MXNet's ``Optimizer.register``;
``create(klass.__name__)`` then builds it. Both are `gradxform.create` /
`gradxform.register` restricted to the MXNet family.
"""
from __future__ import annotations

from .._base import GradientTransformation
from .. import _registry

__all__ = ["create", "register"]


def create(name: str, **kwargs) -> GradientTransformation:
    """``mx.optimizer.create(name, **kwargs)``: the MXNet optimizer ``name``
    (`gradxform.registered_names` lists them as ``'mxnet.<name>'``)."""
    if isinstance(name, str) and "." in name:
        raise ValueError(f"gradxform.mxnet.create({name!r}): takes MXNet's names (such as 'sgd' or 'adam'); "
                         f"for another family's optimizer call gradxform.create({name!r}).")
    return _registry.create(f"mxnet.{name}" if isinstance(name, str) else name, **kwargs)


def register(klass):
    """``mx.optimizer.register(klass)``: registers ``klass`` as ``'mxnet.<klass.__name__>'``; returns it."""
    return _registry.register(klass, family="mxnet")
