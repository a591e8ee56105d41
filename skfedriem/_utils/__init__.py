"""The package's own plumbing, below every other module: scikit-learn compatibility, registries, files, warnings."""
