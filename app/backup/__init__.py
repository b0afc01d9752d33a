"""Backups: one verified archive of a home (workspace, config, database snapshots, manifest),
restore into an empty home, and the gateway's scheduled backups. May import memory, channels,
common, app.config, app.channel_registry and app.automations.durations; not app.wiring."""
