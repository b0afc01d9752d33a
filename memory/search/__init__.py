"""Search: hybrid keyword + vector retrieval over the index, ranking and snippets (hybrid,
candidates, ranking, snippets, presets, filters), and the vector stores' in-process
matrix search (vectors, sqlite_vec, matrix_cache, centroid_matrix, matrix_pack) or the
database's own KNN index (knn_store: PostgreSQL + pgvector).

Holds no SQL: what it reads comes through the repositories in memory/store/ (search_queries,
vector_tables, vector_pack, vector_knn). May import memory.store, memory.text, memory.errors
and common; never memory.index or anything above memory.
"""
