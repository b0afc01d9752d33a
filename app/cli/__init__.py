"""The `pinch` command line: `main.py` (the group, init, doctor) and one module per concern
(memory, lifecycle, gateway and chat, intents, jobs), with what they share in `support.py`.
May import app.config, app.gateway, app.automations, app.wiring, agent, memory and common;
nothing else imports it except app.gateway.repl (`printable`)."""
