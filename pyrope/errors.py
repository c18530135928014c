"""Exceptions raised by pyrope.

Every error is a ``RopeError``; each also derives from the matching builtin,
so callers may catch either ``pyrope.RopeError`` or ``ValueError``/``TypeError``.
"""
import builtins
import reprlib


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


class _Shown(reprlib.Repr):
    """reprlib with the limits of an error message, and integers too long to print
    (Python refuses to convert ints of more than 4300 digits) described by their size."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 4
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = self.maxset = self.maxfrozenset = 12
        self.maxdeque = 12
        self.maxstring = self.maxother = self.maxlong = 120

    def repr_int(self, x, level):
        if x.bit_length() > 256:
            sign = "a negative" if x < 0 else "an"
            return f"{sign} integer of about {int(x.bit_length() * 0.30103) + 1} digits"
        return super().repr_int(x, level)


def raised(exc):
    """What another library's exception ``exc`` said, for a message that names
    the argument it came from: ``"RuntimeError: ..."``, bounded in length."""
    text = str(exc)
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(exc).__name__}: {text}"


def shown(value):
    """``repr(value)`` as an error message shows it: bounded in length and depth (a
    huge, deep or self-containing config value is abbreviated, never recursed into or
    printed whole), an integer too long to print described by its size."""
    return _SHOWN.repr(value)


_SHOWN = _Shown()
