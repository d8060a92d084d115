"""Where a framework rounds and XLA would not: the one helper that keeps a product
rounded on its own before the addition that follows it.

XLA:CPU (and XLA:GPU through LLVM/NVPTX) contracts ``a * b + c`` inside a jitted program
into a fused multiply-add, rounded once. The frameworks' fused kernels are contracted the
same way by their compilers (GCC's ``-ffp-contract=fast``, nvcc's ``--fmad=true``), so a
rule written in a kernel's order of operations reproduces it to the last bit. A product
that a framework computes as an operator of its own (MindSpore's ``op_mul`` before
``op_add`` in ``_apply_decay``) is rounded before it is added: `rounded` says so.
Measured in tests/test_mindspore_adam_kernel.py (weight decay): without it 5-12 of 4,096
weights differ from MindSpore in their last bit per step.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["rounded"]


def rounded(x):
    """``x``, rounded to its dtype before any later addition reads it (no FMA).

    A select on the value is what stops the contraction (an optimization
    barrier does not: XLA:CPU still fuses across it); NaN stays NaN."""
    # lax's select and compare, not jnp.where: each parameter leaf has several of these, and
    # jnp.where's nested jit costs lowering time (1,000 leaves of MXNet Adam: first call 10.6 s
    # against 11.6 s). The NaN takes the leaf's own sharding: select refuses mixed explicit ones.
    x = jnp.asarray(x)
    nan = lax.broadcast_in_dim(np.array(np.nan, x.dtype), x.shape, (), out_sharding=jax.typeof(x).sharding)
    return lax.select(lax.ne(x, x), nan, x)
