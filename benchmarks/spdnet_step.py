"""Cost of private training of SPDNet (issue 4 goals).

(a) One local step on SPDNet 22 -> 16 -> 4 classes (BNCI2014_001 shape), B = 64,
    float32, same batch, medians of repeated steps, ratios to the non-private step:

    * non_private: one backward pass of the mean loss, projection, optimiser, Π;
    * private (ours): the private step as it runs: per-sample tangent gradients in
      closed form (skfedriem.models.spdnet_gradients), clipping, noise, optimiser, Π;

    and the per-record routes alone (gradients, projection, clipping and noise, no optimiser):

    * private_closed_form: the closed form;
    * private_layer_rules: one backward pass and per-layer rules (skfedriem.privacy.per_record.layerwise,
      the route before the closed form, still that of a model without one);
    * private_vmap: per-sample gradients by torch.func vmap (the generic path);
    * private_loop: B separate backward passes (what vectorisation replaces).

(b) One private run of the BNCI2014_001-size protocol on synthetic SPD data of
    that shape: 3 clients x 1300 trials, 22 channels, 4 classes, T rounds, one
    local epoch, B = 64, ε = 10: wall time and peak RSS of the process.

    python benchmarks/spdnet_step.py                # (a) and (b), T = 200
    python benchmarks/spdnet_step.py --rounds 20    # shorter (b)
"""

import argparse
import json
import math
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F
from _shared import timed

from skfedriem import FederatedSPDNetClassifier
from skfedriem.datasets import make_spd_classification
from skfedriem.models import SPDNet
from skfedriem.privacy import (DenseGradients, LoneClient, PrivateManifoldOptimizer, SeededRandomness,
                               layerwise_per_sample_gradients, per_sample_gradients)
from skfedriem.privacy.per_record.gradients import project_per_sample
from skfedriem.privacy.mechanisms.mechanism import clip_factors, clip_margin, noisy_release
from skfedriem.privacy.per_record.per_sample import trainable_parameters

N_CH, D, K, B = 22, 16, 4, 64


def loss_fn(output, target):
    return F.cross_entropy(output, target, reduction="none")


def generic_private_gradient(model, batch, per_sample, randomness, clip=1.0, noise_std=0.05, tangent=False):
    params = trainable_parameters(model)
    grads = per_sample(model, batch)
    grads = DenseGradients(grads if tangent else project_per_sample(grads, params))
    sums = grads.weighted_sum(clip_factors(grads.norms(), clip, clip_margin(p.dtype for p in params.values())))
    return noisy_release(LoneClient(model), {name: total.unsqueeze(0) for name, total in sums.items()},
                         denominator=B, noise_std=noise_std, randomness=[randomness])


def closed_form_gradients(model, batch):
    return model.per_record_tangent_gradients(loss_fn, batch)


def layer_rule_gradients(model, batch):
    return layerwise_per_sample_gradients(model, loss_fn, batch)


def vmap_gradients(model, batch):
    return per_sample_gradients(model, loss_fn, batch)


def loop_gradients(model, batch):
    X, y = batch
    params = trainable_parameters(model)
    rows = [torch.autograd.grad(loss_fn(model(X[i : i + 1]), y[i : i + 1]).sum(), list(params.values()))
            for i in range(X.shape[0])]
    return {name: torch.stack([r[j] for r in rows]) for j, name in enumerate(params)}


def step_costs(repeats: int) -> dict:
    X, y, _ = make_spd_classification(1, B, N_CH, n_classes=K, scale=1e-10, random_state=0)
    batch = (torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y))
    g = SeededRandomness(np.random.SeedSequence(0))
    ms = {}
    for label, clip, sigma in (("non_private", math.inf, 0.0), ("private", 1.0, 0.05)):
        model = SPDNet(N_CH, K, (D,), generator=torch.Generator().manual_seed(1))
        opt = PrivateManifoldOptimizer(model, torch.optim.Adam(model.parameters(), lr=1e-3), loss_fn=loss_fn,
                                       clip=clip, noise_std=sigma, randomness=g)
        ms[label] = 1e3 * timed(lambda: opt.step(batch, denominator=B), repeats)
    model = SPDNet(N_CH, K, (D,), generator=torch.Generator().manual_seed(1))
    ms["private_closed_form"] = 1e3 * timed(
        lambda: generic_private_gradient(model, batch, closed_form_gradients, g, tangent=True), repeats)
    ms["private_layer_rules"] = 1e3 * timed(lambda: generic_private_gradient(model, batch, layer_rule_gradients, g),
                                            repeats)
    ms["private_vmap"] = 1e3 * timed(lambda: generic_private_gradient(model, batch, vmap_gradients, g), repeats)
    ms["private_loop"] = 1e3 * timed(lambda: generic_private_gradient(model, batch, loop_gradients, g),
                                     max(3, repeats // 10), warmup=1)
    return ms


def full_run(rounds: int) -> dict:
    X, y, groups = make_spd_classification(3, 1300, N_CH, n_classes=K, class_sep=0.5, scale=1e-10, random_state=0)
    clf = FederatedSPDNetClassifier(eps=10.0, dims=(D,), n_rounds=rounds, local_epochs=1, batch_size=B,
                                    random_state=0)
    t0 = time.perf_counter()
    clf.fit(X, y, groups=groups)
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rounds": rounds, "seconds": seconds, "peak_rss_mb": peak_mb, "epsilon": clf.epsilon_,
            "train_accuracy": clf.score(X, y)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ms = step_costs(args.repeats)
    print(f"(a) SPDNet {N_CH}->{D}->{K}, B={B}, float32, {args.threads} threads; median ms per step")
    print(f"{'variant':19} {'ms/step':>9} {'x non-private':>14}")
    for label, value in ms.items():
        print(f"{label:19} {value:9.3f} {value / ms['non_private']:14.2f}")
    run = full_run(args.rounds)
    print(f"(b) 3 clients x 1300 trials, 22 ch, 4 classes, T={run['rounds']}, 1 local epoch, B={B}, eps=10: "
          f"{run['seconds']:.1f} s, peak RSS {run['peak_rss_mb']:.0f} MB, certified eps {run['epsilon']:.3f}")
    print(json.dumps({"benchmark": "spdnet_step", "ms": ms, "private_over_non_private": ms["private"] / ms["non_private"],
                      "vmap_over_private": ms["private_vmap"] / ms["private"], "run": run}))


if __name__ == "__main__":
    main()
