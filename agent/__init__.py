"""The agent: one turn of conversation (runtime.py), its context, tools, compaction, slash
commands, privacy policy and model clients (model/). May import memory and common, never app
or channels.
"""
