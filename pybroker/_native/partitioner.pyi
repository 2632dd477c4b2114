from typing_extensions import Buffer

def murmur2(key: Buffer) -> int: ...
def partition_for_key(key: Buffer, num_partitions: int) -> int: ...
def partition_rows(
    offsets: Buffer,
    data: Buffer,
    validity: Buffer | None,
    n_rows: int,
    num_partitions: int,
    null_key_partition: int = ...,
) -> tuple[bytearray, list[int]]: ...
