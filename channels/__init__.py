"""Platform adapters: Telegram, Slack and the terminal, behind the `Channel` interface of
channels/base.py, with the one message-splitting rule (split.py). May import `common` only; the
gateway (app/) builds the adapters and passes in what they need (an `InboxWriter` for files)."""
