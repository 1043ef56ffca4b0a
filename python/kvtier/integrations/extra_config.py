"""An engine's extra config for kvtier (vLLM's ``kv_connector_extra_config``, SGLang's
``--hicache-storage-backend-extra-config``), each value checked once, when the engine starts: a
value of the wrong kind or out of range fails the start with an error that names the key, where
it would otherwise fail every request (a hold longer than kvtierd allows makes every lookup an
error) or mean something else than it says (``"layerwise": "off"`` read as on; a timeout of 0,
which the client takes as "wait for ever")."""
from __future__ import annotations

import difflib
import logging
import math
from typing import Any, Callable, Iterable, Optional, Sequence

import kvtier
from kvtier._kvtier import MAX_LOOKUP_HOLD_S

# kvtierd's longest hold (KVT.LOOKUP ... HOLD, docs/protocol.md), as the C++ client knows it.
MAX_HOLD_S = MAX_LOOKUP_HOLD_S
# The longest time the client takes (a timeout, a hold): python/src/client_binding.cc's bound.
MAX_SECONDS = 1e9

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ExtraConfig:
    """Typed reads of one engine's extra config; ``get(key, default)`` reads a raw value, and
    ``where`` names the setting in errors (``--kv-transfer-config kv_connector_extra_config``)."""

    def __init__(self, get: Callable[[str, Any], Any], where: str):
        self._get = get
        self._where = where
        self._read: set[str] = set()

    def _fail(self, key: str, value: Any, expected: str) -> kvtier.InvalidArgumentError:
        return kvtier.InvalidArgumentError(f"{self._where}: {key}={value!r}: expected {expected}")

    def _value(self, key: str, default: Any) -> Any:
        self._read.add(key)
        return self._get(key, default)

    def text(self, key: str, default: Optional[str],
             choices: Sequence[str] = ()) -> Optional[str]:
        """A string (None only as the default), one of choices when they are given."""
        value = self._value(key, default)
        if value is None and default is None:
            return None
        if not isinstance(value, str):
            raise self._fail(key, value, "a string")
        if choices and value not in choices:
            raise self._fail(key, value, ", ".join(choices[:-1]) + " or " + choices[-1])
        return value

    def seconds(self, key: str, default: float, above_zero: bool = False,
                maximum: float = MAX_SECONDS) -> float:
        """A number of seconds: at least 0 (above 0 with above_zero), at most maximum (finite:
        an infinite retry pause never retries, and the client refuses a timeout past
        MAX_SECONDS at every connect, which would read as kvtierd being down)."""
        value = self._value(key, default)
        bound = ("above 0" if above_zero else "at least 0") + f" and at most {maximum:g}"
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
        value = self._value(key, default)
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower() if isinstance(value, (str, int)) else None
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise self._fail(key, value, "true or false")

    def transfer_path(self) -> str:
        """``path``: auto, shm or inline. shm maps kvtierd's arena, so it needs kvtierd on this
        node (a unix:// URL); with a tcp:// ``url`` every transfer would fail."""
        path = self.text("path", "auto", ("auto", "shm", "inline"))
        url = self._value("url", None)
        if path == "shm" and url is not None and url.startswith("tcp://"):
            raise self._fail("path", path, "auto or inline with a tcp:// url (shm needs kvtierd "
                             "on this node, at a unix:// url)")
        return path

    def warn_unknown(self, present: Iterable[str], logger: logging.Logger,
                     engine_keys: Iterable[str] = ()) -> None:
        """Logs a warning naming each key of ``present`` that neither kvtier read nor the engine
        uses itself (``engine_keys``), with the closest known key: a misspelled ``tenant_salt``
        would otherwise leave the cache shared with every unsalted engine, silently. A warning,
        not an error: engines may add keys of their own to this config."""
        known = self._read | set(engine_keys)
        for key in sorted(k for k in present if k not in known):
            close = difflib.get_close_matches(key, sorted(known), n=1)
            logger.warning("kvtier: %s: unknown key %r ignored%s", self._where, key,
                           f" (did you mean {close[0]!r}?)" if close else "")
