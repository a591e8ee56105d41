"""What every federated private estimator shares: its common parameters, and the federation API its deployments use.

**Parameters, declared once.** An estimator's parameters are annotated class
attributes: :func:`setting` for a setting of the run, whose type,
constraints and documentation are declared on
:class:`~skfedriem.federated.FederationSettings`; :func:`parameter` for the
few every estimator adds (the client split, the seed, a privacy budget, warm
starts); a plain default for the estimator's own. Each class's ``__init__``
stores each of them (a :mod:`dataclasses` ``__init__``, keyword-only), so
readers, static type checkers and ``get_params`` see every parameter; a
subclass that only changes a default writes the attribute again with it. The
class's constraints (``_parameter_constraints``) and the shared parameters'
docstring entries are built from the same declarations. ``fit`` validates
every parameter once (scikit-learn's ``_fit_context``) and builds one
:class:`~skfedriem.federated.FederationSettings` from ``get_params()``.

**The federation API.** An estimator's ``fit`` and a deployment's
ServerApp/ClientApp go through the same four public methods (scikit-learn's
``_BasePCA`` plays this role for its PCAs):

* :meth:`~FederatedEstimatorMixin.prepare_records`: the tensors a client
  trains on, from its raw records (validated in the model's dtype);
* :meth:`~FederatedEstimatorMixin.make_model`: the network and per-record loss
  for inputs of a public shape (and public classes);
* :meth:`~FederatedEstimatorMixin.make_trainer`: the round loop with this
  estimator's settings on a fresh (or, with ``warm_start``, the fitted) model;
* :meth:`~FederatedEstimatorMixin.set_fitted`: the fitted attributes, from a
  finished run (post-processing of what the server saw).

A subclass implements the hooks ``_check_records``, ``_model``,
``_encode_targets``, ``_monitor`` and ``_set_model_attributes`` (and
``_plan_run`` for settings its model fixes or plans), and names in
``_model_parameters`` the parameters that define its model's shape or meaning.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral
from typing import ClassVar

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from . import baselines  # noqa: F401 - registers accounting="prirfed" for every estimator
from ._clients import check_labels, client_indices, client_subjects, subject_clients
from ._utils.compat import Interval, StrOptions, _fit_context
from ._parameters import _EstimatorParameters, federated_parameters, parameter, setting
from ._seeding import RunSeeds, run_seeds
from ._utils.user_warnings import warn_user
from .exceptions import NoiseSwampsSignalWarning, PositionalClientsWarning, PrivacyBudgetExceeded
from .federated import Aggregation, FederatedTrainer, FederationSettings, PrivacyPlan, TrainingState
from .federated.noise_placement import check_noise_placement
from .federated.pricing import model_dimension
from .federated.settings import SettingDoc
from .privacy import PrivacyAccountant, PrivacyBudget, get_accounting
from .privacy.accounting.accounting_methods import ChargedRun
from .privacy.mechanisms.units import PrivacyUnit, step_diameter, unit_count
from .privacy.per_record.per_sample import LossFn

__all__ = ["FederatedEstimatorMixin", "federated_parameters", "parameter", "setting"]

_NO_TARGETS = object()  # _validate's "no y at all" (None is a y scikit-learn must refuse)
_site_log = logging.getLogger("skfedriem.flower.site")


class FederatedEstimatorMixin(_EstimatorParameters):
    """Parameters, seeds, the round loop and the fitted privacy report shared by every federated estimator.

    Its parameters are those every estimator takes; a subclass adds its own
    as annotated class attributes.

    Parameters
    ----------
    [federation parameters]
    """

    eps: float | str | None = setting("eps", values={"budget": (
        "this fit's share of ``privacy_budget`` (a :class:`~skfedriem.privacy.PrivacyBudget` planned for ``n_fits`` "
        "fits), the largest ε that leaves room for the remaining planned fits: the recipe for a search whose refit "
        "must not be refused.")})
    delta: float = setting("delta")
    clip: float | str = setting("clip")
    n_rounds: int | str = setting("n_rounds")
    local_steps: int | str | None = setting("local_steps")
    batch_size: int | str | None = setting("batch_size")
    clients_per_round: int | None = setting("clients_per_round")
    aggregation: str | Aggregation = setting("aggregation")
    optimizer: str | Callable = setting("optimizer")
    lr: float | str = setting("lr")
    sampling: str = setting("sampling")
    privacy_unit: str = setting("privacy_unit")
    records_per_subject: int | None = setting("records_per_subject")
    noise: str = setting("noise")
    colluders: int | None = setting("colluders")
    dropouts: int = setting("dropouts")
    n_clients: int | None = parameter(
        None, "int or None", "When ``fit`` gets no ``groups``. None: the records are one site's, one client holding "
        "every record (a site's own data, a within-session fold: splitting them into clients that each pay the noise "
        "only loses), or, when ``fit`` gets ``subjects``, clients of whole subjects (``subject_clients``). An int: "
        "that many clients of a random split by record position only (never by value or label: a split that read the "
        "records would let one record move others between clients); 1: one client holding every record, even when "
        "``subjects`` is given.",
        [Interval(Integral, 1, None, closed="left"), None])
    subject_clients: int | str = parameter(
        "each", '"each" or int', "When ``fit`` gets ``subjects``, no ``groups``, and ``n_clients`` is not 1 (MOABB's "
        "``CrossSubjectEvaluation`` passes ``subjects``): the clients are made of whole subjects, never of chunks of "
        "a subject's trials. ``\"each\"``: every subject is a client. An int G: G clients, the sorted subjects dealt "
        "into G contiguous, nearly equal blocks (fixed groups of subjects, as in the paper's protocol). The split reads "
        "the subjects' labels only, which it takes as public, as ``groups`` are.",
        [StrOptions({"each"}), Interval(Integral, 1, None, closed="left")])
    random_state: int | np.random.RandomState | None = parameter(
        None, "int, RandomState instance or None",
        "None: the initial point, the client split and the client selection use fresh OS entropy, and every "
        "client's batches and noise 128 bits of its own. An int (or RandomState) seeds everything, for "
        "reproducible experiments: anyone who knows it can replay the noise, so such a run is not private "
        "against them (a :class:`~skfedriem.exceptions.SeededNoiseWarning` says so).", ["random_state"])
    secure_mode: bool = setting("secure_mode")
    privacy_budget: PrivacyBudget | None = parameter(
        None, "PrivacyBudget or None", "A total budget shared by every fit on the same records (grid search, "
        "cross-validation): the fit is charged before training and refused if the composition would exceed it.",
        [PrivacyBudget, None])
    client_timings: bool = setting("client_timings")
    warm_start: bool = parameter(
        False, "bool", "Continue from the fitted model: the new rounds are calibrated to ``eps`` on their own and "
        "``epsilon_`` composes every round run so far on the same records, as does ``history_``. Settings "
        "that only shape the next rounds (``eps``, ``lr``, ``n_rounds``...) may change; those that define the "
        "model (its size, dtype, classes...) may not.", ["boolean"])
    backend: str = setting("backend")
    n_jobs: int | None = setting("n_jobs")
    lockstep: bool = setting("lockstep")
    device: str | torch.device = setting("device")
    verbose: int | str = setting("verbose")

    # fit consumes subjects under metadata routing without a set_fit_request: MOABB's CrossSubjectEvaluation then
    # passes each training trial's subject, and the clients are whole subjects (subject_clients)
    __metadata_request__fit = {"subjects": True}

    #: Every parameter's documentation and constraints, by name (built from the declarations).
    _parameter_docs: ClassVar[dict[str, SettingDoc]]
    #: Parameters that define the model's shape or meaning: a warm start may not change them.
    _model_parameters: tuple[str, ...] = ()

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
            it. True (a deployed site, whose failures and size a server could
            observe and provoke): every record of the file is kept, so the
            site's record count is its file's whatever the run. A record that
            fails validation (not finite, not SPD, or not representable in the
            run's ``dtype``) becomes a *zero-weight* record: a placeholder
            input that contributes nothing to any gradient (its gradient is
            zero: adaptive clipping counts it as unclipped; the site's own log
            names it); so does a target outside the run's ``classes`` (torch's
            ignore index). A ValueError remains only for what the file's shape
            or the run's settings decide for every record alike.

        Returns
        -------
        records : tuple of torch.Tensor
            ``(inputs,)`` or ``(inputs, targets)``, records along dim 0.
        """
        X = np.asarray(X)
        invalid = None
        if site:
            X, invalid = self._site_inputs(X)
        inputs = torch.from_numpy(np.ascontiguousarray(self._check_records(X)))
        if y is None:
            return (inputs,)
        targets = self._encode_targets(y, classes, ignore_unknown=site)
        if invalid is not None:
            targets = self._without_weight(targets, invalid)
        return inputs, targets

    def _site_inputs(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A site's inputs with every invalid record replaced by the placeholder, and which were replaced.

        The placeholder passes validation first: if it fails, every record of
        this shape fails under this run's settings, which is the file's or the
        run's fault, not a record's (a ValueError).
        """
        placeholder = self._placeholder_record(X.shape[1:])
        self._check_records(placeholder[None])
        invalid = np.array([not self._is_valid_record(X[i : i + 1]) for i in range(len(X))], dtype=bool)
        if invalid.any():
            _site_log.warning("%d of %d records fail validation and train as zero-weight records: %s",
                              int(invalid.sum()), len(X), np.flatnonzero(invalid).tolist())
            X = X.copy()
            X[invalid] = placeholder
        return X, invalid

    def _placeholder_record(self, shape: tuple[int, ...]) -> np.ndarray:
        """The input a deployed site trains on in place of an invalid record: valid, and of zero weight once
        :meth:`_without_weight` has marked it (or of zero gradient by itself, for an unsupervised model)."""
        raise NotImplementedError(f"{type(self).__name__} has no placeholder record for a deployed site.")

    def _without_weight(self, targets: torch.Tensor, invalid: np.ndarray) -> torch.Tensor:
        """``targets`` with the records flagged ``invalid`` made to contribute nothing (supervised estimators)."""
        raise NotImplementedError(f"{type(self).__name__} takes no targets.")

    def make_model(self, input_shape: tuple[int, ...], classes=None, *,
                   generator: torch.Generator | None = None) -> tuple[nn.Module, LossFn]:
        """The untrained network for records of ``input_shape`` and its per-record loss.

        The initial values are data-independent (drawn from ``generator``;
        never from torch's global generator).

        Parameters
        ----------
        input_shape : tuple of int
            The shape of one record (public).
        classes : array-like, optional
            The classes (public; classifiers).
        generator : torch.Generator, optional
            Draws the initial values (default: a fresh one).

        Returns
        -------
        module : torch.nn.Module
        loss_fn : callable
        """
        generator = torch.Generator() if generator is None else generator
        return self._model(tuple(int(s) for s in input_shape), classes, generator)

    @_fit_context(prefer_skip_nested_validation=True)
    def make_trainer(self, input_shape: tuple[int, ...], *, classes=None, held_out=None,
                     deployed: bool = False, seeds: RunSeeds | None = None,
                     client_sizes: list[int] | None = None, client_names: list | None = None,
                     spent: PrivacyAccountant | None = None,
                     spent_local: PrivacyAccountant | None = None,
                     spent_deviating: PrivacyAccountant | None = None) -> FederatedTrainer:
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
        client_names : list, optional
            Their names, for the planner's messages (default: 0 .. n−1).
        spent : PrivacyAccountant, optional
            What this fit's clients released before its rounds (the tangent
            space's reference point): the rounds target what is left of
            ``eps`` after it, and every ε the run reports composes it.
        spent_local : PrivacyAccountant, optional
            What that release guarantees each client by its own releases alone
            (distributed noise: its shares; default ``spent``), composed into
            ``local_epsilon_``.
        spent_deviating : PrivacyAccountant, optional
            What that release guarantees against a server that deviates from the
            protocol with t colluding clients (default ``spent``), composed into
            ``deviating_epsilon_``.

        Returns
        -------
        FederatedTrainer
            With ``warm_start`` and a fitted estimator: starting from the
            fitted model, with its ledger and history carried on.
        """
        self._check_combinations()
        if seeds is None:
            seeds = self._seeds(deployed=deployed)
        prior = None
        if self._warm():
            self._check_warm_start(input_shape, classes)
            module, loss_fn = copy.deepcopy(self.module_), self.make_model(input_shape, classes)[1]
            if self.eps is not None and not self.ledger_.private:
                warn_user(f"warm_start=True continues a {type(self).__name__} fit that was not private "
                          "(eps=None): its rounds are in the ledger as infinite loss, so epsilon_ will be inf "
                          "whatever eps this fit uses. To fine-tune privately from a model trained on public "
                          "data, start a new fit from it (init=) instead.")
            prior = TrainingState(0, {}, self.ledger_.state_dict(), self.history_,
                                  local_ledger=getattr(self, "local_ledger_", self.ledger_).state_dict(),
                                  deviating_ledger=getattr(self, "deviating_ledger_",  # else ε_local's bounds it
                                                           getattr(self, "local_ledger_", self.ledger_)).state_dict())
        else:
            generator = torch.Generator().manual_seed(int(seeds.init.generate_state(1)[0]))
            module, loss_fn = self.make_model(input_shape, classes, generator=generator)
        eps, clients = self.eps, _Clients(client_sizes, client_names)
        if eps == "budget":
            eps = self._budget_share(module, loss_fn, input_shape, clients)
        if spent is not None:
            eps = self._left_after(spent, eps, module, loss_fn, input_shape, clients)
            prior = _after(prior, spent, spent if spent_local is None else spent_local,
                           spent if spent_deviating is None else spent_deviating)
        trainer = self._planned_trainer(
            module, loss_fn, input_shape, clients, eps, seed_sequence=seeds.server, client_seed=seeds.clients,
            privacy_budget=self.privacy_budget, run_name=repr(self), prior=prior,
            monitor=None if held_out is None else self._monitor(held_out, classes))
        self._warn_of_plan(trainer)
        return trainer

    def _warn_of_plan(self, trainer: FederatedTrainer) -> None:
        """Advice on the run's final plan, given once a fit (not for the plans a search for ε tried); none here."""

    def _planned_trainer(self, module: nn.Module, loss_fn: LossFn, input_shape, clients: _Clients,
                         eps: float | None, **options) -> FederatedTrainer:
        """A trainer of ``module`` for a run targeting ``eps``, planned once: the complete settings the model's
        planner returns, and the server's plan of them where the planner made it (the trainer does not make it
        again)."""
        settings, plan = self._plan_run(input_shape, clients, eps, diameter=step_diameter(module, self._unit),
                                        dimension=model_dimension(module))
        return FederatedTrainer(module, loss_fn, settings, plan=plan, **options)

    def _left_after(self, spent: PrivacyAccountant, eps: float | None, module, loss_fn, input_shape,
                    clients: _Clients) -> float | None:
        """The ε the rounds may target so that they and ``spent`` compose to at most ``eps`` (None: no privacy)."""
        if eps is None:
            return None
        if clients.sizes is None:
            raise ValueError(f"{type(self).__name__}.make_trainer needs client_sizes to plan after a release.")
        whole = PrivacyBudget(eps, self.delta, n_fits=2, accounting=self.accounting)

        def release_at(target: float):
            return self._planned_trainer(module, loss_fn, input_shape, clients, target).pricing.planned_release(
                list(clients.sizes), clients.names)

        try:
            whole.charge(spent, label="released before the rounds")
            with warnings.catch_warnings():  # the plans the search tries: the final plan warns on its own
                warnings.simplefilter("ignore", UserWarning)
                return whole.share(release_at, label=f"{type(self).__name__}'s rounds")
        except PrivacyBudgetExceeded:
            raise ValueError(f"{type(self).__name__}(eps={eps!r}, delta={self.delta!r}) leaves the rounds no ε after "
                             "what the clients release before them: raise eps, or pass a public reference (or "
                             "reference=None for the identity), or set recentre=None where the clients release their "
                             "own means.") from None

    @property
    def _unit(self) -> PrivacyUnit:
        """``privacy_unit`` and ``records_per_subject`` as the one value the run carries."""
        return PrivacyUnit(self.privacy_unit, self.records_per_subject)

    def _check_combinations(self) -> None:
        """ValueError for settings of which one would silently drop the other."""
        name, defaults = type(self).__name__, {f.name: f.default for f in dataclasses.fields(self)}
        if self.records_per_subject is not None and self.privacy_unit != "subject":
            raise ValueError(f"{name} got records_per_subject={self.records_per_subject!r} with privacy_unit="
                             f"{self.privacy_unit!r}: it caps each subject's trials for a guarantee per subject. Set "
                             "privacy_unit='subject', or drop records_per_subject.")
        if "local_epochs" in defaults and self.local_steps not in (None, "auto") \
                and self.local_epochs != defaults["local_epochs"]:
            raise ValueError(f"{name} got local_steps={self.local_steps!r} and local_epochs={self.local_epochs!r}: "
                             "local_steps fixes every client's steps per round and local_epochs would not be used. "
                             "Set one of them.")
        if "clip_quantile" in defaults and self.clip != "auto" and self.clip_quantile != defaults["clip_quantile"]:
            raise ValueError(f"{name} got clip={self.clip!r} and clip_quantile={self.clip_quantile!r}: the quantile "
                             "steers adaptive clipping only. Set clip='auto' to use it, or drop clip_quantile.")
        check_noise_placement(self.get_params(deep=False), name)

    def _budget_share(self, module, loss_fn, input_shape, clients: _Clients) -> float:
        """``eps="budget"``: the ε this fit may target (:meth:`~skfedriem.privacy.PrivacyBudget.share`)."""
        name = type(self).__name__
        if self.privacy_budget is None:
            raise ValueError(f"{name}(eps='budget') takes its ε from privacy_budget, which is None: pass a "
                             "PrivacyBudget(epsilon=..., n_fits=...).")
        if clients.sizes is None:
            raise ValueError(f"{name}.make_trainer needs client_sizes to plan eps='budget'.")

        def release_at(eps: float):
            return self._planned_trainer(module, loss_fn, input_shape, clients, eps).pricing.planned_release(
                list(clients.sizes), clients.names)

        return self.privacy_budget.share(release_at, label=repr(self))

    def _settings(self, input_shape, client_sizes, eps: float | None) -> FederationSettings:
        """This estimator's settings for a run targeting ``eps``, with what its model plans in place of "auto"."""
        return self._plan_run(input_shape, _Clients(client_sizes, None), eps)[0]

    def epsilon_for_group(self, group_size: int) -> float:
        """The fitted run's certified ε at ``delta_`` for any group of ``group_size`` of its privacy units.

        For a record-level fit, what it guarantees a subject with that many
        trials (the fit's accounting method's
        :meth:`~skfedriem.privacy.RunAccounting.group_epsilon`; with
        ``"rfedproj"``, :func:`~skfedriem.privacy.group_epsilon`: substituting
        them, by group privacy, which grows about k-fold and is inf where
        nothing is certified); a subject-level fit's ``epsilon_`` is already
        each subject's. Post-processing of ``ledger_``.

        Parameters
        ----------
        group_size : int
            k, e.g. the most trials one subject contributed.

        Returns
        -------
        float
        """
        check_is_fitted(self, "ledger_")
        if group_size == 1:
            return self.epsilon_
        return get_accounting(self.accounting).group_epsilon(ChargedRun.of(self.ledger_), group_size, self.delta_)

    def set_fitted(self, trainer: FederatedTrainer, *, input_shape: tuple[int, ...], classes=None):
        """Set the fitted attributes from a finished run; returns self.

        Everything set is post-processing of the transcript: the trained
        model, ``epsilon_``, ``delta_``, ``mu0_``, ``noise_std_``,
        ``batch_size_``, ``history_``, ``ledger_`` and ``n_features_in_``.

        Parameters
        ----------
        trainer : FederatedTrainer
            A finished run (in-process, or a deployment's server).
        input_shape : tuple of int
            The shape of one record.
        classes : array-like, optional
            The classes (classifiers).

        Returns
        -------
        self
        """
        self.n_features_in_ = int(input_shape[0])
        self._input_shape = tuple(int(s) for s in input_shape)
        for name, value in trainer.fitted_attributes().items():
            setattr(self, name, value)
        self._set_model_attributes(trainer.module, classes)
        self._fitted_model_parameters = {name: copy.deepcopy(getattr(self, name)) for name in self._model_parameters}
        self._fitted_privacy_unit = trainer.settings.privacy_unit
        return self

    # ------------------------------------------------------------------ helpers
    def _plan_run(self, input_shape: tuple[int, ...], clients: _Clients, eps: float | None, *,
                  diameter: float = 2.0, dimension: int = 0) -> tuple[FederationSettings, PrivacyPlan | None]:
        """The run's complete settings for its target ``eps`` (what the model fixes or plans in place of its
        settings' ``"auto"``), and the server's plan of them when the planner made one (σ calibrated with the
        model's ``diameter``; the grid of distributed noise with its ``dimension``)."""
        return FederationSettings.from_params(self.get_params(deep=False), eps=eps), None

    def client_optimizer(self):
        """The optimiser every client runs, as a deployed site resolves it from the run's settings alone.

        A site knows no other client's size, so this never depends on them.

        Returns
        -------
        str or callable
            A registered optimiser's name, or ``optimizer(params, lr)``.
        """
        return self.optimizer

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
                       subjects=None, classes=None, held_out=None):
        """``fit``'s common body: split into clients (with their subjects), run the rounds, set the fitted
        attributes."""
        seeds = self._seeds()
        # n_clients=1 is one client holding every record (a curator, a within-session fold), subjects or not
        clients_of_subjects = groups is None and subjects is not None and self.n_clients != 1
        groups = self._client_labels(groups, subjects if clients_of_subjects else None, len(records[0]))
        indices, names = client_indices(len(records[0]), groups, n_clients=self._split_count(),
                                        rng=np.random.default_rng(seeds.split))
        clients = [tuple(r[idx] for r in records) for idx in indices]
        sizes = [len(idx) for idx in indices]
        if self.privacy_unit == "subject":
            if groups is None and subjects is None and self.n_clients != 1:
                split = ("the clients would be random chunks of the records, not people" if self.n_clients
                         else "all the records would be one client, protected as one subject")
                raise ValueError(f"{type(self).__name__}(privacy_unit='subject') got neither groups nor subjects: each "
                                 f"client would be one subject, and {split}. Pass subjects= (each record's subject), "
                                 "or groups= (each client then protected as one subject), or set n_clients=1 (all the "
                                 "records one subject, e.g. one subject's session in a MOABB within-session "
                                 "evaluation).")
            codes, _ = client_subjects(indices, names, subjects, n_records=len(records[0]))
            clients = [(*client, torch.from_numpy(c)) for client, c in zip(clients, codes)]
            sizes = [unit_count(client, self._unit) for client in clients]
        elif subjects is not None and not clients_of_subjects:
            warn_user(f"{type(self).__name__} got subjects= and groups= with privacy_unit='record': the clients are "
                      "groups, each trial is protected (not each subject), and subjects is not used. Set "
                      "privacy_unit='subject' to protect each subject, or leave groups out for clients of whole "
                      "subjects.")
        release = None if self._warm() else self._release_trainer(input_shape, sizes, seeds)
        personal = None if self._warm() else self._personal_plan(input_shape, clients)
        spent = _spent_before(release, personal, sizes, names)
        trainer = self.make_trainer(input_shape, classes=classes, held_out=held_out, seeds=seeds,
                                    client_sizes=sizes, client_names=names, **spent)
        if spent:
            trainer.check(clients, names)  # a run the rounds would refuse is refused before anything is charged
            # the whole fit accounted and charged (one fit of the budget) before the releases run
            trainer.charge.charge_plan(sizes, names, released=spent["spent"])
        if release is not None:
            with warnings.catch_warnings():  # its advice is for the rounds, which serve checks on their own
                warnings.simplefilter("ignore", NoiseSwampsSignalWarning)
                release.fit(clients, client_names=names)
            if not _same_ledger(release.accountant_, release.pricing.planned_release(sizes, names)):
                raise RuntimeError("The release before the rounds ran other steps than it planned; nothing was "
                                   "trained on it.")
            self._use_release(release, trainer)
        if personal is not None:
            clients = self._personalised(clients, names, trainer, seeds, planned=personal)
        trainer.fit(clients, client_names=names)
        return self.set_fitted(trainer, input_shape=input_shape, classes=classes)

    def _client_labels(self, groups, subjects, n_records: int):
        """Each record's client: ``groups``; else clients of whole subjects; else None (a positional split, said
        once per class and process)."""
        if groups is None and subjects is not None:
            return subject_clients(check_labels(subjects, "subjects", n_records), self.subject_clients)
        if groups is None and self.n_clients != 1:
            _warn_of_positional_clients(type(self).__name__, self.n_clients)
        return groups

    def _split_count(self) -> int:
        """How many clients a fit without ``groups`` (or ``subjects``) splits the records into."""
        return 1 if self.n_clients is None else self.n_clients

    def _release_trainer(self, input_shape, client_sizes: list[int], seeds: RunSeeds) -> FederatedTrainer | None:
        """The run in which the clients release something before the rounds (none here; the tangent-space model's
        reference point), not yet run and charging no budget itself: ``fit`` plans and charges it with the rounds."""
        return None

    def _use_release(self, release: FederatedTrainer, trainer: FederatedTrainer) -> None:
        """Put what :meth:`_release_trainer`'s run released into the rounds' model (post-processing)."""
        raise NotImplementedError

    def _personal_plan(self, input_shape, clients: list[tuple[torch.Tensor, ...]]) -> PrivacyAccountant | None:
        """What the clients' own releases before the rounds will charge (each client releasing for itself; none
        here, the covariance classifiers' ``recentre="client"``), as a ledger of their planned steps (empty: they
        release nothing private); None: no such releases."""
        return None

    def _personalised(self, clients: list[tuple[torch.Tensor, ...]], names: list, trainer: FederatedTrainer,
                      seeds: RunSeeds, *, planned: PrivacyAccountant) -> list[tuple[torch.Tensor, ...]]:
        """Run every client's own release (what :meth:`_personal_plan` planned) and return its records as its
        rounds read them."""
        raise NotImplementedError

    def _check_warm_start(self, input_shape: tuple[int, ...], classes) -> None:
        """ValueError when this fit cannot continue the fitted model: other records, classes or model settings."""
        if tuple(input_shape) != self._input_shape:
            raise ValueError(f"warm_start=True continues a model fitted on records of shape {self._input_shape}; "
                             f"got records of shape {tuple(input_shape)}. Set warm_start=False to start afresh.")
        if classes is not None and not np.array_equal(np.asarray(classes), self.classes_):
            raise ValueError(f"warm_start=True continues a model of classes {self.classes_.tolist()!r}; got "
                             f"{np.asarray(classes).tolist()!r}. Set warm_start=False to start afresh.")
        unit = getattr(self, "_fitted_privacy_unit", "record")
        if self.privacy_unit != unit:
            raise ValueError(f"warm_start=True continues a fit that protected each {unit!r}; got privacy_unit="
                             f"{self.privacy_unit!r}. Its ledger counts {unit}-level losses, which do not compose with "
                             f"{self.privacy_unit}-level ones: set privacy_unit={unit!r}, or warm_start=False.")
        self._check_same_model()

    def _check_same_model(self) -> None:
        """ValueError when a setting of the model itself changed since the fit a warm start continues."""
        fitted = getattr(self, "_fitted_model_parameters", {})
        changed = [n for n in self._model_parameters if n in fitted and not _same(getattr(self, n), fitted[n])]
        if changed:
            then = ", ".join(f"{n}={fitted[n]!r}" for n in changed)
            now = ", ".join(f"{n}={getattr(self, n)!r}" for n in changed)
            raise ValueError(f"warm_start=True continues a model fitted with {then}; got {now}, which would change "
                             "the model itself. Set them back, or set warm_start=False to fit afresh.")


#: The estimator classes that have said, in this process, that they split the records by position.
_POSITIONAL_WARNED: set[str] = set()


def _warn_of_positional_clients(name: str, n_clients: int | None) -> None:
    """The :class:`~skfedriem.exceptions.PositionalClientsWarning`, once per estimator class and process (a MOABB
    within-session evaluation fits one client's trials hundreds of times)."""
    if name in _POSITIONAL_WARNED:
        return
    _POSITIONAL_WARNED.add(name)
    if n_clients is None:
        what = ("treats all the records as one site's: one client, whose steps carry the noise once (said once per "
                "process). If they come from several sites or subjects")
        silence = "Set n_clients=1 to say that they are one site's."
    else:
        what = (f"splits the records at random into n_clients={n_clients} clients by position, not by site or "
                "subject (said once per process). To split them by site or subject")
        silence = "Set n_clients=1 for one client holding every record."
    warn_user(f"groups=None: {name} {what}, pass groups= (each record's client) or subjects= (clients of whole "
              "subjects, see subject_clients) to fit. Inside cross_val_score, GridSearchCV or a Pipeline, "
              "scikit-learn passes groups on only with metadata routing: sklearn.set_config("
              "enable_metadata_routing=True) and estimator.set_fit_request(groups=True); MOABB's "
              f"CrossSubjectEvaluation passes subjects. {silence}", PositionalClientsWarning)


def _after(prior: TrainingState | None, spent: PrivacyAccountant, spent_local: PrivacyAccountant,
           spent_deviating: PrivacyAccountant) -> TrainingState:
    """``prior`` (or nothing) followed by a release: its steps in every ledger (each client's own guarantee in the
    local one, the deviating server's in its own)."""
    def continued(state: dict | None, release: PrivacyAccountant) -> dict:
        ledger = PrivacyAccountant.from_state_dict(state or prior.ledger) if prior is not None else PrivacyAccountant()
        ledger.extend(release)
        return ledger.state_dict()

    local = prior and prior.local_ledger
    return TrainingState(0, {}, continued(None, spent), [] if prior is None else prior.history,
                         local_ledger=continued(local, spent_local),
                         deviating_ledger=continued(prior and (prior.deviating_ledger or local), spent_deviating))


@dataclass(frozen=True)
class _Clients:
    """The clients' public sizes and names, as the planners take them."""

    sizes: list[int] | None
    names: list | None


def _spent_before(release: FederatedTrainer | None, personal: PrivacyAccountant | None, sizes: list[int],
                  names: list) -> dict:
    """What the releases before the rounds charge, as :meth:`FederatedEstimatorMixin.make_trainer`'s ``spent``,
    ``spent_local`` and ``spent_deviating`` (empty: nothing): the run's release of the clients' mean, then every
    client's own releases (its own noise: the same against anyone)."""
    if release is None and not (personal and personal.history):
        return {}
    spent = {}
    for key, trust in (("spent", "central"), ("spent_local", "local"), ("spent_deviating", "deviating")):
        ledger = PrivacyAccountant() if release is None else release.pricing.planned_release(sizes, names,
                                                                                              trust=trust)
        if personal is not None:
            ledger.extend(personal)
        spent[key] = ledger
    return spent


def _same_ledger(a: PrivacyAccountant, b: PrivacyAccountant) -> bool:
    """Whether two ledgers hold the same steps."""
    return a.state_dict() == b.state_dict()


def _same(a, b) -> bool:
    """Equality of parameter values, arrays included."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a is b


def __getattr__(name: str):
    if name == "ESTIMATOR_PARAMETERS":
        warnings.warn("skfedriem.base.ESTIMATOR_PARAMETERS is deprecated and is removed in 0.3: every parameter's "
                      "documentation is FederatedEstimatorMixin._parameter_docs.", FutureWarning, stacklevel=2)
        docs = FederatedEstimatorMixin._parameter_docs
        return {n: docs[n] for n in ("eps", "n_clients", "random_state", "privacy_budget", "warm_start")}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
