"""EEGNet (Lawhern et al., 2018), the Euclidean baseline, without batch normalisation.

Written here rather than imported from braindecode: braindecode 1.8 pulls
torchaudio 2.11, whose PyPI wheel is a CUDA build that fails to import next to
the CPU torch 2.13 this project pins, and no torchaudio 2.13 exists. The
network is short.

Changes from the original, both for record-level DP:

* Batch normalisation (in training mode it mixes the records of a batch and
  raises the sensitivity from 2C/B to 2C; see the user guide, "The method") is
  replaced by a normalisation of each record on its own: layer normalisation
  (Ba et al., 2016; ``"group"``: group normalisation, Wu and He, 2018) after
  the spatial and the pointwise convolutions, the
  layers the original normalises after its fused temporal-spatial block and its
  separable convolution. Without anything between the layers the network did
  not learn the 24 real PhysioNet subjects (docs: user guide, EEG).
  ``normalization=None`` is the paper's variant (nothing in its place; each
  convolution gets a bias, BatchNorm's shift).
* Dropout is left out: inside ``torch.func.vmap`` it would draw from the
  global RNG, breaking determinism by ``random_state``; DP noise regularises.

Each trial is first divided by its own standard deviation, over all its
channels or channel by channel (no statistic shared across trials, so no
privacy cost): MOABB returns volts.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..privacy.per_record.capabilities import ModelCapabilities

__all__ = ["CHANNELS_PER_GROUP", "EEGNet", "TrialStandardize", "record_normalization"]


class TrialStandardize(nn.Module):
    """X ↦ X / std(X) per trial: over channels and time, or each channel over time.

    Like :class:`TraceNormalize`, it uses no statistic shared across records.
    No parameters.

    Parameters
    ----------
    per_channel : bool, default=False
        Centre and scale each channel of a trial on its own (its mean and
        standard deviation over time), instead of the whole trial by one
        standard deviation.
    """

    def __init__(self, per_channel: bool = False) -> None:
        super().__init__()
        self.per_channel = per_channel

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if self.per_channel:
            X = X - X.mean(dim=-1, keepdim=True)
            scale = X.std(dim=-1, keepdim=True)
        else:
            scale = X.std(dim=(-2, -1), keepdim=True)
        return X / scale.clamp_min(torch.finfo(X.dtype).tiny)

    def extra_repr(self) -> str:
        return f"per_channel={self.per_channel}"


#: Channels per group of :class:`EEGNet`'s group normalisation (4 groups of its default 16 feature maps).
CHANNELS_PER_GROUP = 4
NORMALIZATIONS = ("group", "layer", None)


def record_normalization(kind: str | None, channels: int, dtype: torch.dtype) -> nn.Module:
    """A normalisation of each record's feature maps on its own: ``"group"`` (groups of
    :data:`CHANNELS_PER_GROUP` maps), ``"layer"`` (one group), None (the identity)."""
    if kind is None:
        return nn.Identity()
    groups = 1 if kind == "layer" else max(1, channels // CHANNELS_PER_GROUP)
    while channels % groups:
        groups -= 1
    return nn.GroupNorm(groups, channels, dtype=dtype)


def _init_uniform_(layer: nn.Module, generator: torch.Generator | None) -> None:
    """torch's default law for Conv/Linear (uniform ±1/√fan_in), drawn from ``generator``."""
    fan_in = layer.weight[0].numel()
    bound = fan_in**-0.5
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        if layer.bias is not None:
            layer.bias.uniform_(-bound, bound, generator=generator)


def depthwise_correlation(z: torch.Tensor, kernel: torch.Tensor, padding: int) -> torch.Tensor:
    """``conv1d(z, kernel[:, None], padding=padding, groups=G)`` computed by FFT: each of the G maps of ``z`` (..., G,
    T) cross-correlated with its own kernel (G, K), zero-padded by ``padding`` on both sides.

    Written here because torch's CPU kernel for depthwise convolutions with long kernels is slow: EEGNet's temporal
    filter (64 taps on 385 samples, 384 trials) took 0.29 s forward and backward against 0.06 s by FFT, the same
    values up to float rounding (5e-7 relative).
    """
    length, taps = z.shape[-1], kernel.shape[-1]
    n = 1 << (length + taps - 2).bit_length()  # a power of two holding the full linear convolution
    full = torch.fft.irfft(torch.fft.rfft(z, n) * torch.fft.rfft(kernel.flip(-1), n), n)
    start = taps - 1 - padding
    return full[..., start:start + length + 2 * padding - taps + 1]


