"""Demo: a Django Channels chat server guarded by llm-guard-sdk (see ``asgi.py``)."""
