"""The Slack adapter: adapter (events in, posts out, lifecycle), receive (Socket Mode and Events
API), web (Web API clients, scopes, advice), files (downloads), threads (joined threads),
format (Markdown ↔ mrkdwn). May import `channels.base`, `channels.split` and `common`."""
