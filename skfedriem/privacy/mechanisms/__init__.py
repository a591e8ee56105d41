"""The releases: the Gaussian step of local noise and the Skellam shares of distributed noise, the samplers and
secret randomness they draw from, what a step protects, and a client's plan of its steps."""
