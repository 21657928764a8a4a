"""The daemon's long-lived parts, shared by every route through ``app.state.daemon``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request

from ..config import Settings
from ..registry.create import Creator
from ..registry.models import model_details, read_model_summary
from ..registry.pull import Puller
from ..registry.push import Pusher
from ..registry.store import MEDIA_MODEL, Store
from .handler import ChatHandler
from .inference import Inference
from .metrics import Metrics
from .response_store import ResponseStore
from .scheduler import Scheduler


@dataclass
class DaemonState:
    settings: Settings
    store: Store
    scheduler: Scheduler
    puller: Puller
    pusher: Pusher
    creator: Creator
    inference: Inference
    chat: ChatHandler
    metrics: Metrics
    responses: ResponseStore = field(default_factory=ResponseStore)  # /v1/responses kept for previous_response_id

    @classmethod
    def build(cls, settings: Settings) -> "DaemonState":
        store = Store(settings.models_dir)
        store.remove_temporaries()
        scheduler = Scheduler(settings)
        puller = Puller(store, settings)
        metrics = Metrics()
        inference = Inference(store, scheduler, settings, metrics)
        return cls(
            settings=settings, store=store, scheduler=scheduler, puller=puller, pusher=Pusher(store, settings),
            creator=Creator(store, puller), inference=inference, chat=ChatHandler(inference), metrics=metrics,
        )

    def details_of(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Ollama's ``details`` of a manifest's model layer (LinkedFileError rather than another file's)."""
        for layer in manifest.get("layers", []):
            if layer.get("mediaType") == MEDIA_MODEL:
                self.store.check_link(layer["digest"])
                return details_at(self.store.blob_path(layer["digest"]))
        return {"format": "gguf"}


def details_at(path: Path) -> dict[str, Any]:
    """Ollama's ``details`` of a model file, from the registry's cached header read."""
    return model_details(read_model_summary(path))


def state_of(request: Request) -> DaemonState:
    """The daemon's state, from a route's request."""
    return request.app.state.daemon
