"""Tools around a deployment: TLS certificates and SuperNode keys (:mod:`.certificates`), and a real secured
deployment on this host (:mod:`.loopback`, ``python -m skfedriem.flower.operations.loopback``)."""
