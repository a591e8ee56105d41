"""What the releases cost: the subsampled Gaussian's privacy-loss distributions, the subsampled Skellam's Rényi
DP, ledgers, group privacy, budgets and the accounting methods behind one interface."""
