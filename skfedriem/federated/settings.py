"""The one settings object of a federated run: what the trainer, the plan and a deployment's apps read.

Every setting is declared once, here: its type, its allowed values (a
scikit-learn parameter constraint, so registered names are read when it is
checked) and its documentation, which the estimators' docstrings and
constraints are built from (an estimator declares it with :func:`skfedriem.base.setting`). An
estimator builds a :class:`FederationSettings` from its ``get_params()`` once
per fit, inside the validation scikit-learn's ``_fit_context`` already did; a
settings object built directly is validated when it is made.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import torch
from sklearn import get_config

from .._utils.backends import BACKENDS
from .._utils.compat import Interval, StrOptions, validate_parameter_constraints
from ..privacy.accounting.accounting_methods import ACCOUNTINGS, RunAccounting
from ..privacy.accounting.subsampled_gaussian import MAX_EPSILON, MIN_DELTA
from ..privacy.mechanisms.units import PRIVACY_UNITS, PrivacyUnit
from .aggregation import AGGREGATIONS, Aggregation
from .optimizers import OPTIMIZERS

__all__ = ["FederationSettings", "SettingDoc", "doc_entry", "setting_constraints",
           "setting_docs"]

@dataclass(frozen=True)
class SettingDoc:
    """How a setting is documented and checked.

    Parameters
    ----------
    type : str
        Its numpydoc type without the string values of ``values``, e.g. ``"float or None"``.
    text : str
        What it does (one paragraph; the default is added per estimator).
    constraints : list
        scikit-learn parameter constraints (``Interval``, ``StrOptions``, types, ``None``...), without ``values``.
    values : mapping of str to str, optional
        Special string values it also takes (e.g. ``"auto"``), each with what it means.
    """

    type: str
    text: str
    constraints: list
    values: Mapping[str, str] = field(default_factory=dict)

    def narrowed(self, values: Mapping[str, str] | None = None, without: tuple = ()) -> SettingDoc:
        """The same setting with more special ``values`` and without the alternatives in ``without``.

        Parameters
        ----------
        values : mapping of str to str, optional
            Special string values an estimator adds (its planner's ``"auto"``...).
        without : tuple
            Special values, or ``None``, that an estimator does not take.

        Returns
        -------
        SettingDoc
        """
        kept = {v: text for v, text in {**self.values, **(values or {})}.items() if v not in without}
        constraints = [c for c in self.constraints if not (c is None and None in without)]
        alternatives = [a for a in _alternatives(self.type) if not (a == "None" and None in without)]
        return SettingDoc(_join(alternatives), self.text, constraints, kept)

    @property
    def all_constraints(self) -> list:
        """Its constraints with its special values."""
        return [*self.constraints, StrOptions(set(self.values))] if self.values else list(self.constraints)

    @property
    def full_type(self) -> str:
        """Its numpydoc type with its special values."""
        return _join(_alternatives(self.type) + [f'"{v}"' for v in self.values])

    @property
    def full_text(self) -> str:
        """Its text, then what each special value means."""
        return " ".join([self.text, *(f'``"{v}"``: {text}' for v, text in self.values.items())])


def _alternatives(type_: str) -> list[str]:
    """``"int, None or 'auto'"`` -> its alternatives (what stands inside brackets stays whole)."""
    parts, depth, current = [], 0, ""
    for char in type_.replace(" or ", ", "):
        depth += (char in "([{") - (char in ")]}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [a.strip() for a in [*parts, current] if a.strip()]


def _join(alternatives: list[str]) -> str:
    return alternatives[0] if len(alternatives) == 1 else f"{', '.join(alternatives[:-1])} or {alternatives[-1]}"


def _setting(default: Any, type_: str, constraints: list, text: str, values: Mapping[str, str] | None = None) -> Any:
    return field(default=default, metadata={"doc": SettingDoc(type_, text, constraints, dict(values or {}))})


@dataclass(frozen=True)
class FederationSettings:
    """The public settings of a federated run (DP-RFedProj, Pautrel et al. 2026), validated once.

    The defaults here are the trainer's; every estimator states its own in
    its signature, and its docstring is built from the same declarations
    (:func:`setting_docs`).

    Parameters
    ----------
    [settings]

    Examples
    --------
    >>> settings = FederationSettings(n_rounds=50, batch_size=10, local_steps=5, eps=4.0)
    >>> settings.n_rounds, settings.aggregation
    (50, 'projavg')
    >>> FederationSettings(n_rounds=0)
    Traceback (most recent call last):
    ...
    sklearn.utils._param_validation.InvalidParameterError: The 'n_rounds' parameter of FederationSettings must be an int in the range [1, inf). Got 0 instead.
    """

    eps: float | None = _setting(
        None, "float or None", [Interval(Real, 0, MAX_EPSILON, closed="right"), None],
        "Target ε of the whole run, in (0, 100], for record-level (ε, δ)-DP under substitution of one record of "
        "any client. None trains without clipping and noise: every round is then charged as infinite loss.")
    delta: float = _setting(
        1e-5, "float", [Interval(Real, MIN_DELTA, 1, closed="left")],
        "Target δ, in [1e-12, 1) (the accountant certifies nothing smaller); keep it well below 1 / (records of "
        "the smallest client).")
    clip: float | str = _setting(
        1.0, "float", [Interval(Real, 0, None, closed="neither")],
        "C, the per-record gradient clip norm, over all parameter blocks together.",
        {"auto": "adaptive clipping (Andrew et al., 2021), C follows the ``clip_quantile`` of the gradient norms, "
                 "estimated from a noisy count every step releases and charged with it "
                 "(:mod:`skfedriem.federated.adaptive_clip`)."})
    clip_quantile: float = _setting(
        0.5, "float", [Interval(Real, 0, 1, closed="neither")],
        "γ, the fraction of records left unclipped that ``clip=\"auto\"`` aims at.")
    n_rounds: int = _setting(
        200, "int", [Interval(Integral, 1, None, closed="left")], "T, the number of communication rounds.")
    local_epochs: float = _setting(
        1.0, "float", [Interval(Real, 0, None, closed="neither")],
        "Local work per round: τ_i = ceil(local_epochs m_i / B) steps for a client of m_i records without "
        "privacy; under privacy every client takes the smallest client's ceil(local_epochs m⋆ / B), since a "
        "round is charged at the largest count and the smallest client's rate together (with full batches, "
        "ceil(local_epochs) steps). Each step draws a fresh uniform batch.")
    local_steps: int | None = _setting(
        None, "int or None", [Interval(Integral, 1, None, closed="left"), None],
        "τ, the private steps every client takes per round, in place of ``local_epochs`` where an estimator has it.")
    batch_size: int | None = _setting(
        None, "int or None", [Interval(Integral, 1, None, closed="left"), None],
        "B, clamped to the smallest client with a warning. None: every client's batch is all its records "
        "(q = 1), with noise scaled to its own size so that every client spends the same privacy.")
    clients_per_round: int | None = _setting(
        None, "int or None", [Interval(Integral, 1, None, closed="left"), None],
        "k clients drawn per round uniformly without replacement; all when None. The privacy cost does not "
        "depend on it (the server chooses and sees who takes part).")
    aggregation: str = _setting(
        "projavg", "str or Aggregation", [AGGREGATIONS.constraint(), Aggregation],
        "The server's aggregation rule: ``\"projavg\"`` and ``\"rlavg\"`` (the paper's), ``\"retavg\"``, "
        "``\"kfavg\"`` (baselines), or one added with :func:`~skfedriem.federated.register_aggregation`.")
    optimizer: str | Callable = _setting(
        "sgd", "str or callable", [OPTIMIZERS.constraint(), callable],
        "The clients' local optimiser, fresh at each round: ``\"sgd\"``, ``\"adam\"``, one added with "
        ":func:`~skfedriem.federated.register_optimizer`, or ``optimizer(params, lr) -> torch.optim.Optimizer``.")
    lr: float = _setting(
        0.1, "float", [Interval(Real, 0, None, closed="neither")], "η, the learning rate of round 0.")
    lr_schedule: str | Callable = _setting(
        "constant", "{\"constant\", \"cosine\"} or callable", [StrOptions({"constant", "cosine"}), callable],
        "The learning rate as a function of the round: constant, cosine decay η (1 + cos(π t / T)) / 2, or "
        "``schedule(t)``.")
    sampling: str = _setting(
        "fixed", "{\"fixed\", \"poisson\"}", [StrOptions({"fixed", "poisson"})],
        "Batches of exactly B records drawn without replacement at every step (the paper's theorem), or "
        "Poisson sampling at rate B / m_i.")
    privacy_unit: str = _setting(
        "record", "{\"record\", \"subject\"}", [StrOptions(set(PRIVACY_UNITS))],
        "What the guarantee protects. ``\"record\"``: one trial (ε, δ for substituting one record). ``\"subject\"``: "
        "one person, all their trials together: each step samples ``batch_size`` of a client's subjects, each "
        "contributing the mean gradient of all its trials, clipped to C (user-level sampling); ε, δ are then for "
        "substituting one subject, and every client size, rate and ``batch_size`` counts subjects. ``fit`` takes "
        "each trial's subject as ``subjects=`` (none: each client is one subject, i.e. client-level privacy); a "
        "deployed site names its subject array in its node config (``subject-key``). See the docs page \"What is "
        "protected: a trial or a person\".")
    records_per_subject: int | None = _setting(
        None, "int or None", [Interval(Integral, 1, None, closed="left"), None],
        "``privacy_unit=\"subject\"`` only. None: each step samples whole subjects (above). k: every round, each "
        "subject gives exactly k of its trials (a fresh random k; its own repeated when it has fewer), and the steps "
        "sample and clip those trials as records, with ``batch_size`` and client sizes counting them (k per "
        "subject): example-level sampling, charged per subject by group privacy over its k trials. It keeps the "
        "amplification of sampling trials where a site holds few subjects. See the docs page \"What is protected: "
        "a trial or a person\".")
    accounting: str | RunAccounting = _setting(
        "rfedproj", "str or RunAccounting", [ACCOUNTINGS.constraint(), RunAccounting],
        "How σ is calibrated and ε reported: ``\"rfedproj\"`` (the paper's whole-run composition), "
        "``\"prirfed\"`` (PriRFed's per-round accounting and advanced composition, a baseline with "
        "``sampling=\"poisson\"``; about 5x more noise at equal ε) or a registered method.")
    noise: str = _setting(
        "local", "{\"local\", \"distributed\"}", [StrOptions({"local", "distributed"})],
        "Where the noise is added. ``\"local\"``: every client adds the whole noise to its own release, which "
        "protects against any server. ``\"distributed\"``: every round is one step (τ = 1) of every selected client, "
        "which releases its clipped sum on a public integer grid plus an integer share of the noise; the server, "
        "running secure aggregation, learns only the sum, whose K − t honest shares carry the noise one trusted "
        "curator would add (Skellam mechanism, :mod:`skfedriem.privacy.mechanisms.discrete`). ``epsilon_`` is then the "
        "guarantee against a server that sees only the sum and colludes with at most ``colluders`` clients, and "
        "``local_epsilon_`` what each client's own share guarantees against a server that breaks the protocol, "
        "``deviating_epsilon_`` what the run guarantees against a server that deviates with ``colluders`` clients "
        "(it may declare t honest clients dropped out: K − 2t honest shares; with ``dropouts``, K − 2t − d). "
        "See the docs page \"Where the noise is added\".")
    colluders: int | None = _setting(
        None, "int or None", [Interval(Integral, 0, None, closed="left"), None],
        "``noise=\"distributed\"`` only: t, how many of a round's K clients may drop out or collude with the server; "
        "each share is sized so that the other K − t alone carry the noise. None: ⌈K / 10⌉ (at least 1 when K > 1; "
        "0 for a lone client). Must be below K.")
    dropouts: int = _setting(
        0, "int", [Interval(Integral, 0, None, closed="left")],
        "``noise=\"distributed\"`` only: d, the dropout allowance: up to d more of a round's K clients may drop out "
        "(beyond the t of ``colluders``) and the round still applies with its noise whole. Each client adds the share "
        "that K − t − d honest clients need and keeps the excess apart; once the round's answers are in, the excess "
        "over what its answering clients need is taken out (in process; a deployed site draws its share for the "
        "sites its signed lists leave out, and takes out the excess for those that drop out during the round once "
        "the final lists are signed). A round with fewer than K − t − d answers is discarded, still "
        "charged. ``epsilon_`` and ``local_epsilon_`` are unchanged; ``deviating_epsilon_`` counts K − 2t − d honest "
        "shares of the larger size. Needs t + d < K.")
    reset_optimizer: bool = _setting(
        True, "bool", ["boolean"],
        "Start each client's round from a fresh optimiser state (else a client keeps its own, e.g. Adam's "
        "moments, across rounds; it never leaves the client).")
    secure_mode: bool = _setting(
        False, "bool", ["boolean"],
        "Batches and noise from the OS's cryptographically secure generator, with Gaussian sampling hardened "
        "against floating-point attacks (:class:`~skfedriem.privacy.SecureRandomness`); needs "
        "``random_state=None``.")
    client_timings: bool = _setting(
        False, "bool", ["boolean"],
        "Add ``round_seconds`` and ``submission_seconds`` to ``history_``: a non-private diagnostic (they time "
        "work done on the clients' records).")
    backend: str = _setting(
        "local", "str", [BACKENDS.constraint()],
        "``\"local\"`` runs the clients in this process (or in worker processes, see ``n_jobs``); "
        "``\"flower\"`` runs the same protocol on Flower's simulation engine (one virtual SuperNode per client; "
        "same seeds, so the same model and ε; needs ``pip install \"skfedriem[flower]\"``).")
    n_jobs: int | None = _setting(
        None, "int or None", [Integral, None],
        "Worker processes running a round's clients at the same time (scikit-learn's convention: None is 1, -1 "
        "every CPU; at most one per client of a round). The model and ε do not depend on it. Every job computes "
        "with one thread (torch and BLAS) while fitting, which keeps tiny-matrix work fast on a busy machine. "
        "``backend=\"local\"`` only.")
    lockstep: bool = _setting(
        True, "bool", ["boolean"],
        "``backend=\"local\"``: a round's clients with the same instructions and fixed-size batches take their local "
        "steps as one batched computation over stacked copies of the model (each with its own batches, clipping, "
        "noise and optimiser state, as alone; :mod:`skfedriem.federated.lockstep`). The noise draws and ε do not "
        "depend on it; the model may differ from one-by-one clients by floating-point rounding. False: one client "
        "after another.")
    device: str = _setting(
        "cpu", "str or torch.device", [str, torch.device],
        "Where ``backend=\"local\"`` computes the clients' local steps (skorch's convention): ``\"cpu\"``, or "
        "``\"cuda\"`` / ``\"cuda:N\"`` where a GPU is available. The noise and batches are drawn on the CPU from each "
        "client's own secret randomness and copied to the device, so they keep their full entropy anywhere; the "
        "server and the fitted model stay on the CPU.")
    verbose: int | str = _setting(
        "auto", "int", ["verbose"],
        "Progress over rounds on stderr. 0: none; 1: a bar from the first round; > 1 also Flower's and Ray's logs.",
        {"auto": "a bar once a fit has run 5 s, where someone is watching (a terminal or a notebook; not when stderr "
                 "is captured, piped or a log)."})

    def __post_init__(self) -> None:
        _check(**dataclasses.asdict(self))

    @classmethod
    def from_params(cls, params: Mapping[str, Any], **overrides: Any) -> FederationSettings:
        """The settings named in ``params`` (e.g. an estimator's ``get_params()``; other keys are ignored), then ``overrides``.

        Parameters
        ----------
        params : mapping
        **overrides
            Values that replace those of ``params`` (e.g. what a planner chose for ``"auto"``).

        Returns
        -------
        FederationSettings
        """
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in params.items() if k in names}, **overrides})

    @property
    def unit(self) -> PrivacyUnit:
        """``privacy_unit`` and ``records_per_subject`` as the one value the plan, the clients and every ledger
        entry carry."""
        return PrivacyUnit(self.privacy_unit, self.records_per_subject)

    def replace(self, **changes: Any) -> FederationSettings:
        """A copy with ``changes`` (validated).

        Parameters
        ----------
        **changes
            New values of some settings.

        Returns
        -------
        FederationSettings
        """
        return dataclasses.replace(self, **changes)


def setting_docs() -> dict[str, SettingDoc]:
    """Every setting's documentation and constraints, by name, in declaration order.

    Returns
    -------
    dict of str to SettingDoc
    """
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(FederationSettings)}


def setting_constraints() -> dict[str, list]:
    """Every setting's scikit-learn parameter constraints, by name.

    Returns
    -------
    dict of str to list
    """
    return {name: doc.all_constraints for name, doc in setting_docs().items()}


def _check(**settings) -> None:
    """Validate, unless inside an estimator's ``fit`` (scikit-learn's ``_fit_context`` validated its parameters)."""
    if not get_config()["skip_parameter_validation"]:
        validate_parameter_constraints(setting_constraints(), settings, caller_name="FederationSettings")


def doc_entry(name: str, doc: SettingDoc, default: Any) -> str:
    """One numpydoc parameter entry (``name : type, default=...`` and its text), indented for a class docstring.

    Parameters
    ----------
    name : str
    doc : SettingDoc
    default : object

    Returns
    -------
    str
    """
    default_text = f'"{default}"' if isinstance(default, str) else repr(default)
    body = textwrap.fill(doc.full_text, 100, initial_indent=" " * 8, subsequent_indent=" " * 8)
    return f"    {name} : {doc.full_type}, default={default_text}\n{body}"


def _document_settings() -> None:
    entries = [doc_entry(f.name, f.metadata["doc"], f.default) for f in dataclasses.fields(FederationSettings)]
    FederationSettings.__doc__ = FederationSettings.__doc__.replace("[settings]", "\n".join(entries).strip())


_document_settings()
