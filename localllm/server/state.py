"""The daemon's long-lived parts, shared by every route through ``app.state.daemon``."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Settings
from ..registry.create import Creator
from ..registry.gguf import read_gguf
from ..registry.models import model_details
from ..registry.pull import Puller
from ..registry.store import Store
from .inference import Inference
from .metrics import Metrics
from .scheduler import Scheduler


@dataclass
class DaemonState:
    settings: Settings
    store: Store
    scheduler: Scheduler
    puller: Puller
    creator: Creator
    inference: Inference
    metrics: Metrics

    @classmethod
    def build(cls, settings: Settings) -> "DaemonState":
        store = Store(settings.models_dir)
        store.remove_temporaries()
        scheduler = Scheduler(settings)
        puller = Puller(store, settings)
        metrics = Metrics()
        return cls(
            settings=settings, store=store, scheduler=scheduler, puller=puller, creator=Creator(store, puller),
            inference=Inference(store, scheduler, settings, metrics), metrics=metrics,
        )

    def details_of(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Ollama's ``details`` of a manifest's model layer."""
        for layer in manifest.get("layers", []):
            if layer.get("mediaType") == "application/vnd.ollama.image.model":
                return self.details_at(self.store.blob_path(layer["digest"]))
        return {"format": "gguf"}

    def details_at(self, path: Path) -> dict[str, Any]:
        return _details_cached(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _details_cached(path: str, mtime_ns: int) -> dict[str, Any]:
    return model_details(read_gguf(Path(path)))
