"""The study's arms: which estimator each trains, on which inputs, federated or centralised, with which settings.

The study (:mod:`skfedriem.experiments.eeg`) runs them and the report
(:mod:`skfedriem.experiments.report`) ranks the federated ones; both read this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ARMS", "ARM_SPECS", "Arm"]


@dataclass(frozen=True)
class Arm:
    """One arm of the study: which estimator, on which inputs, federated or centralised, with which settings.

    Parameters
    ----------
    name : str
        The arm's label in tables and figures.
    network : {"spdnet", "tangent", "eegnet"}
        SPDNet and the tangent-space classifier train on the trials' covariance
        matrices, EEGNet on the raw trials.
    central : bool, default=False
        All training trials in one client (the centralised reference); else
        one client per group of subjects, with the study's participation.
    settings : dict, default={}
        Extra estimator parameters (aggregation, sampling, accounting, noise).
    private_only : bool, default=False
        Run at the study's finite ε only (distributed noise: without privacy
        the arm is its local-noise twin).
    """

    name: str
    network: str
    central: bool = False
    settings: dict = field(default_factory=dict)
    private_only: bool = False

    @property
    def takes_covariances(self) -> bool:
        return self.network in ("spdnet", "tangent")


_DISTRIBUTED = {"noise": "distributed"}
ARM_SPECS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("projavg", "spdnet", settings={"aggregation": "projavg"}),
    Arm("rlavg", "spdnet", settings={"aggregation": "rlavg"}),
    Arm("retavg", "spdnet", settings={"aggregation": "retavg"}),
    Arm("prirfed", "spdnet", settings={"aggregation": "retavg", "sampling": "poisson", "accounting": "prirfed"}),
    Arm("eegnet", "eegnet"),
    Arm("tangent", "tangent"),
    # the noise paid once on the clients' sum (secure aggregation): one step a round, so no aggregation rule
    Arm("spdnet-distributed", "spdnet", settings=_DISTRIBUTED, private_only=True),
    Arm("eegnet-distributed", "eegnet", settings=_DISTRIBUTED, private_only=True),
    Arm("tangent-distributed", "tangent", settings=_DISTRIBUTED, private_only=True),
    Arm("central-spdnet", "spdnet", central=True),
    Arm("central-eegnet", "eegnet", central=True),
)}
ARMS = tuple(ARM_SPECS)
