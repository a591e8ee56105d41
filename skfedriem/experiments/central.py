"""Centralised, non-private training of the study's networks with skorch (the centralised reference arms).

A centralised non-private run is an ordinary supervised fit of one network on
all the training trials: skorch's ``NeuralNetClassifier`` is the tool for it
(epochs over a DataLoader, validation per epoch, ``GridSearchCV``-ready). The
only thing it needs from us is an optimiser that keeps SPDNet's BiMap weights
on the Stiefel manifold (:class:`~skfedriem.manifolds.ProjectedAdam`). Private
centralised arms stay on :class:`~skfedriem.FederatedSPDNetClassifier` with a
single client: skorch has no private step.
"""

from __future__ import annotations

import numpy as np
import torch
from skorch import NeuralNetClassifier
from skorch.callbacks import LRScheduler
from skorch.dataset import Dataset
from skorch.helper import predefined_split
from torch import nn

from ..manifolds import ProjectedAdam
from ..models import EEGNet, SPDNet

__all__ = ["central_net", "net_history"]


def central_net(network: str, *, input_shape: tuple[int, ...], n_classes: int, lr: float, batch_size: int,
                n_rounds: int, dims: tuple[int, ...] = (16,), reeig_eps: float = 1e-4,
                validation: tuple[np.ndarray, np.ndarray] | None = None) -> NeuralNetClassifier:
    """The skorch classifier of a centralised arm: one epoch per federated round, cosine learning rate.

    Parameters
    ----------
    network : {"spdnet", "eegnet"}
    input_shape : tuple of int
        (C, C) covariance matrices for SPDNet, (C, T) raw trials for EEGNet.
    n_classes, lr, batch_size, n_rounds : the arm's settings (``max_epochs = n_rounds``).
    dims, reeig_eps : SPDNet's.
    validation : (X_valid, y_valid), optional
        Encoded labels; skorch reports ``valid_acc`` per epoch on them.

    Returns
    -------
    skorch.NeuralNetClassifier
        Takes float32 inputs and integer labels 0..n_classes-1.
    """
    if network == "spdnet":
        module, kwargs = SPDNet, {"n_channels": input_shape[0], "dims": tuple(dims), "reeig_eps": reeig_eps}
    elif network == "eegnet":
        module, kwargs = EEGNet, {"n_channels": input_shape[0], "n_times": input_shape[1]}
    else:
        raise ValueError(f"The 'network' parameter must be 'spdnet' or 'eegnet'. Got {network!r} instead.")
    split = False
    if validation is not None:
        split = predefined_split(Dataset(validation[0].astype(np.float32), validation[1].astype(np.int64)))
    return NeuralNetClassifier(
        module, criterion=nn.CrossEntropyLoss, optimizer=ProjectedAdam, lr=lr, batch_size=batch_size,
        max_epochs=n_rounds, train_split=split, iterator_train__shuffle=True, verbose=0,
        callbacks=[("lr", LRScheduler(policy=torch.optim.lr_scheduler.CosineAnnealingLR, T_max=n_rounds))],
        **{f"module__{k}": v for k, v in {**kwargs, "n_classes": n_classes}.items()},
    )


def net_history(net: NeuralNetClassifier) -> list[dict]:
    """Per-epoch ``round`` and ``valid_accuracy`` (and ε = inf) from a fitted net, as the study's curves want.

    Parameters
    ----------
    net : skorch.NeuralNetClassifier
        Fitted.

    Returns
    -------
    list of dict
    """
    return [{"round": row["epoch"], "valid_accuracy": row.get("valid_acc", float("nan")), "epsilon": float("inf")}
            for row in net.history]
