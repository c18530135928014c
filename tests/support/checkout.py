"""Where the checkout is, for the tests that read its files or run a child
Python on it."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env_with_checkout(**variables):
    """The environment for a child Python that imports this checkout's pyrope (the
    checkout first on PYTHONPATH), with ``variables`` set."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **variables)
