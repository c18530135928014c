"""Adapters that put pyrope inside other libraries' models.

Nothing here is imported by ``import pyrope``: each adapter needs its
library (``pyrope.integrations.transformers`` needs torch and transformers)
and is imported by name.
"""
