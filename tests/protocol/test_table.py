"""The message table's start-up cache (``pybroker.net.protocol.table``): it returns what
``messages.py`` holds, rebuilds when the sources change, and is never required."""

from __future__ import annotations

import os
import shutil

import pytest

from pybroker.net.protocol import messages, table


@pytest.fixture()
def sources(tmp_path):
    """A copy of the table's sources whose cache lives in tmp_path/cache."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("messages.py", "schema.py"):
        shutil.copy(os.path.join(table.HERE, name), src / name)
    return src, tmp_path / "cache"


def test_the_loaded_table_is_the_generated_one():
    assert table.APIS == messages.APIS


def test_first_load_writes_the_cache_and_later_loads_need_no_source(sources):
    src, cache = sources
    apis = table.load(str(src), cache_dir=str(cache))
    assert apis == messages.APIS
    assert [p.name for p in cache.iterdir()] == [f"messages.{table.cache_key(str(src))}.pickle"]
    # from the cache: the module named is never imported
    assert table.load(str(src), module="no.such.module", cache_dir=str(cache)) == apis


def test_a_changed_source_is_a_cache_miss_and_replaces_the_old_cache(sources):
    src, cache = sources
    table.load(str(src), cache_dir=str(cache))
    old = table.cache_key(str(src))
    with open(src / "messages.py", "a") as f:
        f.write("\n# regenerated\n")
    assert table.cache_key(str(src)) != old
    with pytest.raises(ImportError):  # a stale cache would have been returned instead
        table.load(str(src), module="no.such.module", cache_dir=str(cache))
    table.load(str(src), cache_dir=str(cache))
    assert [p.name for p in cache.iterdir()] == [f"messages.{table.cache_key(str(src))}.pickle"]


def test_unwritable_or_corrupt_cache_falls_back_to_the_source(sources):
    src, cache = sources
    cache.write_text("a file where the cache directory should be")
    assert table.load(str(src), cache_dir=str(cache)) == messages.APIS
    cache.unlink()
    cache.mkdir()
    (cache / f"messages.{table.cache_key(str(src))}.pickle").write_bytes(b"not a pickle")
    assert table.load(str(src), cache_dir=str(cache)) == messages.APIS
