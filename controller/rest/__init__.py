"""REST adapter (FastAPI): status for people and tools."""
