"""Warnings attributed to the user's line, however deep inside gradxform they arise."""
from __future__ import annotations

import os
import sys
import warnings
from typing import cast

import jax
import optax

__all__ = ["warn_at_caller"]


def _package_dir(module_file: str) -> str:
    return os.path.dirname(os.path.abspath(module_file)) + os.sep


# gradxform's own frames, and the JAX and optax frames between a user's call and ours
# (`jax.jit(tx.init)`, `optax.chain(...).init`): a warning pointing there tells nobody anything.
_SKIPPED = tuple(_package_dir(cast(str, m.__file__)) for m in (sys.modules[cast(str, __package__)], jax, optax))


def warn_at_caller(message: str) -> None:
    """A UserWarning attributed to the first frame outside gradxform (and outside JAX and
    optax, which may sit between): the user's call, however deep inside it the warning is
    raised (a fixed ``stacklevel`` pointed into gradxform, and shifts with Python's
    comprehension frames; 3.11 has no ``skip_file_prefixes``)."""
    frame, level = sys._getframe(1), 2  # stacklevel 2 is this function's caller
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)
