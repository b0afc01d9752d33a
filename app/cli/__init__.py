"""The `pinch` command line: main.py (the entry point: the group, `pinch init`, `pinch doctor`)
and one module per concern (memory_commands, lifecycle_commands, gateway_commands,
intents_commands, jobs), with what they share in support.py; doctor.py, checks.py and
channel_checks.py are `pinch doctor`'s checks, setup.py `pinch init`. May import everything
below app; builds what it runs through app.wiring."""
