"""The engine: the C binding (``binding``, the one module that imports the
extension), the storage types (``dtypes``), instruction-set and thread state
(``isa``), the cos/sin tables (``tables``), the row cache, the planner and the
sections map, and the launcher (``launcher.Call.launch``).

Below ``pyrope.rope``: nothing here imports a public module but ``errors``, nor an
adapter (``_interop``), a reader or a tool (``tests/tools/test_import_graph.py``).
"""
