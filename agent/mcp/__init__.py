"""MCP servers as tools: their settings (`mcp_config`), one supervised connection per server over
the official `mcp` SDK (`connection`; its server's stderr in a file of bounded size:
`stderr_log`), and the tools and prompt listing they give a turn
(`mcp_tools`). May import agent's tool registry and policy, memory and common; never app.
"""
