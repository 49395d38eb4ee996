"""``guard_application(ProtocolTypeRouter(...))``: the Channels wrapper."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.channels_app.settings")
django.setup()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from llm_guard_sdk.adapters.channels import guard_application  # noqa: E402

application = guard_application(ProtocolTypeRouter({"http": URLRouter([])}))
