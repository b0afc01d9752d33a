"""The Telegram adapter: adapter (send, edit, lifecycle), inbound (messages → InboundMessage),
dispatch (updates, albums), polling and webhook (receiving), token_lock, format (Markdown →
Telegram HTML). May import `channels.base`, `channels.split` and `common`."""
