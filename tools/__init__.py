"""Tools for the repository itself, not shipped with the package: ``tools/docs/`` renders the docs."""
