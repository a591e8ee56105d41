"""What every federated private estimator shares, and the public federation API its deployments use.

An estimator's ``fit`` and a deployment's ServerApp/ClientApp go through the
same four public methods (scikit-learn's ``_BasePCA`` plays this role for its
PCAs):

* :meth:`~FederatedEstimatorMixin.prepare_records`: the tensors a client
  trains on, from its raw records (validated in the model's dtype);
* :meth:`~FederatedEstimatorMixin.make_model`: the network and per-record loss
  for inputs of a public shape (and public classes);
* :meth:`~FederatedEstimatorMixin.make_trainer`: the round loop with this
  estimator's settings on a fresh (or, with ``warm_start``, the fitted) model;
* :meth:`~FederatedEstimatorMixin.set_fitted`: the fitted attributes, from a
  finished run (post-processing of what the server saw).

A subclass stores its parameters (:meth:`_store_parameters`), declares the
model-specific constraints, and implements the hooks ``_check_records``,
``_model``, ``_encode_targets``, ``_trainer_options``, ``_monitor`` and
``_set_model_attributes``.
"""

from __future__ import annotations

import copy
import logging
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils.validation import validate_data
from torch import nn

from ._clients import client_indices
from ._compat import Interval, StrOptions, validate_estimator_params
from ._seeding import RunSeeds, run_seeds
from .federated import AGGREGATIONS, BACKENDS, FederatedTrainer, TrainingState
from .privacy import PrivacyBudget
from .privacy.per_sample import LossFn

__all__ = ["FederatedEstimatorMixin"]

_NO_TARGETS = object()  # _validate's "no y at all" (None is a y scikit-learn must refuse)
_site_log = logging.getLogger("skfedriem.flower.site")


