"""Model clients behind one `ModelClient` protocol (base.py): the anthropic SDK, litellm for
every other provider, fallbacks (factory.py) and their errors worded as advice (errors.py). May
import agent.types, memory and common.
"""
