"""Which helper the local backend starts when none is named: on PATH, the first one built
from the same sources as the package (the build id in its ELF section), else the first
one found."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sandboxio import _native
from sandboxio.backends.local import find_helper
from sandboxio.errors import InvalidArgument


def this_builds_helper() -> str:
    helper = os.environ.get("SBX_HELPER")
    if not helper or not os.path.exists(helper):
        pytest.skip("SBX_HELPER does not name this build's helper (the suite sets it)")
    return helper


def test_the_suites_helper_is_of_this_build_and_other_files_are_not(tmp_path: Path) -> None:
    assert _native.same_build(this_builds_helper())
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\nexit 0\n")
    assert not _native.same_build(script)
    assert not _native.same_build(shutil.which("sh") or "/bin/sh")
    assert not _native.same_build(tmp_path / "missing")


def test_path_prefers_a_helper_of_this_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = this_builds_helper()
    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    stale.mkdir()
    fresh.mkdir()
    # A `sandboxio-helper` of another build first on PATH, this build's `sandboxio` after.
    other = stale / "sandboxio-helper"
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    mine = fresh / "sandboxio"
    shutil.copy(helper, mine)
    monkeypatch.delenv("SBX_HELPER")
    monkeypatch.setenv("PATH", f"{stale}:{fresh}")
    assert find_helper() == str(mine)
    # Without one of this build, the first found (as before).
    mine.unlink()
    assert find_helper() == str(other)
    # None at all: a clear error.
    other.unlink()
    with pytest.raises(InvalidArgument):
        find_helper()
    # Named explicitly: taken as given.
    assert find_helper("/x/y") == "/x/y"
