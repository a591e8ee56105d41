"""Baselines the paper compares against (SPEC §5, §6)."""

from .prirfed import advanced_composition, intrinsic_tangent_noise, prirfed_calibrate_mu0, prirfed_epsilon

__all__ = ["advanced_composition", "intrinsic_tangent_noise", "prirfed_calibrate_mu0", "prirfed_epsilon"]
