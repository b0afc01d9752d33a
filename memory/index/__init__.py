"""Indexing: keeps the memory index (chunks, keywords, vectors) in step with the Markdown files
and the stored transcripts — sync pipeline, generations and rebuild lease, embedding cache,
chunking, the file watcher — and `MemoryIndex`, the facade that also answers searches.

May import memory.store (its rows live in memory/store/index_*.py), memory.search,
memory.files, memory.embeddings, memory.lifecycle.signals and memory's shared modules; no SQL
here.
"""
