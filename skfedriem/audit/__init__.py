"""Empirical privacy audits: lower bounds on ε from runs of the estimators, to set beside the certified ε.

* :func:`audit_federated_pca`: whole FederatedPCA runs on neighbouring
  federations with a worst-case canary; :func:`audit_off_manifold_server`: a
  client's step against a server that sends θ off the manifold.
* :func:`audit_scores`: the bounds (Clopper–Pearson, then the certified
  family and the assumption-free (ε, δ) bound) for any distinguisher's scores.
* :mod:`skfedriem.audit.mutations`: broken mechanisms that an audit must catch.
"""

from .bounds import AuditResult, audit_scores, clopper_pearson_upper, family_tradeoff, mu0_lower_bound
from .pca import audit_federated_pca, audit_off_manifold_server, canary_federation

__all__ = [
    "AuditResult",
    "audit_federated_pca",
    "audit_off_manifold_server",
    "audit_scores",
    "canary_federation",
    "clopper_pearson_upper",
    "family_tradeoff",
    "mu0_lower_bound",
]
