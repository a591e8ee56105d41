"""Empirical privacy audits: lower bounds on ε from runs of the estimators, to set beside the certified ε.

* :func:`audit_federated_pca`: whole FederatedPCA runs (the Riemannian solver)
  on neighbouring federations with a worst-case canary;
  :func:`audit_covariance_release`: the one-shot release of the default solver;
  :func:`audit_spdnet_classifier`: whole FederatedSPDNetClassifier fits with a
  label-flip canary; :func:`audit_subject_level`: FederatedPCA fits whose
  neighbours differ in a whole subject of several trials.
* :func:`audit_client_rounds`: a client's successive rounds on a two-block
  model (:class:`TwoBlocks`) against a static or an adaptive server (θ and
  clip changed between rounds); :func:`audit_off_manifold_server`: a client's
  step against a server that sends θ off the manifold.
* :func:`audit_distributed_rounds`: K clients' rounds of distributed noise,
  the server's decoded sum and t colluders' shares (shares sized by K, shares
  from a public seed and a sum decoded short of K − t shares are caught).
* :func:`audit_personal_release`: a client's release of its own mean
  (``recentre="client"``), with a near-worst-case pair of canary trials.
* :func:`audit_scores`: the bounds (Clopper–Pearson, then the certified
  family and the assumption-free (ε, δ) bound) for any distinguisher's scores.
* :func:`subject_pair_epsilon`: what one concrete pair of federations shows a
  run sampling k records of each subject costs the subject (exact, no runs).
* :mod:`skfedriem.audit.mutations`: broken mechanisms that an audit must catch.
"""

from .bounds import AuditResult, audit_scores, clopper_pearson_upper, family_tradeoff, mu0_lower_bound
from .classifier import audit_spdnet_classifier, canary_trials
from .client_rounds import TwoBlocks, audit_client_rounds
from .distributed import audit_distributed_rounds
from .personal import audit_personal_release
from .pca import (audit_covariance_release, audit_federated_pca, audit_off_manifold_server, audit_subject_level,
                  canary_federation)
from .subject_pair import subject_pair_epsilon

__all__ = [
    "AuditResult",
    "TwoBlocks",
    "audit_client_rounds",
    "audit_covariance_release",
    "audit_distributed_rounds",
    "audit_federated_pca",
    "audit_off_manifold_server",
    "audit_personal_release",
    "audit_scores",
    "audit_spdnet_classifier",
    "audit_subject_level",
    "canary_federation",
    "canary_trials",
    "clopper_pearson_upper",
    "family_tradeoff",
    "mu0_lower_bound",
    "subject_pair_epsilon",
]
