"""The tasks a coordinator runs beside its requests (partition loads, replication waits,
transaction markers, its timer loop), kept so that stopping it cancels them all and
waits for them, and none is garbage-collected while it runs.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[object, object, None], name: str | None = None
              ) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self) -> None:
        """Cancel every task still running and wait until each has ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
