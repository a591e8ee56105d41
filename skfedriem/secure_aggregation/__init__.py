"""Secure aggregation: the server learns the sum of the sites' releases, even when some drop out, and nothing else.

The protocol of Bonawitz et al. (CCS 2017) on the complete graph, its
threshold and its consistency check (:mod:`~skfedriem.secure_aggregation.session`),
one message a round when no site drops out; every primitive from
``cryptography`` or pycryptodome (:mod:`~skfedriem.secure_aggregation.crypto`,
:mod:`~skfedriem.secure_aggregation.shamir`). The sites' side and its checks:
:mod:`~skfedriem.secure_aggregation.site`; the server's:
:mod:`~skfedriem.secure_aggregation.server`. A deployment runs it over Flower
messages (:mod:`skfedriem.flower.protocol.secure_rounds`).
"""

from .server import RoundAbandoned, ServerSession
from .session import Binding, threshold
from .site import SignedKeys, SiteIdentity, SiteSession

__all__ = ["Binding", "RoundAbandoned", "ServerSession", "SignedKeys", "SiteIdentity", "SiteSession", "threshold"]
