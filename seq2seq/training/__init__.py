"""Training stage: the LightningModule, its loss, callbacks, TensorBoard panels and checkpoint format."""
