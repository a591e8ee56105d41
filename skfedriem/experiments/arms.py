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
        Extra estimator parameters (aggregation, sampling, accounting).
    paper_schedule : bool, default=True
        Train with the dataset's paper settings (lr, batch size, rounds); else
        with the estimator's planned ``"auto"`` schedule.
    """

    name: str
    network: str
    central: bool = False
    settings: dict = field(default_factory=dict)
    paper_schedule: bool = True

    @property
    def takes_covariances(self) -> bool:
        return self.network in ("spdnet", "tangent")


ARM_SPECS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("projavg", "spdnet", settings={"aggregation": "projavg"}),
    Arm("rlavg", "spdnet", settings={"aggregation": "rlavg"}),
    Arm("retavg", "spdnet", settings={"aggregation": "retavg"}),
    Arm("prirfed", "spdnet", settings={"aggregation": "retavg", "sampling": "poisson", "accounting": "prirfed"}),
    Arm("eegnet", "eegnet"),
    Arm("central-spdnet", "spdnet", central=True),
    Arm("central-eegnet", "eegnet", central=True),
    Arm("planned", "spdnet", settings={"aggregation": "projavg"}, paper_schedule=False),
    Arm("tangent", "tangent", paper_schedule=False),
)}
ARMS = tuple(ARM_SPECS)
