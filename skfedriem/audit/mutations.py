"""Deliberately broken mechanisms, to show that an audit catches them.

An audit that never fails proves nothing. These context managers break the
private step in the ways a bug or an attack would, *while the server and the
accountant still believe the run is private*; an audit run inside them must
report a lower bound above the certified ε. They patch skfedriem's own
modules for the duration of the ``with`` block only and are not thread-safe:
never use them outside an audit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from ..federated import client as client_module
from ..manifolds import manifold_of
from ..privacy import mechanism as mechanism_module

__all__ = ["noise_scaled", "noise_projected_alone"]


@contextmanager
def noise_scaled(factor: float) -> Iterator[None]:
    """Clients add ``factor`` × σ of noise while the server and the accountant charge σ (0: no noise).

    In-process clients only (``backend="local"``).

    Parameters
    ----------
    factor : float
        Multiplier of the clients' noise.

    Yields
    ------
    None
        Inside the ``with`` block the mutation is active.
    """
    honest = client_module.run_client_round

    def miscalibrated(module, theta, data, state, instructions, **kw):
        return honest(module, theta, data, state,
                      dataclasses.replace(instructions, noise_std=factor * instructions.noise_std), **kw)

    with mock.patch.object(client_module, "run_client_round", miscalibrated):
        yield


def _old_noisy_mean(sums, params, *, denominator, noise_std, randomness):
    out = {}
    for name, total in sums.items():
        param = params[name].detach()
        released = total / denominator
        if noise_std > 0:
            noise = noise_std * randomness.standard_normal(tuple(param.shape), param.dtype)
            released = released + manifold_of(params[name]).proju(param, noise)
        out[name] = released
    return out


@contextmanager
def noise_projected_alone() -> Iterator[None]:
    """The step before the fix: ḡ + P_θ(ξ) instead of P_θ(ḡ + ξ).

    The same law when θ is on the manifold; not private when a server sends a
    θ off it, because P_θ can shrink the noise where a clipped gradient keeps
    its norm.
    """
    with mock.patch.object(mechanism_module, "noisy_mean", _old_noisy_mean):
        yield
