"""The documentation rendered from its sources: the records in docs/records/, the schemas and configs/."""
