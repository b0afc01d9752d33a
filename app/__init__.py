"""The application: configuration (config.py), the owner and channel registry
(channel_registry.py), the composition root (wiring.py builds everything; process.py is what
one running process shares), and its rooms: gateway/, automations/, cli/. May import every
other package; nothing imports app."""
