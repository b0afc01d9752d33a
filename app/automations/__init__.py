"""Automations: reminders, scheduled tasks and the heartbeat (jobs, schedules, the scheduler, the
schedule tool) and the nightly dream. May import agent, channels, memory and common; not app.config
or app.wiring (the composition root imports this package, never the reverse)."""
