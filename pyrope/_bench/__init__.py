"""The benchmark's method (timing constants, yardstick), report (tables, targets,
JSON) and picture; used by ``pyrope.benchmark``, ``pyrope bench`` and ``bench/``."""
