"""The daemon's workers: which are free to take a model's layers, and what they offer now.

ggml's RPC server serves one client at a time, so a worker that holds a
loaded model's layers is neither probed nor offered again until that model
unloads. The others are probed at each load that wants workers, so one that
went away (or never answered) is planned without, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from ..workers.probe import WorkerDevice, WorkerUnreachable, probe

log = logging.getLogger("localllm.workers")


class WorkerPool:
    """The configured workers (``LOCALLLM_WORKERS``, ``serve --worker``) and who holds each."""

    def __init__(self, addresses: tuple[str, ...]) -> None:
        self.addresses = addresses
        self._holders: dict[str, str] = {}  # host:port -> the model whose layers it holds (or is planned for)

    async def claim(self, model: str) -> list[WorkerDevice]:
        """Probe the free workers, reserving for ``model`` those that answer; their devices, in order."""
        for address in self.addresses:
            if address in self._holders:
                log.info("worker %s holds the layers of %s; planning %s without it", address,
                         self._holders[address], model)
        free = [address for address in self.addresses if address not in self._holders]
        for address in free:
            self._holders[address] = model
        try:
            answers = await asyncio.gather(*(probe(address) for address in free), return_exceptions=True)
        except BaseException:  # the load was cancelled (its client left): nothing is held for it
            self.release(free)
            raise
        devices: list[WorkerDevice] = []
        for address, answer in zip(free, answers):
            if isinstance(answer, BaseException):
                del self._holders[address]
                reason = str(answer) if isinstance(answer, WorkerUnreachable) else f"worker {address}: {answer!r}"
                log.warning("%s; planning %s without it", reason, model)
            else:
                devices += answer
        return devices

    def release(self, addresses: Iterable[str]) -> None:
        """Workers a model no longer holds (unloaded, failed to load, or planned without them)."""
        for address in addresses:
            self._holders.pop(address, None)
