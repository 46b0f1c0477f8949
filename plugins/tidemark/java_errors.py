"""What a Py4J error says about the Java exception behind it: its class (to tell an expected
failure, such as a lost race or a missing file, from a real one) and its message (the
Python error's own text only says "An error occurred while calling o70.load")."""

from __future__ import annotations

from typing import Any


def java_exception(exc: BaseException) -> Any | None:
    """The Java exception of a ``Py4JJavaError``; None for any other error."""
    return getattr(exc, "java_exception", None)


def java_class(exc: BaseException) -> str:
    """The Java exception's class name, or "" for a Python error."""
    java = java_exception(exc)
    return str(java.getClass().getName()) if java is not None else ""


def java_message(exc: BaseException) -> str:
    """The Java exception's message, or the Python error's text."""
    java = java_exception(exc)
    return str(java.getMessage()) if java is not None else str(exc)


def java_text(exc: BaseException) -> str:
    """``Class: message`` of the Java exception, or the Python error's text."""
    java = java_exception(exc)
    return str(java.toString()) if java is not None else str(exc)
