"""torch and the pinned transformers, for the tests that compare with transformers'
own code: one place that finds them, or fails saying how to install them."""
import importlib
import pathlib
import re

import pytest


def pinned_transformers():
    """The transformers version the ``conformance`` extra pins."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'"transformers==([^"]+)"', text)
    assert found, "pyproject.toml must pin transformers==X in the conformance extra"
    return found.group(1)


def torch_and_transformers(purpose):
    """``(torch, transformers)``; a test failure naming ``purpose`` when they are missing
    (they are never optional: `make test` installs the extra)."""
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        pytest.fail(f"{purpose} needs torch and transformers=={pinned_transformers()} "
                    f"(pyproject extra 'conformance'; `make test` installs it): {exc}", pytrace=False)
    return torch, transformers
