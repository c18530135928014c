"""The engine: the C binding, instruction-set and thread state, the row cache, the
planner and the sections map, and the launcher (``kernel.Call.launch``).

Below ``pyrope.rope``: nothing here imports a public module but ``errors``, nor an
adapter (``_interop``), a reader or a tool (``tests/tools/test_import_graph.py``).
"""
