"""What happens to memory over time: dreaming (dream_stages, dream_memory, dream_runs), recall
signals, forgetting a session (forget, forget_dreams), standing intents and active-memory triggers.
May import memory.store, memory.files, memory.index, memory.search, memory.text and common; holds
no SQL (its tables are reached through the repositories in memory/store/)."""
