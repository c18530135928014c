"""Where pickles made by pyrope 0.2.0 find the row cache's class: they name
this path (``pyrope._table_cache.TableCache``). Ropes now pickle by contract
and name no private module; ``tests/api/test_pickle_compat.py`` keeps the
old pickles loading."""
from ._engine.table_cache import TableCache  # noqa: F401
