"""Built-in stdio test MCP server for CashCode (official Python MCP SDK, FastMCP).

Started by CashCode itself from mcp_servers/mcp_config.json; speaks newline-delimited
JSON-RPC on stdin/stdout. Tool: say_hello -> "Hello, Cash".
"""

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("test_stdio_mcp")


@mcp.tool()
def say_hello() -> str:
    """Say hello to Cash. Use it to check that the MCP connection works."""
    return "Hello, Cash"


if __name__ == "__main__":
    mcp.run()
