"""Embedding providers behind one `EmbeddingProvider` protocol (base): local e5 and USE models
(local_models; their batches shared among worker threads by batching), remote APIs through
litellm (litellm_provider), chosen by `create_provider` (providers). May import
memory.memory_config and common."""
