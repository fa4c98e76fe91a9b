"""Training stage: the LightningModule, its loss, schedule and budget, callbacks and TensorBoard panels."""
