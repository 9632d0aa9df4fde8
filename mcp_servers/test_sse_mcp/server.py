"""SSE test MCP server for CashCode (official Python MCP SDK, FastMCP, legacy HTTP+SSE).

Start it by hand before connecting the built-in `test_sse_mcp` entry:

    python mcp_servers/test_sse_mcp/server.py            # http://127.0.0.1:8090/sse
    python mcp_servers/test_sse_mcp/server.py --port 0   # tests: any free port, printed on stdout

Tool: say_hello -> "Hello, Cash".
"""

import argparse
import socket

from mcp.server.fastmcp import FastMCP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()

    port = args.port
    if port == 0:
        # Pick a free port ourselves so we can announce it before uvicorn starts.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((args.host, 0))
            port = s.getsockname()[1]
    print(f"listening on http://{args.host}:{port}/sse", flush=True)

    mcp = FastMCP("test_sse_mcp", host=args.host, port=port)

    @mcp.tool()
    def say_hello() -> str:
        """Say hello to Cash. Use it to check that the MCP connection works."""
        return "Hello, Cash"

    mcp.run(transport="sse")


if __name__ == "__main__":
    main()
