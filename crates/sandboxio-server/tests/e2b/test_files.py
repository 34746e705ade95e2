"""`files.make_dir`, `files.rename`, `files.exists` and `files.get_info` through the
E2B SDK: each is decided by the chain and recorded, confined to the workspace, and a
refusal (a path outside the home, a policy denial) changes nothing it should not."""

import pytest
from e2b import Sandbox
from e2b.exceptions import InvalidArgumentException, SandboxException


def _file_events(server, sbx):
    return [e for e in server.events() if e.get("session_id") == sbx.sandbox_id
            and str(e.get("event", "")).startswith("file_")]


def test_make_dir_creates_once_and_is_one_file_write(server):
    sbx = Sandbox.create()
    try:
        before = len(_file_events(server, sbx))
        assert sbx.files.make_dir("/home/user/out/deep") is True
        mkdirs = _file_events(server, sbx)[before:]
        assert [(e["event"], e["path"], e["decision"]) for e in mkdirs] == [
            ("file_write", "out/deep/", "allow")], mkdirs
        # A second make_dir finds it there: the SDK's False, not an error.
        assert sbx.files.make_dir("out/deep") is False
        assert sbx.files.exists("/home/user/out/deep") is True
        info = sbx.files.get_info("/home/user/out/deep")
        assert info.type.value == "dir" and info.path == "/home/user/out/deep"
        assert sbx.files.exists("/home/user/out/missing") is False
        # A program sees the directory in the workspace.
        assert sbx.commands.run("test -d $SANDBOX_INPUT/out/deep && echo yes").stdout == "yes\n"
        for bad in ("/etc/evil", "/home/user/../evil", "../evil"):
            with pytest.raises(InvalidArgumentException) as e:
                sbx.files.make_dir(bad)
            assert "SBX_E2505" in str(e.value), bad
    finally:
        sbx.kill()


def test_rename_moves_a_file_through_the_chain(server):
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/a.txt", b"payload\x00\xff")
        before = len(_file_events(server, sbx))
        info = sbx.files.rename("/home/user/a.txt", "/home/user/sub/b.txt")
        assert info.path == "/home/user/sub/b.txt" and info.name == "b.txt"
        assert info.type.value == "file" and info.size == 9
        assert sbx.files.exists("/home/user/a.txt") is False
        assert sbx.files.read("/home/user/sub/b.txt", format="bytes") == bytearray(b"payload\x00\xff")
        # The rename was the chain's read, write and delete, each decided and recorded.
        ops = _file_events(server, sbx)[before:before + 3]
        assert [(e["event"], e["path"]) for e in ops] == [
            ("file_read", "a.txt"), ("file_write", "sub/b.txt"), ("file_delete", "a.txt")], ops
        assert all(e["decision"] == "allow" for e in ops)
        # Renaming onto itself changes nothing.
        assert sbx.files.rename("sub/b.txt", "/home/user/sub/b.txt").size == 9
        assert sbx.files.read("sub/b.txt", format="bytes") == bytearray(b"payload\x00\xff")
    finally:
        sbx.kill()


def test_rename_is_confined_and_refusals_keep_the_source(server):
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/secret.txt", "s3cret")
        for src, dst in (("secret.txt", "/tmp/x"), ("secret.txt", "../x"),
                         ("/etc/passwd", "mine.txt")):
            with pytest.raises(InvalidArgumentException) as e:
                sbx.files.rename(src, dst)
            assert "SBX_E2505" in str(e.value), (src, dst)
        assert sbx.files.read("secret.txt") == "s3cret"
        assert sbx.files.exists("mine.txt") is False
        # Policy denies deleting under kept/: the rename stops at the delete, which is
        # recorded as denied; the source is still there.
        sbx.files.write("/home/user/kept/k.txt", "keep me")
        with pytest.raises(SandboxException) as e:
            sbx.files.rename("/home/user/kept/k.txt", "/home/user/k.txt")
        assert "SBX_E1550" in str(e.value) and "never deleted" in str(e.value), str(e.value)
        assert sbx.files.read("/home/user/kept/k.txt") == "keep me"
        denied = [x for x in _file_events(server, sbx) if x.get("decision") == "deny"]
        assert [(x["event"], x["path"]) for x in denied] == [("file_delete", "kept/k.txt")]
        # A directory is not renamed (it would be one operation per file): a clear refusal.
        sbx.files.make_dir("/home/user/d")
        with pytest.raises(SandboxException) as e:
            sbx.files.rename("/home/user/d", "/home/user/d2")
        assert "SBX_E2503" in str(e.value)
        assert sbx.files.exists("/home/user/d") is True
    finally:
        sbx.kill()
