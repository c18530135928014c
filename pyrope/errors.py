"""Exceptions raised by pyrope.

Every error is a ``RopeError``; each also derives from the matching builtin,
so callers may catch either ``pyrope.RopeError`` or ``ValueError``/``TypeError``.
"""
import builtins


class RopeError(Exception):
    """Base class of every exception pyrope raises."""


class ValueError(builtins.ValueError, RopeError):  # noqa: A001 - mirrors the builtin
    """A value or shape is not acceptable (the message names the argument)."""


class TypeError(builtins.TypeError, RopeError):  # noqa: A001
    """A type or dtype is not acceptable (the message names the argument)."""


class OverflowError(builtins.OverflowError, RopeError):  # noqa: A001
    """An integer does not fit the range pyrope computes exactly in."""


class ImportError(builtins.ImportError, RopeError):  # noqa: A001
    """An optional extra is not installed (the message names it)."""


def install_hint(package, extra):
    """How a message says to install optional ``package``: by its own name, or
    as pyrope's ``extra`` from a checkout (pyrope is on no package index yet, so
    the extra cannot be installed by the distribution's name)."""
    return f"pip install {package}, or in a pyrope checkout pip install '.[{extra}]'"
