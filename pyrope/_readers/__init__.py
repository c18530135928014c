"""Readers of untrusted files and configs: transformers configs to Rope arguments,
GGUF files within their size. They return arguments, never a Rope."""
