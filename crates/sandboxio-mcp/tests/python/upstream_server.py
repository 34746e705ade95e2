"""A small MCP server on the official SDK's MCPServer (FastMCP in SDK 1.x), run by the
proxy tests as an upstream of `sandboxio mcp`, inside sandboxio's sandbox. It does what
it is asked without judging: read a file, open a TCP connection, so the host can see what
the sandbox lets it do. It also offers resources (one a template, one holding a
credential-shaped value), a prompt, and a tool that adds a resource and a prompt and
announces both lists changed. Its data directory is `$UPSTREAM_DATA` (default /data)."""

import os
import socket

from mcp.server.mcpserver import Context, MCPServer

DATA = os.environ.get("UPSTREAM_DATA", "/data")
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"

server = MCPServer("sandboxed-upstream")


@server.tool()
def read(path: str) -> str:
    """Read a text file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"cannot read: {e}"


@server.tool()
def connect(host: str, port: int) -> str:
    """Open a TCP connection and say whether it worked."""
    try:
        with socket.create_connection((host, port), timeout=5):
            return "connected"
    except OSError as e:
        return f"cannot connect: {e}"


@server.tool()
def whoami() -> str:
    """The server's uid and pid as it sees them."""
    return f"uid={os.getuid()} pid={os.getpid()}"


@server.resource("notes://readme", name="readme", mime_type="text/plain")
def readme() -> str:
    with open(os.path.join(DATA, "readme.txt"), encoding="utf-8") as f:
        return f.read()


@server.resource("notes://token", name="token", mime_type="text/plain")
def token() -> str:
    return f"the deploy token is {TOKEN}"


@server.resource("notes://private", name="private", mime_type="text/plain")
def private() -> str:
    return "private notes"


@server.resource("notes://{name}", name="note", mime_type="text/plain")
def note(name: str) -> str:
    return f"note {name}"


@server.prompt()
def greet(name: str) -> str:
    """Greet someone."""
    return f"Say hello to {name}."


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a resource and a prompt, and tell the client both lists changed."""

    @server.resource("notes://later", name="later", mime_type="text/plain")
    def later() -> str:
        return "added later"

    @server.prompt(name="later")
    def later_prompt() -> str:
        return "a prompt added later"

    await ctx.session.send_resource_list_changed()
    await ctx.session.send_prompt_list_changed()
    return "grown"


if __name__ == "__main__":
    server.run()
