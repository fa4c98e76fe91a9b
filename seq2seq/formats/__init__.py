"""What the project writes and reads back: the checkpoint, the export folder, the run directory."""
