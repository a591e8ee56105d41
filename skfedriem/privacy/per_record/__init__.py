"""Every record's gradient, as the private step reads it: what a model declares (capabilities), the routes
(closed forms, per-layer rules, ``torch.func``), K clients' copies and the check that records stay apart."""