class FederatedEstimatorMixin:
    """Parameters, seeds, the round loop and the fitted privacy report shared by every federated estimator."""

    _federation_constraints: dict = {
        "eps": [Interval(Real, 0, None, closed="neither"), None],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "clip": [Interval(Real, 0, None, closed="neither")],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "clients_per_round": [Interval(Integral, 1, None, closed="left"), None],
        "aggregation": [StrOptions(set(AGGREGATIONS))],
        "optimizer": [StrOptions({"sgd", "adam"})],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "sampling": [StrOptions({"fixed", "poisson"})],
        "n_clients": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "secure_mode": ["boolean"],
        "privacy_budget": [PrivacyBudget, None],
        "client_timings": ["boolean"],
        "warm_start": ["boolean"],
        "backend": [StrOptions({"local", *BACKENDS})],
        "n_jobs": [Integral, None],
        "verbose": ["verbose"],
    }

    def _store_parameters(self, parameters: dict) -> None:
        """``__init__``'s body: store every keyword argument under its own name (scikit-learn's contract)."""
        for name, value in parameters.items():
            if name not in ("self", "__class__"):
                setattr(self, name, value)

    # ----------------------------------------------------------- federation API
    def prepare_records(self, X, y=None, *, classes=None, site: bool = False) -> tuple[torch.Tensor, ...]:
        """The tensors a client trains on: its validated records (and encoded targets).

        Parameters
        ----------
        X : array-like
            The client's records, already shaped as ``fit`` takes them.
        y : array-like, optional
            Their targets (classifiers).
        classes : array-like, optional
            The federation's public classes (classifiers).
        site : bool, default=False
            False (a fit on the caller's own data): a record that fails
            validation, or a target outside ``classes``, is a ValueError naming
            it. True (a deployed site, whose failures a server could observe and
            provoke): records that fail validation are left out, whatever the
            run (the site's own log names them; its record count, which is
            public, is what remains), and a target outside the run's
            ``classes`` is kept as a record that contributes nothing to any
            gradient (torch's ignore index), so that no choice of ``classes``
            by the server changes whether the site answers or how many records
            it reports.

        Returns
        -------
        records : tuple of torch.Tensor
            ``(inputs,)`` or ``(inputs, targets)``, records along dim 0.
        """
        X = np.asarray(X)
        if site:
            kept = np.array([self._is_valid_record(X[i : i + 1]) for i in range(len(X))], dtype=bool)
            if not kept.all():
                _site_log.warning("%d of %d records fail validation and are left out: %s", int((~kept).sum()),
                                  len(X), np.flatnonzero(~kept).tolist())
            X, y = X[kept], None if y is None else np.asarray(y)[kept]
        inputs = torch.from_numpy(np.ascontiguousarray(self._check_records(X)))
        if y is None:
            return (inputs,)
        return inputs, self._encode_targets(y, classes, ignore_unknown=site)

    def make_model(self, input_shape: tuple[int, ...], classes=None, *,
                   generator: torch.Generator | None = None) -> tuple[nn.Module, LossFn]:
        """The untrained network for records of ``input_shape`` and its per-record loss.

        The initial values are data-independent (drawn from ``generator``;
        never from torch's global generator).
        """
        generator = torch.Generator() if generator is None else generator
        return self._model(tuple(int(s) for s in input_shape), classes, generator)

    def make_trainer(self, input_shape: tuple[int, ...], *, classes=None, held_out=None,
                     deployed: bool = False, seeds: RunSeeds | None = None,
                     client_sizes: list[int] | None = None) -> FederatedTrainer:
        """The round loop with this estimator's settings, for records of ``input_shape``.

        Parameters
        ----------
        input_shape : tuple of int
            The shape of one record (public).
        classes : array-like, optional
            The classes (public; classifiers).
        held_out : optional
            Data the server holds and reports metrics on every round
            (``validation_data`` of the classifiers, ``reference_X`` of FederatedPCA).
        deployed : bool, default=False
            The clients are elsewhere (a deployment): only the public seeds
            (initial point, client selection) come from ``random_state``, and
            the sites keep their own noise.
        seeds : RunSeeds, optional
            Seeds drawn by the caller (``fit`` draws them once for the split too).
        client_sizes : list of int, optional
            The clients' numbers of records (public), for estimators that plan
            their schedule from them (FederatedPCA's ``"auto"`` settings).

        Returns
        -------
        FederatedTrainer
            With ``warm_start`` and a fitted estimator: starting from the
            fitted model, with its ledger and history carried on.
        """
        validate_estimator_params(self)
        if seeds is None:
            seeds = self._seeds(deployed=deployed)
        prior = None
        if self._warm():
            module, loss_fn = copy.deepcopy(self.module_), self.make_model(input_shape, classes)[1]
            self._check_warm_start(input_shape, classes)
            if self.eps is not None and not self.ledger_.private:
                warnings.warn(f"warm_start=True continues a {type(self).__name__} fit that was not private "
                              "(eps=None): its rounds are in the ledger as infinite loss, so epsilon_ will be inf "
                              "whatever eps this fit uses. To fine-tune privately from a model trained on public "
                              "data, start from it with init= instead.", UserWarning, stacklevel=3)
            prior = TrainingState(0, {}, self.ledger_.state_dict(), self.history_)
        else:
            generator = torch.Generator().manual_seed(int(seeds.init.generate_state(1)[0]))
            module, loss_fn = self.make_model(input_shape, classes, generator=generator)
        settings = dict(
            n_rounds=self.n_rounds, batch_size=self.batch_size, clients_per_round=self.clients_per_round,
            eps=self.eps, delta=self.delta, clip=self.clip, sampling=self.sampling, aggregation=self.aggregation,
            optimizer=self.optimizer, lr=self.lr, seed_sequence=seeds.server, client_seed=seeds.clients,
            secure_mode=self.secure_mode, privacy_budget=self.privacy_budget, run_name=repr(self),
            client_timings=self.client_timings, prior=prior,
            monitor=None if held_out is None else self._monitor(held_out, classes), n_jobs=self.n_jobs,
            verbose=self.verbose,
        )
        settings.update(self._trainer_options())  # a model's own settings (and the ones it fixes) win
        return FederatedTrainer(module, loss_fn, **settings)

    def set_fitted(self, trainer: FederatedTrainer, *, input_shape: tuple[int, ...], classes=None):
        """Set the fitted attributes from a finished run; returns self.

        Everything set is post-processing of the transcript: the trained
        model, ``epsilon_``, ``delta_``, ``mu0_``, ``noise_std_``,
        ``batch_size_``, ``history_``, ``ledger_`` and ``n_features_in_``.
        """
        self.n_features_in_ = int(input_shape[0])
        self._input_shape = tuple(int(s) for s in input_shape)
        for name, value in trainer.fitted_attributes().items():
            setattr(self, name, value)
        self._set_model_attributes(trainer.module, classes)
        return self

    # ------------------------------------------------------------------ helpers
    def _is_valid_record(self, X: np.ndarray) -> bool:
        try:
            self._check_records(X)
        except ValueError as error:
            _site_log.warning("a record fails validation: %s", error)
            return False
        return True

    def _warm(self) -> bool:
        """Whether this fit continues an earlier one (``warm_start`` and a trained model)."""
        return self.warm_start and getattr(self, "module_", None) is not None

    def _validate(self, X, y=_NO_TARGETS, *, name: str = "X", reset: bool = True, **kw):
        """scikit-learn's ``validate_data``, with NaN and inf refused by record index in this estimator's words.

        Pass ``y`` (even None) where the estimator is supervised: scikit-learn then checks it.
        """
        options = dict(reset=reset, ensure_all_finite=False, dtype=np.float64, **kw)
        supervised = y is not _NO_TARGETS
        validated = validate_data(self, X, y, **options) if supervised else validate_data(self, X, **options)
        X = validated[0] if supervised else validated
        bad = np.flatnonzero(~np.isfinite(X.reshape(len(X), -1)).all(axis=1))
        if bad.size:
            raise ValueError(
                f"{name}[{bad[0]}] contains NaN or inf ({bad.size} of {len(X)} records): {type(self).__name__} "
                "needs finite records. Drop or repair them first (e.g. interpolate a bad channel, or impute "
                "before the pipeline)."
            )
        return validated

    def _seeds(self, *, deployed: bool = False) -> RunSeeds:
        return run_seeds(self.random_state, private=self.eps is not None and not deployed,
                         secure_mode=self.secure_mode and not deployed, owner=type(self).__name__)

    def _fit_federated(self, records: tuple[torch.Tensor, ...], input_shape: tuple[int, ...], groups, *,
                       classes=None, held_out=None):
        """``fit``'s common body: split into clients, run the rounds, set the fitted attributes."""
        seeds = self._seeds()
        indices, names = client_indices(len(records[0]), groups, n_clients=self.n_clients,
                                        rng=np.random.default_rng(seeds.split))
        trainer = self.make_trainer(input_shape, classes=classes, held_out=held_out, seeds=seeds,
                                    client_sizes=[len(idx) for idx in indices])
        trainer.fit([tuple(r[idx] for r in records) for idx in indices], client_names=names, backend=self.backend)
        return self.set_fitted(trainer, input_shape=input_shape, classes=classes)

    def _check_warm_start(self, input_shape: tuple[int, ...], classes) -> None:
        if tuple(input_shape) != self._input_shape:
            raise ValueError(f"warm_start=True continues a model fitted on records of shape {self._input_shape}; "
                             f"got records of shape {tuple(input_shape)}. Set warm_start=False to start afresh.")
        if classes is not None and not np.array_equal(np.asarray(classes), self.classes_):
            raise ValueError(f"warm_start=True continues a model of classes {self.classes_.tolist()!r}; got "
                             f"{np.asarray(classes).tolist()!r}. Set warm_start=False to start afresh.")
