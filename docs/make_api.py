"""Write ``docs/api.rst`` and ``docs/api/``: every public name of every module, once (where it is defined first in
this list).

Run after adding a public name; ``tests/test_docs.py`` checks the page is complete.
"""

import importlib
from pathlib import Path

SECTIONS = [
    ("Estimators", "skfedriem", "The scikit-learn estimators."),
    ("Display", "skfedriem.display", "A fitted estimator's history, drawn."),
    ("Estimator base", "skfedriem.base", "What every federated estimator shares: its parameters, declared once."),
    ("Classification base", "skfedriem.classification", "What every federated classifier shares."),
    ("Classifier planning", "skfedriem.classification.planning",
     "The classifiers' schedules, from public quantities only; each model's defaults."),
    ("PCA planning", "skfedriem.decomposition.planning",
     "FederatedPCA's solver and schedule, from public quantities only."),
    ("Manifolds", "skfedriem.manifolds", "Parameter geometries, and optimisers that keep parameters on them."),
    ("Privacy", "skfedriem.privacy", "The private local step, samplers, secret randomness, accounting and budgets."),
    ("The private step", "skfedriem.privacy.mechanisms.mechanism",
     "Clipping, noise and the release of one step, once, for K clients' copies of a model (a lone client is K = 1)."),
    ("Per-record gradients", "skfedriem.privacy.per_record.gradients",
     "Every record's tangent gradient as the step reads it: the routes, norms and weighted sums."),
    ("Step mechanisms", "skfedriem.privacy.mechanisms.step_mechanism",
     "What a client's steps release and how it is charged: the Gaussian (local noise) or the Skellam (distributed)."),
    ("Distributed noise", "skfedriem.privacy.mechanisms.discrete",
     "A step's clipped sum on a public integer grid plus a client's Skellam share; the sum decoded."),
    ("The distributed step", "skfedriem.privacy.mechanisms.distributed",
     "The private step with distributed noise: every client's clipped records encoded, summed and given its share."),
    ("Accounting of the subsampled Skellam", "skfedriem.privacy.accounting.skellam",
     "Distributed-noise steps, subsampled and composed: Rényi DP, or their dominating privacy-loss distributions."),
    ("Privacy-loss distributions of subsampled Skellam steps", "skfedriem.privacy.accounting.skellam_pld",
     "A step's privacy profile from its Rényi DP, subsampled in the f-DP domain; the real mechanism at one coordinate."),
    ("Privacy units", "skfedriem.privacy.mechanisms.units", "What a step protects: a record, or a subject with all its records."),
    ("Accounting of the subsampled Gaussian", "skfedriem.privacy.accounting.subsampled_gaussian",
     "The step's privacy-loss distributions, their grid, calibration."),
    ("Chaining guarantees", "skfedriem.privacy.accounting.chaining",
     "Guarantees for datasets several neighbour steps apart (group privacy)."),
    ("Reading privacy curves", "skfedriem.privacy.accounting.pld_reading",
     "A privacy-loss distribution's ε at δ and δ at ε, read fast (the library's values)."),
    ("Federation", "skfedriem.federated", "The round loop, the clients' side (one by one and in lockstep), transports, plans and checkpoints."),
    ("The distributed server", "skfedriem.federated.distributed_server",
     "The sum of a round's releases decoded, and the one projected step it makes."),
    ("Noise placements", "skfedriem.federated.noise_placement",
     "Where the noise is added, as the object that answers for it: the settings each placement can honour."),
    ("Server strategies", "skfedriem.federated.server_strategy",
     "What the server does with a round's replies: the mean of the submissions, or one step on their decoded sum."),
    ("Lockstep", "skfedriem.federated.lockstep",
     "Simulated clients taking their local steps as one computation: the rule, the stack and what can be stacked."),
    ("Poisson stacks", "skfedriem.federated.lockstep.widths",
     "The public width of a stack of clients that sample by Poisson, and their batches laid out in it."),
    ("Models", "skfedriem.models", "Torch modules: SPDNet and its layers, EEGNet, the PCA objective."),
    ("SPDNet per-record gradients", "skfedriem.models.spdnet_gradients",
     "The private step's closed form for SPDNet: every record's tangent gradient, one forward, one written backward."),
    ("Datasets", "skfedriem.datasets", "Synthetic federations and MOABB helpers."),
    ("Metrics", "skfedriem.metrics", "Measures for experiments (on data someone holds in full: not private)."),
    ("Baselines", "skfedriem.baselines", "PriRFed's accounting and noise."),
    ("Audit", "skfedriem.audit", "Empirical privacy audits."),
    ("Audit mutations", "skfedriem.audit.mutations", "Broken mechanisms an audit must catch."),
    ("Exceptions and warnings", "skfedriem.exceptions", ""),
    ("Secure aggregation", "skfedriem.secure_aggregation",
     "The server learns the sum of the sites' releases and nothing else, even when sites drop out."),
    ("Secure aggregation primitives", "skfedriem.secure_aggregation.crypto",
     "Signatures, key agreement, encryption and masks, from cryptography."),
    ("Shamir shares", "skfedriem.secure_aggregation.shamir", "256-bit secrets shared with pycryptodome's Shamir."),
    ("Flower", "skfedriem.flower", "The protocol on Flower's Message API."),
    ("Flower secure aggregation at a site", "skfedriem.flower.protocol.secure_site",
     "A deployed site's consent to distributed noise and its stages of secure aggregation."),
    ("Flower secure aggregation at the server", "skfedriem.flower.protocol.secure_rounds",
     "A run's batches of instances and its rounds under secure aggregation, over Flower messages."),
    ("Flower deployment apps", "skfedriem.flower.deployment.apps", ""),
    ("Flower run configuration", "skfedriem.flower.deployment.run_config", ""),
    ("Flower site client", "skfedriem.flower.deployment.site_client", "The light ClientApp a deployed site's SuperNode runs."),
    ("Flower site worker", "skfedriem.flower.deployment.site_worker", "A deployed site's resident worker."),
    ("Flower certificates", "skfedriem.flower.operations.certificates", ""),
    ("Flower loopback", "skfedriem.flower.operations.loopback", ""),
    ("Flower simulation", "skfedriem.flower.simulation", ""),
    ("EEG study", "skfedriem.experiments.eeg", "The paper's EEG comparison as a resumable study."),
    ("EEG study arms", "skfedriem.experiments.arms", "The study's arms, read by the study and its report."),
    ("EEG study report", "skfedriem.experiments.report", "Tables and figures from a study folder."),
    ("Centralised training with skorch", "skfedriem.experiments.central", ""),
]


