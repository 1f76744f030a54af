"""A run's settings read from a TOML file (``lsgd train --config``, a run's config.toml)."""

from __future__ import annotations

import os
import sys
from typing import Any

from lsgd.train.config import ALIASES, SETTING_NAMES, as_toml, conform, without_removed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings in a TOML file, with keys normalized to field names; ``ValueError``
    naming the file and what to change (unreadable, not TOML, a section, a key unknown or
    removed, a value of the wrong type)."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as error:
        raise ValueError(f"{path}: cannot read it ({error.strerror}); give a TOML file") from None
    except ValueError as error:  # tomllib.TOMLDecodeError, or not UTF-8
        raise ValueError(f"{path} is not valid TOML: {error}") from None
    sections = [key for key, value in raw.items() if isinstance(value, dict)]
    if sections:
        raise ValueError(f"{path}: section(s) {', '.join(f'[{key}]' for key in sections)} found; "
                         "settings go at the top level of the file: remove the [section] line(s)")
    keys = {key: ALIASES.get(key.replace("-", "_"), key.replace("-", "_")) for key in raw}
    try:  # an older run's config.toml holds sync_buffers = true: read as if it did not
        kept = without_removed({name: raw[key] for key, name in keys.items()})
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    keys = {key: name for key, name in keys.items() if name in kept}
    unknown = sorted(key for key, name in keys.items() if name not in SETTING_NAMES)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {', '.join(unknown)}; valid ones: "
                         f"{', '.join(sorted(SETTING_NAMES))}")
    settings: dict[str, Any] = {}
    errors: list[str] = []
    for key, name in keys.items():
        try:
            settings[name] = conform(name, raw[key])
        except TypeError as expected:
            errors.append(f"{key} = {as_toml(raw[key])} in {path}: expected {expected}")
    if errors:
        raise ValueError("\n  ".join(errors))
    return settings
