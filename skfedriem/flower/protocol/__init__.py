"""What the simulation and every deployment share: the messages (:mod:`.messages`), the ClientApp around a client's
round and what a site refuses (:mod:`.client_app`), a site's error replies (:mod:`.errors`) and its replayed
replies (:mod:`.replies`).

Empty on purpose: a deployed site's light ClientApp imports :mod:`.errors` without torch.
"""
