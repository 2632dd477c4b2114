from typing import Any

from typing_extensions import Buffer

def fetched_end(buf: Buffer) -> int: ...

class RecordColumns:
    def __len__(self) -> int: ...
    def add_batches(
        self,
        buf: Buffer,
        min_offset: int = ...,
        max_offset: int | None = ...,
        aborted: list[tuple[int, int]] | None = ...,
    ) -> int: ...
    def to_arrow(self) -> dict[str, Any]: ...
