"""Baselines the paper compares against: PriRFed's accounting (registered as ``accounting="prirfed"``) and noise."""

from .prirfed import (
    PriRFedAccounting,
    advanced_composition,
    intrinsic_tangent_noise,
    prirfed_calibrate_mu0,
    prirfed_epsilon,
)

__all__ = ["PriRFedAccounting", "advanced_composition", "intrinsic_tangent_noise", "prirfed_calibrate_mu0",
           "prirfed_epsilon"]
