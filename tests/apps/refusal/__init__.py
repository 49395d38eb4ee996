"""The README's one-line setups, each served by uvicorn with invalid settings: none may start."""
