"""Adapters: torch tensors and DLPack objects viewed as numpy arrays (and back),
capsules numpy will not import, and autograd for torch callers."""
