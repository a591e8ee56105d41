"""A model's fixed public feature map, computed once per fit rather than at every local step.

A model whose first layers hold no parameter and read nothing but public
values (the tangent-space classifier's trace normalisation and tangent map at
a public reference) declares them in its
:class:`~skfedriem.privacy.ModelCapabilities`: ``fixed_features(model)``
gives the map of each record's features, and the trained rest of the model,
reading those features, with the very parameters (same objects, same names)
of the whole model.

The clients then map their records once, before the first round, and train
the rest: every step's per-record gradients are those of the whole model at
the same θ (the map has no parameter to differentiate), so the mechanism, the
sampler and every charge are unchanged; only the eigendecompositions of each
record at each step are saved. Each record is mapped on its own, so a record's
features can depend on that record alone whatever the map does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from ..privacy.per_record.capabilities import capabilities_of
from ..privacy.per_record.per_sample import trainable_parameters
from .client import ClientRecipe
from .lockstep import lockstep_eligible

__all__ = ["on_fixed_features"]


def on_fixed_features(recipe: ClientRecipe, clients: Sequence[tuple[torch.Tensor, ...]]
                      ) -> tuple[ClientRecipe, list[tuple[torch.Tensor, ...]]]:
    """The recipe and records the clients train on: the model's trained part on features computed once.

    A model that declares no fixed feature map (module docstring) is returned
    as it is, with its records.

    Parameters
    ----------
    recipe : ClientRecipe
        The clients' recipe (its module is their working copy).
    clients : sequence of tuple of Tensor
        Client i's records ``(inputs, *targets)``.

    Returns
    -------
    recipe : ClientRecipe
        With the model's trained part as its module (lockstep kept where
        :func:`~skfedriem.federated.lockstep.lockstep_eligible` allows it for
        that part).
    clients : list of tuple of Tensor
        Client i's ``(features, *targets)`` (and its subjects, which follow its targets).

    Raises
    ------
    TypeError
        When the trained part's parameters are not the whole model's.
    """
    module = recipe.module
    split = capabilities_of(module).fixed_features
    if split is None:
        return recipe, list(clients)
    mapping, head = split(module)
    whole, trained = trainable_parameters(module), trainable_parameters(head)
    if set(whole) != set(trained) or any(whole[name] is not trained[name] for name in whole):
        raise TypeError(f"{type(module).__name__}'s fixed_features must give a head training every parameter of "
                        f"the whole model under the same names; it trains {sorted(trained)} of {sorted(whole)}.")
    with torch.no_grad():
        mapped = [(torch.cat([mapping(x.unsqueeze(0)) for x in records[0]]), *records[1:]) for records in clients]
    # the rule again, for the module the clients now train (both samplings are eligible: the recipe's lockstep
    # already holds for the run's)
    lockstep = recipe.lockstep and lockstep_eligible(head, recipe.optimizer, "fixed", recipe.unit)
    return dataclasses.replace(recipe, module=head, lockstep=lockstep), mapped
