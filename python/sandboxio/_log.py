"""The library's loggers: a ``NullHandler`` and a redacting filter, no other handler.
sandboxio never prints. ``SBX_DEBUG=1`` or ``debug=True`` raises the level to DEBUG;
nothing else changes verbosity."""

from __future__ import annotations

import logging
import os

from sandboxio._redaction import RedactingFilter

logger = logging.getLogger("sandboxio")
logger.addHandler(logging.NullHandler())
_filter = RedactingFilter()
for _name in ("sandboxio", "sandboxio.audit", "sandboxio.budget", "sandboxio.safety"):
    logging.getLogger(_name).addFilter(_filter)


def debug_enabled(flag: bool | None = None) -> bool:
    if flag:
        return True
    return os.environ.get("SBX_DEBUG", "").strip() not in ("", "0", "false", "no")


def set_debug(flag: bool | None) -> None:
    if debug_enabled(flag):
        logger.setLevel(logging.DEBUG)
