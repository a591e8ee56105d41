"""A real deployment (docs: deployment): the ServerApp and site ClientApp of each estimator (:mod:`.apps`), with
their Flower App projects; the run and node configurations (:mod:`.run_config`); the light ClientApp a site's
SuperNode starts for every message (:mod:`.site_client`) and the site's resident worker (:mod:`.site_worker`),
joined by a private channel (:mod:`.channel`).

Empty on purpose: a site's light ClientApp must import neither torch nor the estimators.
"""
