"""The classifiers of covariance matrices at a reference point: public, or the clients' mean released privately.

Real EEG covariances share a large common part beside which the class signal is
small (user guide, "EEG"): both covariance classifiers read each trial relative
to a reference point R, the tangent-space model through its tangent map at R,
SPDNet by whitening its inputs by R before the BiMap. pyRiemann fits R as the
mean of the training matrices; a mean computed from the records would make
every trial's input depend on every other trial, so here R is public, or it is
the clients' log-Euclidean mean released in a private round of its own before
the training rounds (:class:`~skfedriem.models.TangentMean`), charged and
composed with them, and shrunk by the noise it really carries
(:func:`shrunk_mean`: post-processing).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
from numpy.typing import ArrayLike
import torch
from sklearn.utils.validation import check_array

from .._utils.compat import StrOptions
from .._utils.spd import check_spd
from .._clients import check_labels
from ..federated import FederatedTrainer
from ..federated.client import ClientState
from ..federated.plan import mean_step_noise
from ..models import TangentMean, reference_from_mean
from ..privacy import PrivacyAccountant
from ._base import DTYPES, FederatedClassifier
from ._recentring import PersonalMeans, recentred, riemannian_mean, trace_normalised
from ._shrinkage import shrunk_mean

__all__ = ["REFERENCE_CLIP", "REFERENCE_NOISE_LIMIT", "REFERENCE_SHARE", "CovarianceClassifier", "shrunk_mean"]

#: ``reference="mean"`` in a private fit: the share of ``eps`` its release of the clients' mean may spend (the
#: rounds take what is left, composed with it).
REFERENCE_SHARE = 0.2
#: The clip of each trial's tangent vector at the identity in that release, in units of √n_channels: on the real
#: PhysionetMI trials (64 channels, trace-normalised OAS covariances) the norms have median 23.9 and maximum 30.1
#: (3.8 √64), so 4 √n clips almost none of them.
REFERENCE_CLIP = 4.0
#: ``reference="auto"`` in a private fit: the largest planned noise norm √d σ̄ of the released mean, in units of
#: √n_channels, at which it is released (above it, the identity). Real EEG's mean sits 2.7 √n (9 motor channels: 8.1)
#: to 3.0 √n (64: 23.6) from the identity (``benchmarks/results/tangent_offset.json``); half of REFERENCE_CLIP keeps a
#: release that can find it. Not tuned by a kept grid: its cells are in ``benchmarks/results/real_planning.json``
#: (at ε = 1 every private fit there is skipped or at chance).
REFERENCE_NOISE_LIMIT = 2.0


def _release_noise_std(release: FederatedTrainer) -> float:
    """σ̄, the noise std per coordinate of the released mean (one step at learning rate 1 of every client).

    With distributed noise every one of the K clients adds a share sized so that K − t of them carry the noise
    the plan certifies: the sum carries K / (K − t) times that variance (and the rounding's, left out).
    """
    plan = release.plan_
    std = mean_step_noise(plan, release.clients_per_round(len(plan.local_steps)))
    return std * plan.placement.released_noise_factor(plan)


def _own_losses(losses: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
    """TangentMean's forward already returns each record's loss (the mean of the trials takes no label)."""
    return losses


class CovarianceClassifier(FederatedClassifier):
    """Base of the classifiers of covariance matrices, which read every trial relative to a reference point.

    A subclass's model has ``at_reference(R)`` (read every input relative to
    another public point) and ``reference_point()`` (the trace-normalised
    point it reads them at), and documents ``reference`` (module docstring).

    Parameters
    ----------
    reference : array-like of shape (n_channels, n_channels), {"auto", "mean"} or None, default="auto"
        The point every trial is read at. ``"mean"``: the clients'
        log-Euclidean mean, released and charged before the rounds;
        ``"auto"``: that mean unless its planned noise would bury it or the
        rounds' ``accounting`` is not ``"rfedproj"``, and with ``init`` the
        public start's own point. An array: a public SPD matrix, charged
        nothing. None: the identity.
    recentre : {"client"} or None, default=None
        ``"client"``: every client's trials re-centred on its own mean,
        released and charged by the client before the rounds
        (:class:`~skfedriem.classification.PersonalMeans`), and at
        prediction on a client's released mean or a new subject's own.
    [federation parameters]
    """

    reference: ArrayLike | str | None = "auto"
    recentre: str | None = None

    _parameter_constraints: dict = {"reference": ["array-like", StrOptions({"auto", "mean"}), None],
                                    "recentre": [StrOptions({"client"}), None]}

    def _check_inputs(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        return check_spd(X, name=name, trace_normalised=True)

    def _released_mean(self) -> bool:
        """Whether ``fit`` may release the clients' mean before the rounds: ``"mean"``; ``"auto"`` unless an ε
        search, or a public start (``init``) whose reference point it keeps."""
        if not isinstance(self.reference, str):
            return False
        if self.reference == "mean":
            return True
        return self.eps != "budget" and self.init is None

    def _release_trainer(self, input_shape, client_sizes, seeds):
        """The clients' mean (``reference="mean"``, or ``"auto"`` unless its planned noise would bury it): one round
        of :class:`~skfedriem.models.TangentMean`, planned and charged with the rounds by ``fit``."""
        if not self._released_mean():
            return None
        self._check_combinations()  # settings that contradict each other are named before anything runs
        if self.eps == "budget":
            raise ValueError("reference='mean' with eps='budget' is not supported: the budget's share is planned for "
                             "the rounds alone. Pass a public reference, or reference=None for the identity.")
        if self.init is not None:
            raise ValueError(f"reference='mean' with init= is not supported: the public start's weights were trained "
                             f"at its own reference point. Use reference='auto' (the start's point) with init.")
        if self.reference == "auto" and self.eps is not None and self.accounting != "rfedproj":
            return None  # the rounds' accountant composes no release of the paper's accounting: the identity
        n = int(input_shape[0])
        module = TangentMean(n, dtype=DTYPES[self.dtype])
        with warnings.catch_warnings():  # the rounds' settings, planned again (and warned of) by the rounds
            warnings.simplefilter("ignore", UserWarning)
            rounds = self._settings(input_shape, client_sizes, None)
        settings = dataclasses.replace(
            rounds,
            eps=None if self.eps is None else REFERENCE_SHARE * self.eps, clip=REFERENCE_CLIP * math.sqrt(n),
            n_rounds=1, local_steps=1, local_epochs=1.0, batch_size=None, lr=1.0, lr_schedule="constant",
            optimizer="sgd", aggregation="projavg", clients_per_round=None, sampling="fixed", accounting="rfedproj")
        # the clients' secret streams of this release are their own, apart from the rounds' (a seeded run's too)
        client_seed = None if seeds.clients is None else np.random.SeedSequence(
            seeds.clients.entropy, spawn_key=(*seeds.clients.spawn_key, 2**32 - 1))
        release = FederatedTrainer(module, _own_losses, settings, seed_sequence=seeds.server.spawn(1)[0],
                                   client_seed=client_seed, run_name=f"{self!r} reference")
        if self.reference == "auto" and self.eps is not None:
            release.pricing.plan(list(client_sizes), list(range(len(client_sizes))))
            noise_norm = math.sqrt(module.mean.weight.numel()) * _release_noise_std(release)
            if noise_norm > REFERENCE_NOISE_LIMIT * math.sqrt(n):
                return None  # public quantities only: the identity, and the rounds take all of eps
        return release

    def _use_release(self, release, trainer) -> None:
        mean = release.module.mean.weight.detach()[0].double().numpy()
        noise_std = _release_noise_std(release)
        n_channels = release.module.features.reference.shape[0]
        reference = reference_from_mean(shrunk_mean(mean, noise_std), n_channels)
        trainer.module.at_reference(torch.from_numpy(reference))

    def _check_recentring(self, *, deployed: bool) -> None:
        """ValueError for a trainer of ``recentre="client"`` that no release of the clients' own means precedes."""
        if self.recentre is not None and (deployed or self._warm()):
            raise ValueError(f"{type(self).__name__}(recentre='client') re-centres each client's trials on the mean "
                             "it releases in fit, before the rounds; a deployed site or a warm start releases none "
                             "(not supported yet). Set recentre=None.")

    def _personal_means(self, n_channels: int) -> PersonalMeans:
        return PersonalMeans.planned(self.eps, self.delta, n_channels, self.privacy_unit)

    def _personal_plan(self, input_shape, clients):
        """``recentre="client"``: every client's release of its own mean (:mod:`._recentring`), planned."""
        if self.recentre is None:
            return None
        name = type(self).__name__
        if self.eps == "budget":
            raise ValueError(f"{name}(recentre='client') with eps='budget' is not supported: the budget's share is "
                             "planned for the rounds alone. Pass a number as eps, or recentre=None.")
        if self.init is not None:
            raise ValueError(f"{name}(recentre='client') with init= is not supported: the public start was trained "
                             "on trials that were not re-centred. Drop init, or set recentre=None.")
        if self.records_per_subject is not None:
            raise ValueError(f"{name}(recentre='client') with records_per_subject={self.records_per_subject!r} is not "
                             "supported: the ledger charges a whole composition at its largest group of records, so "
                             "a subject's own release, already protected whole, would be charged k times over. Leave "
                             "records_per_subject None (whole subjects), or set recentre=None.")
        if self.eps is not None and self.accounting != "rfedproj":
            raise ValueError(f"{name}(recentre='client') with accounting={self.accounting!r} is not supported: the "
                             "clients' releases are Gaussian steps at rate 1 that only accounting='rfedproj' "
                             "composes with the rounds. Set accounting='rfedproj', or recentre=None.")
        personal = self._personal_means(int(input_shape[0]))
        units = [personal.units(len(client[0]), self._subject_codes(client)) for client in clients]
        return personal.planned_ledger(units) if personal.private else PrivacyAccountant()

    def _subject_codes(self, client):
        """A client's records' subject codes (the last of its tensors under subject-level privacy), else None."""
        return client[-1] if self.privacy_unit == "subject" else None

    def _personalised(self, clients, names, trainer, seeds, *, planned):
        """Every client's mean released by the client (base point: the rounds' reference, the clients' released
        mean or the public one), its records re-centred on it, and the rounds' model read at the identity."""
        module = trainer.module
        base = module.reference_point().detach().double().numpy()
        personal = self._personal_means(base.shape[0])
        releases, means, kept = [], [], {}
        for i, (client, name) in enumerate(zip(clients, names)):
            # each client's secret stream for its release, apart from the rounds' and the reference's
            seed = None if seeds.clients is None else np.random.SeedSequence(
                seeds.clients.entropy, spawn_key=(*seeds.clients.spawn_key, 2**32 - 2, i))
            randomness = ClientState.fresh(seed, secure_mode=self.secure_mode).randomness
            mean, sigma, units = personal.release(client[0], self._subject_codes(client), base, randomness)
            releases.append((units, sigma))
            means.append(mean)
            if sigma > 0 or not personal.private:  # a mean within its unit was released to no one: not kept
                kept[name] = mean
        if personal.private and personal.ledger(releases).state_dict() != planned.state_dict():
            raise RuntimeError("The clients' releases of their means ran other steps than planned; nothing was "
                               "trained on them.")
        module.at_reference(torch.eye(base.shape[0], dtype=module.reference_point().dtype))
        self._released_personal_means = kept
        return [(recentred(client[0], mean), *client[1:]) for client, mean in zip(clients, means)]

    def _inputs_for(self, X: np.ndarray, groups) -> np.ndarray:
        """``recentre="client"``: each group's trials re-centred on its client's released mean, or on their own
        Riemannian mean (a subject never seen, a client whose mean was never released, or ``groups=None``: all of
        X as one new subject's)."""
        if self.recentre is None:
            return super()._inputs_for(X, groups)
        known = {} if groups is None else self.personal_means_
        groups = np.zeros(len(X), dtype=np.int64) if groups is None else check_labels(groups, "groups", len(X))
        trials = torch.from_numpy(np.ascontiguousarray(X))
        out = torch.empty_like(trials)
        for group in np.unique(groups):
            rows = np.flatnonzero(groups == group)
            mean = known.get(group)
            if mean is None:
                mean = riemannian_mean(trace_normalised(X[rows]))
            out[rows] = recentred(trials[rows], mean)
        return out.numpy()

    def make_trainer(self, input_shape, *, spent=None, **options):
        """:meth:`~skfedriem.base.FederatedEstimatorMixin.make_trainer`; with the clients' mean as reference
        (``reference="mean"``, or ``"auto"`` without privacy) only inside ``fit``, which releases it."""
        exact_or_asked = isinstance(self.reference, str) and (
            self.reference == "mean" or (self.reference == "auto" and self.eps is None and self.init is None))
        self._check_recentring(deployed=bool(options.get("deployed")))
        if exact_or_asked and not self._warm() and spent is None:
            raise ValueError(f"{type(self).__name__}(reference={self.reference!r}, eps={self.eps!r}) takes the "
                             "clients' mean, which fit releases and charges before the rounds; a trainer made on "
                             "its own (a deployment, a loop of your own) has no such release: pass the public "
                             "reference's values, or reference=None for the identity.")
        return super().make_trainer(input_shape, spent=spent, **options)

    def _public_reference(self, input_shape) -> torch.Tensor | None:
        """``reference`` as a float64 tensor when it is an array (checked: SPD, the trials' shape); else None."""
        if self.reference is None or isinstance(self.reference, str):
            return None
        reference = check_array(self.reference, dtype=np.float64, input_name="reference")
        if reference.shape != tuple(input_shape):
            raise ValueError(f"The 'reference' parameter must have shape {tuple(input_shape)} like the trials. "
                             f"Got {reference.shape} instead.")
        check_spd(reference[None], name="reference")
        return torch.from_numpy(reference)

    def _start_from_init(self, module: torch.nn.Module, classes) -> None:
        """With ``reference="auto"``, the public start's reference point is this fit's (nothing is released)."""
        if isinstance(self.reference, str) and self.reference == "auto":
            state = self._init_state()
            point = state.get(module.reference_buffer) if state is not None else None
            if point is not None:
                module.at_reference(torch.as_tensor(point).detach())
        super()._start_from_init(module, classes)

    def _set_model_attributes(self, module, classes) -> None:
        super()._set_model_attributes(module, classes)
        self.reference_ = module.reference_point().detach().double().numpy().copy()
        if self.recentre is not None:
            self.personal_means_ = self.__dict__.pop("_released_personal_means")

    def _build_checked(self, build, input_shape):
        """``build(reference)`` with the public reference (or None), its dtype check worded for this estimator."""
        reference = self._public_reference(input_shape)
        try:
            return build(reference)
        except ValueError as error:  # the model's own check, in its dtype
            if reference is None:
                raise
            raise ValueError(f"The 'reference' parameter of {type(self).__name__} is not usable in dtype="
                             f"{self.dtype!r}: {error}") from None
