"""The gateway: channels in, the agent's replies out — access, routing, the durable queue,
per-session turns, streamed delivery, leases, heartbeat (server.py is the `Gateway`, run.py the
`pinch gateway` process, repl.py `pinch chat`). May import agent, channels, memory, common and
the rest of app; only the entry points (run.py, repl.py) import the composition root,
app/wiring.py, which builds the gateway.
"""
