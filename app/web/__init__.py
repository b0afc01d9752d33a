"""The web control page (`[web]`): the owner's page served by `pinch gateway` — chat, memory,
dreams, sessions, access, automations and health — server-rendered with Jinja2, no JS build
and nothing from a CDN.

Holds: the aiohttp application and its security (login, sessions, CSRF, Host and Origin checks,
Content-Security-Policy), the page handlers (`pages/`), templates and static files.
May import: app (config, wiring's products), agent, channels, memory, common. Nothing in app
imports app.web except the composition root and the gateway that serves it.
"""
