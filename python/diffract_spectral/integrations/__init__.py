"""Integrations with training frameworks (each imports its framework only when it is imported itself):
`diffract_spectral.integrations.transformers` — a Hugging Face Trainer callback (docs/watch.md)."""
