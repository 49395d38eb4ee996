"""Plain Django views, served through Channels' ``URLRouter`` fallback: not streaming."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path


def hello(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"hello": "world"})


urlpatterns = [path("hello", hello)]
