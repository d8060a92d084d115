"""Gradient centralization (Yong et al. 2020): subtract from a kernel's
gradient (convolution or dense, 2 or more dimensions) its mean over every
axis but the output-channel axis."""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._base import EmptyState, GradientTransformation, transformation
from .._tree import param_names

__all__ = ["centralize_gradients"]
PUBLIC = ("centralize_gradients",)  # what gradxform.pieces re-exports


def _selection(select, tree, output_axis: int, who: str) -> list[bool]:
    """One static bool per leaf; raises for a selected leaf with fewer than 2
    dimensions (a bias or a scale: no axis is left to average over, so its
    gradient would become zero)."""
    leaves_with_path, _ = jax.tree_util.tree_flatten_with_path(tree)
    names = param_names(tree)
    shapes = [tuple(np.shape(x)) for _, x in leaves_with_path]
    if select is None:
        chosen = [True] * len(names)
    elif callable(select):
        chosen = [bool(select(n, s)) for n, s in zip(names, shapes)]
    else:
        chosen = [bool(b) for b in jax.tree.leaves(select)]
        if len(chosen) != len(names):
            raise ValueError(f"{who}(select=...): a tree of {len(chosen)} flags for {len(names)} parameters.")
    for (path, _), shape, c in zip(leaves_with_path, shapes, chosen):
        if c and len(shape) < 2:
            raise ValueError(
                f"{who}: gradient centralization applies only to kernels (2 or more dimensions), but "
                f"params{jax.tree_util.keystr(path)} has shape {shape}; leave it out of the selection.")
        if c and not -len(shape) <= output_axis < len(shape):
            raise ValueError(f"{who}(output_axis={output_axis}): out of range for "
                             f"params{jax.tree_util.keystr(path)} of shape {shape}.")
    return chosen


def centralize_gradients(select: Callable[[str, Sequence[int]], bool] | object | None = None, *,
                         output_axis: int = 0) -> GradientTransformation:
    """``g -> g - mean(g over all axes but output_axis)`` for the selected leaves.

    Args:
      select: which leaves to centralize: None (all), a function
        ``(name, shape) -> bool`` (names as `gradxform.param_names`), or a
        pytree of bools shaped like the parameters. Fixed per structure.
        A selected leaf with fewer than 2 dimensions is not a kernel:
        ``init`` (and ``update``) raise a ValueError naming its path.
      output_axis: the output-channel axis kept when averaging (static):
        0 for MindSpore/PyTorch kernels ``(out, in, kh, kw)``, -1 for
        flax/haiku ``(kh, kw, in, out)``.

    MindSpore (``nn.Optimizer.gradients_centralization``) runs this between
    weight decay and loss-scale division, for parameter groups with
    ``grad_centralization=True``, selecting only gradients of rank >= 2
    whose axis 1 is a multiple of 16 (`gradxform.mindspore` passes that
    rule as ``select``; the rest of such a group is skipped, not an error).
    """

    def init(params):
        _selection(select, params, output_axis, "centralize_gradients")
        return EmptyState()

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        chosen = _selection(select, updates, output_axis, "centralize_gradients")
        leaves, treedef = jax.tree.flatten(updates)
        out = []
        for g, c in zip(leaves, chosen):
            if c:
                ax = output_axis % g.ndim
                axes = tuple(i for i in range(g.ndim) if i != ax)
                g = g - jnp.mean(g, axis=axes, keepdims=True).astype(g.dtype)
            out.append(g)
        return treedef.unflatten(out), state

    return transformation(init, update)
