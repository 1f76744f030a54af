"""A setting's value as its type takes it: what a TOML file or the command line gave,
checked against a field's type hint of :class:`~lsgd.train.config.TrainConfig`."""

from __future__ import annotations

import types
import typing
from typing import Any

import tomli_w

from lsgd._validate import is_int, is_number

#: What each scalar type of a field reads as, alone and in a list.
_KINDS: dict[type, tuple[str, str]] = {
    bool: ("true or false", "true or false values"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
}


def conform_to(hint: Any, value: Any) -> Any:
    """``value`` as type ``hint`` takes it, or ``TypeError`` saying what was expected: an
    integer is also a number, a bool is neither; a number stands for its text where a
    string is expected (``eval-every = 200``); a tuple is also a list. Other types than
    those of :data:`_KINDS`, lists and unions of them are taken as given."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        expected = []
        for alternative in (a for a in args if a is not type(None)):
            try:
                return conform_to(alternative, value)
            except TypeError as error:
                expected.append(str(error))
        raise TypeError(" or ".join(expected))
    if origin is list:
        kind = f"a list of {_KINDS.get(args[0], ('', 'values'))[1]}"
        if not isinstance(value, (list, tuple)):
            raise TypeError(kind)
        try:
            return [conform_to(args[0], item) for item in value]
        except TypeError:
            raise TypeError(kind) from None
    if hint is bool and isinstance(value, bool) or hint is int and is_int(value):
        return value
    if hint is float and is_number(value):
        return float(value)
    if hint is str and (isinstance(value, str) or is_number(value)):
        return str(value)
    if hint in _KINDS:
        raise TypeError(_KINDS[hint][0])
    return value


def as_toml(value: Any) -> str:
    """``value`` as TOML writes it (``true``, ``"a lot"``), as Python does if not one line."""
    text = tomli_w.dumps({"x": value})
    one_line = text.startswith("x = ") and text.count("\n") == 1
    return text[len("x = "):].strip() if one_line else repr(value)