class EEGNet(nn.Module):
    """EEGNet-F1,D on raw trials (n_trials, n_channels, n_times) -> logits.

    temporal conv (1 x kernel_length, F1 filters) -> depthwise spatial conv
    (n_channels x 1, D per filter) -> ELU -> average pool /4 -> separable conv
    (1 x 16 depthwise, then 1 x 1 to F2) -> ELU -> average pool /8 -> linear.

    Parameters
    ----------
    n_channels, n_times : int
        Trial shape; ``n_times`` >= 32.
    n_classes : int
    F1, D, F2 : int, default=8, 2, 16
        EEGNet-8,2 by default.
    kernel_length : int, default=64
        Temporal kernel (half the sampling rate in the paper: 64 at 128 Hz).
    normalization : {"group", "layer"} or None, default="layer"
        Each record's feature maps normalised on their own after the spatial
        and the pointwise convolutions (:func:`record_normalization`); None:
        nothing between the layers.
    per_channel : bool, default=False
        Scale each channel of a trial on its own (:class:`TrialStandardize`).
    generator : torch.Generator, optional
        Source of the initial weights.
    dtype : torch.dtype, default=torch.float32

    Examples
    --------
    >>> net = EEGNet(22, 256, 4)
    >>> net(torch.randn(5, 22, 256, generator=torch.Generator().manual_seed(0))).shape
    torch.Size([5, 4])
    """

    def __init__(
        self,
        n_channels: int,
        n_times: int,
        n_classes: int,
        *,
        F1: int = 8,
        D: int = 2,
        F2: int = 16,
        kernel_length: int = 64,
        normalization: str | None = "layer",
        per_channel: bool = False,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if n_times < 32:
            raise ValueError(f"EEGNet needs n_times >= 32 (two poolings by 4 and 8). Got {n_times!r} instead.")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"The 'normalization' parameter must be one of {list(NORMALIZATIONS)}. "
                             f"Got {normalization!r} instead.")
        conv = lambda *a, **k: nn.utils.skip_init(nn.Conv2d, *a, dtype=dtype, **k)  # noqa: E731
        self.standardize = TrialStandardize(per_channel)
        self.temporal = conv(1, F1, (1, kernel_length), padding=(0, kernel_length // 2))
        self.spatial = conv(F1, F1 * D, (n_channels, 1), groups=F1)
        self.pool1 = nn.AvgPool2d((1, 4))
        self.depthwise = conv(F1 * D, F1 * D, (1, 16), padding=(0, 8), groups=F1 * D, bias=False)
        self.pointwise = conv(F1 * D, F2, (1, 1))
        self.pool2 = nn.AvgPool2d((1, 8))
        # GroupNorm's affine parameters start at (1, 0), as torch's do: nothing to draw
        self.spatial_norm = record_normalization(normalization, F1 * D, dtype)
        self.pointwise_norm = record_normalization(normalization, F2, dtype)
        with torch.no_grad():
            n_features = self._features(torch.zeros(1, n_channels, n_times, dtype=dtype)).shape[1]
        self.classifier = nn.utils.skip_init(nn.Linear, n_features, n_classes, dtype=dtype)
        for layer in (self.temporal, self.spatial, self.depthwise, self.pointwise, self.classifier):
            _init_uniform_(layer, generator)

    def _temporal_then_spatial(self, X: torch.Tensor) -> torch.Tensor:
        """spatial(temporal(X)) evaluated spatial-first: the same function, fewer multiply-adds.

        Per trial and time step: F1·C·K (temporal conv on every channel) plus
        F1·D·C, instead of F1·D·(C + K); with C = 64, K = 64, F1 = 8, D = 2
        that is 33k against 2k.

        Both convolutions are linear and act on different axes, so the
        temporal filter of each output can be applied after the channels are
        combined (zero padding commutes too); the temporal bias passes through
        the spatial weights. The parameters (and their gradients) are those of
        ``self.temporal`` and ``self.spatial``.
        """
        F1, D = self.temporal.out_channels, self.spatial.out_channels // self.temporal.out_channels
        spatial = self.spatial.weight.flatten(start_dim=1)  # (F1 D, C)
        z = spatial @ X  # (B, F1 D, T)
        kernel = self.temporal.weight.flatten(start_dim=1).repeat_interleave(D, dim=0)
        h = depthwise_correlation(z, kernel, self.temporal.padding[1])
        bias = self.temporal.bias.repeat_interleave(D) * spatial.sum(1) + self.spatial.bias
        return (h + bias[:, None]).unsqueeze(2)  # (B, F1 D, 1, T')

    def _features(self, X: torch.Tensor) -> torch.Tensor:
        h = self.pool1(nn.functional.elu(self.spatial_norm(self._temporal_then_spatial(self.standardize(X)))))
        h = self.pool2(nn.functional.elu(self.pointwise_norm(self.pointwise(self.depthwise(h)))))
        return h.flatten(start_dim=1)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits, shape (n_trials, n_classes), for X of shape (n_trials, n_channels, n_times)."""
        return self.classifier(self._features(X))

    def on_standardized(self) -> EEGNet:
        """This network reading trials already standardised (the same parameters, shared, under the same names)."""
        head = copy.copy(self)
        head._modules = {**self._modules, "standardize": nn.Identity()}
        return head

    #: Each trial's standardisation holds no parameter and reads that trial alone: the clients compute it once per
    #: fit (:func:`~skfedriem.federated.on_fixed_features`), a third of a step's time on 64 channels.
    capabilities = ModelCapabilities(fixed_features=lambda net: (net.standardize, net.on_standardized()))
