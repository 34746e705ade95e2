"""What a backend can do. Calls that need a capability a backend lacks raise
``CapabilityNotSupported`` instead of guessing."""

from __future__ import annotations

import enum


class Capability(enum.Flag):
    EXEC = 1
    RUN_CODE = 1 << 1
    FILESYSTEM = 1 << 2
    NETWORK = 1 << 3
    STREAM = 1 << 4
    COST_REPORTING = 1 << 5
    RESOURCE_LIMITS = 1 << 6

    def names(self) -> str:
        """``RUN_CODE|FILESYSTEM``: the set flags, in declaration order."""
        return "|".join(m.name or "" for m in Capability if m in self and m.name)
