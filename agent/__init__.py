"""The agent: one turn of conversation (runtime.py), its context, tools, compaction, slash
commands, privacy policy, model clients (model/) and what comes with a message (media/: voice,
pictures, documents). May import memory and common, never app or channels.
"""
