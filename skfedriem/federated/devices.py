"""Where simulated clients compute: a torch device named by the user, checked against this machine."""

from __future__ import annotations

import torch

__all__ = ["resolve_device"]


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device ``device`` names, or a ValueError naming it (unknown, or not available on this machine).

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:N"``...

    Returns
    -------
    torch.device

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"The 'device' parameter must name a torch device such as 'cpu' or 'cuda'. "
                         f"Got {device!r} instead ({error}).") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"The 'device' parameter is {device!r}, but torch finds no CUDA device on this machine "
                         "(torch.cuda.is_available() is False). Use device='cpu'.")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"The 'device' parameter is {device!r}, but this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s).")
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"The 'device' parameter must be a 'cpu' or 'cuda' device. Got {device!r} instead.")
    return resolved
