"""Media in: voice notes and audio become text before the turn, photos become image blocks,
PDFs, DOCX and text files become untrusted text. May import `agent.types`, `memory`, `common`.
"""
