"""A site's last replies, by request: a request repeated after a server crash gets the same answer.

A resumed server sends again the round it was running when it crashed: the
same θ_t and the same instructions. Answering with a fresh release would
spend privacy twice on one round; answering with the earlier reply spends
nothing new (it is what the server may already have seen). A request that
differs in any bit (another θ, another σ) is a new release, charged as such.
Each reply is kept with the label of the ledger charge that paid for it, and
served again only while the ledger holds that charge: a reply whose charge
is not in the ledger (a ledger replaced or rolled back) is a new release.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import torch

from ..._utils.files import write_atomically

from ...federated.instructions import RoundInstructions

__all__ = ["ReplyCache"]


class ReplyCache:
    """The last ``keep`` replies of a site, in ``folder`` (files the site owns, next to its ledger).

    A resumed round older than the last ``keep`` requests is a new release,
    charged anew by the site's ledger (the server's certificate counts the
    round once, and it averages one reply of each site).
    """

    def __init__(self, folder: str | Path, *, keep: int = 256) -> None:
        self.folder = Path(folder)
        self.keep = keep

    @staticmethod
    def key(theta: dict[str, torch.Tensor], instructions: RoundInstructions, scope: str = "") -> str:
        """A digest of the whole request: every block of θ_t bit for bit, the instructions, and ``scope`` (what
        else defines the model the request runs on: its kind and run configuration)."""
        h = hashlib.sha256(json.dumps([scope, asdict(instructions)], sort_keys=True).encode())
        for name in sorted(theta):
            value = theta[name].detach().contiguous()
            h.update(f"{name}|{tuple(value.shape)}|{value.dtype}".encode())
            h.update(value.numpy().tobytes())
        return h.hexdigest()

    def get(self, key: str, *, charged: set[str]) -> tuple[dict[str, torch.Tensor], float] | None:
        """The reply already given to this request, if any and if its charge is among ``charged`` (the ledger's)."""
        path = self.folder / f"{key}.pt"
        if not path.exists():
            return None
        saved = torch.load(path, weights_only=True)
        if saved.get("charge") not in charged:
            return None
        return saved["submission"], float(saved["seconds"])

    def put(self, key: str, submission: dict[str, torch.Tensor], seconds: float, *, charge: str) -> None:
        """Keep this reply and the label of the charge that paid for it (written atomically, before it is sent);
        forget the oldest beyond ``keep``."""
        write_atomically(self.folder / f"{key}.pt",
                         lambda f: torch.save({"submission": submission, "seconds": seconds, "charge": charge}, f))
        replies = sorted(self.folder.glob("*.pt"), key=lambda p: p.stat().st_mtime)
        for old in replies[: max(0, len(replies) - self.keep)]:
            old.unlink(missing_ok=True)
