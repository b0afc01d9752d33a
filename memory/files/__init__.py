"""The Markdown memory files on disk: which files are memory (discovery), confined reads
(workspace), atomic writes (atomic) and every write Pinch makes to them (writes, markdown_edits).
May import memory.errors, memory.store.lineage (origin markers), memory.project_tags (project
markers) and common."""
