"""Minimal Django settings for the Channels demo: no database, no templates, no sessions.

``LLM_GUARD_DEMO_SECRET_KEY`` sets the secret key (a fixed demo value otherwise).
"""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("LLM_GUARD_DEMO_SECRET_KEY", "llm-guard-demo-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]
INSTALLED_APPS = ["channels"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "examples.channels_app.urls"
ASGI_APPLICATION = "examples.channels_app.asgi.application"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
