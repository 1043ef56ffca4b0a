"""An engine's extra config for kvtier (vLLM's ``kv_connector_extra_config``, SGLang's
``--hicache-storage-backend-extra-config``), each value checked once, when the engine starts: a
value of the wrong kind or out of range fails the start with an error that names the key, where
it would otherwise fail every request (a hold longer than kvtierd allows makes every lookup an
error) or mean something else than it says (``"layerwise": "off"`` read as on; a timeout of 0,
which the client takes as "wait for ever")."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import kvtier
from kvtier._kvtier import MAX_LOOKUP_HOLD_S

# kvtierd's longest hold (KVT.LOOKUP ... HOLD, docs/protocol.md), as the C++ client knows it.
MAX_HOLD_S = MAX_LOOKUP_HOLD_S

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ExtraConfig:
    """Typed reads of one engine's extra config; ``get(key, default)`` reads a raw value, and
    ``where`` names the setting in errors (``--kv-transfer-config kv_connector_extra_config``)."""

    def __init__(self, get: Callable[[str, Any], Any], where: str):
        self._get = get
        self._where = where

    def _fail(self, key: str, value: Any, expected: str) -> kvtier.InvalidArgumentError:
        return kvtier.InvalidArgumentError(f"{self._where}: {key}={value!r}: expected {expected}")

    def text(self, key: str, default: Optional[str],
             choices: Sequence[str] = ()) -> Optional[str]:
        """A string (None only as the default), one of choices when they are given."""
        value = self._get(key, default)
        if value is None and default is None:
            return None
        if not isinstance(value, str):
            raise self._fail(key, value, "a string")
        if choices and value not in choices:
            raise self._fail(key, value, ", ".join(choices[:-1]) + " or " + choices[-1])
        return value

    def seconds(self, key: str, default: float, above_zero: bool = False,
                maximum: float = math.inf) -> float:
        """A number of seconds: at least 0 (above 0 with above_zero), at most maximum."""
        value = self._get(key, default)
        bound = ("above 0" if above_zero else "at least 0") + (
            f" and at most {maximum:g}" if maximum != math.inf else "")
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise self._fail(key, value, f"a number of seconds, {bound}") from None
        if isinstance(value, bool) or math.isnan(seconds) or seconds < 0 or seconds > maximum or (
                above_zero and seconds == 0):
            raise self._fail(key, value, f"a number of seconds, {bound}")
        return seconds

    def flag(self, key: str, default: bool) -> bool:
        """A boolean: true or false (JSON), or one of 1/0, true/false, yes/no, on/off."""
        value = self._get(key, default)
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower() if isinstance(value, (str, int)) else None
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise self._fail(key, value, "true or false")
