"""MXNet 1.9.1's optimizer classes, in MXNet's own positional order.

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
from __future__ import annotations

from .._base import GradientTransformation
from ._adaptive import adadelta, adagrad, adam, adamax, ftml, ftrl, nadam, rmsprop
from ._layerwise import groupadagrad, lamb, lars
from ._momentum import ccsgd, dcasgd, lbsgd, nag, sgd, sgld, signum

__all__ = ["AdaDelta", "AdaGrad", "Adam", "Adamax", "DCASGD", "FTML", "Ftrl", "GroupAdaGrad", "LAMB", "LARS",
           "LBSGD", "NAG", "Nadam", "RMSProp", "SGD", "SGLD", "Signum", "ccSGD"]

Adam, Adamax, LAMB, Nadam, RMSProp, Signum, SGLD = adam, adamax, lamb, nadam, rmsprop, signum, sgld


def AdaDelta(rho=0.90, epsilon=1e-5, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
             learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
             lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
             use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.AdaDelta(rho, epsilon, **kwargs)``: `gradxform.mxnet.adadelta`."""
    return adadelta(**locals())


def AdaGrad(eps=1e-7, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None, learning_rate=None,
            lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None, lr_mult=None,
            wd_mult=None, skip_nonfinite=False, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.AdaGrad(eps, **kwargs)``: `gradxform.mxnet.adagrad`."""
    return adagrad(**locals())


def DCASGD(momentum=0.0, lamda=0.04, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
           learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
           lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
           use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.DCASGD(momentum, lamda, **kwargs)``: `gradxform.mxnet.dcasgd`."""
    return dcasgd(**locals())


def FTML(beta1=0.6, beta2=0.999, epsilon=1e-8, *, rescale_grad=1.0, param_idx2name=None, wd=0.0,
         clip_gradient=None, learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False,
         param_dict=None, lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
         use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.FTML(beta1, beta2, epsilon, **kwargs)``: `gradxform.mxnet.ftml`."""
    return ftml(**locals())


def Ftrl(lamda1=0.01, learning_rate=0.1, beta=1.0, *, rescale_grad=1.0, param_idx2name=None, wd=0.0,
         clip_gradient=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
         lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
         use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.Ftrl(lamda1, learning_rate, beta, **kwargs)``: `gradxform.mxnet.ftrl`."""
    return ftrl(**locals())


def LBSGD(momentum=0.0, multi_precision=False, warmup_strategy="linear", warmup_epochs=5, batch_scale=1,
          updates_per_epoch=32, begin_epoch=0, num_epochs=60, *, rescale_grad=1.0, param_idx2name=None, wd=0.0,
          clip_gradient=None, learning_rate=None, lr_scheduler=None, begin_num_update=0, param_dict=None,
          lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.LBSGD(momentum, multi_precision, warmup_strategy, warmup_epochs,
    batch_scale, updates_per_epoch, begin_epoch, num_epochs, **kwargs)``: `gradxform.mxnet.lbsgd`."""
    return lbsgd(**locals())


def NAG(momentum=0.0, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None, learning_rate=None,
        lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None, lr_mult=None,
        wd_mult=None, skip_nonfinite=False, aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.NAG(momentum, **kwargs)``: `gradxform.mxnet.nag`."""
    return nag(**locals())


def SGD(momentum=0.0, lazy_update=False, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
        learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
        lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
        use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.SGD(momentum, lazy_update, **kwargs)``: `gradxform.mxnet.sgd`."""
    return sgd(**locals())


def ccSGD(momentum=0.0, lazy_update=False, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
          learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
          lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
          use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.ccSGD(*args, **kwargs)`` (deprecated in MXNet, SGD's arguments): `gradxform.mxnet.ccsgd`."""
    return ccsgd(**locals())


def LARS(momentum=0.0, lazy_update=False, eta=0.001, eps=0.0, momentum_correction=True, *, rescale_grad=1.0,
         param_idx2name=None, wd=0.0, clip_gradient=None, learning_rate=None, lr_scheduler=None, begin_num_update=0,
         multi_precision=False, param_dict=None, lr_mult=None, wd_mult=None, skip_nonfinite=False,
         aggregate_num=None, use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.LARS(momentum, lazy_update, eta, eps, momentum_correction, **kwargs)``:
    `gradxform.mxnet.lars`."""
    return lars(**locals())


def GroupAdaGrad(eps=1e-5, *, rescale_grad=1.0, param_idx2name=None, wd=0.0, clip_gradient=None,
                 learning_rate=None, lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
                 lr_mult=None, wd_mult=None, skip_nonfinite=False, aggregate_num=None,
                 use_fused_step=None) -> GradientTransformation:
    """``mx.optimizer.contrib.GroupAdaGrad(eps, **kwargs)``: `gradxform.mxnet.groupadagrad`."""
    return groupadagrad(**locals())