def api_names() -> list[tuple[str, str, str, list[str]]]:
    """(title, module, blurb, names) for each section, every object listed once."""
    seen, sections = set(), []
    for title, modname, blurb in SECTIONS:
        module = importlib.import_module(modname)
        names = []
        for name in module.__all__:
            obj = getattr(module, name)
            key = id(obj) if callable(obj) or isinstance(obj, type) else (modname, name)
            if name == "__version__" or key in seen:
                continue
            seen.add(key)
            names.append(name)
        sections.append((title, modname, blurb, names))
    return sections


def slug(title: str) -> str:
    """A section's page name: ``"Flower site client"`` -> ``"flower-site-client"``."""
    return "-".join(title.lower().replace(",", "").split())


def main() -> None:
    """``docs/api.rst`` (a toctree of the sections, so the sidebar groups names by module) and one page per section
    under ``docs/api/``, whose names appear under their short name (the templates' ``objname``)."""
    folder = Path(__file__).with_name("api")
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.rst"):
        old.unlink()
    index = ["API reference", "=============", "",
             "Every public name, by module, each with a page generated from its numpydoc docstring.", "",
             ".. toctree::", "   :maxdepth: 2", ""]
    for title, modname, blurb, names in api_names():
        page = [title, "=" * len(title), ""]
        if blurb:
            page += [blurb, ""]
        page += [f"``{modname}``", "", f".. currentmodule:: {modname}", "", ".. autosummary::",
                 "   :toctree: ../generated/", "   :nosignatures:", "", *[f"   {n}" for n in names], ""]
        (folder / f"{slug(title)}.rst").write_text("\n".join(page))
        index.append(f"   api/{slug(title)}")
    (Path(__file__).with_name("api.rst")).write_text("\n".join(index + [""]))


if __name__ == "__main__":
    main()
