"""Memory: the agent database and everything kept in it (store/), the Markdown memory files
(files/), indexing (index/), search (search/), embeddings (embeddings/) and what happens to
memory over time (lifecycle/). Imports nothing from agent, app or channels; only common."""
