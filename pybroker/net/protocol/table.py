"""The generated message tables (``messages.APIS`` and ``messages.DATA``), loaded without
compiling them each start.

``messages.py`` is 100 KB of generated Python: compiling it cost 20-60 ms of every broker
start where no bytecode is cached (these environments set PYTHONDONTWRITEBYTECODE), a
third of the start-up budget. The table is plain data, so the first load pickles it to
``__pycache__/messages.<key>.pickle`` beside the source, and later loads read that (about
1 ms). ``key`` is the interpreter's cache tag (``cpython-311``) and a hash of
messages.py, schema.py (the classes the pickle names) and the Python version, so
regenerating the table or changing its shapes makes a new key and a stale cache is never
read; a write removes the stale tables of the same interpreter only. Where
``__pycache__`` cannot be written the table is imported the ordinary way: the cache is an
optimisation, never a requirement.

The pickle is as trusted as the package's own ``.pyc`` files: it sits beside them and is
written only by this module.
"""

from __future__ import annotations

import os
import pickle
import sys
import zlib

from pybroker.net.protocol.schema import Api, Data

Tables = tuple[dict[int, Api], dict[str, Data]]

HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = ("messages.py", "schema.py")


def cache_key(directory: str = HERE) -> str:
    """``<cache tag>.<hex digest of the table's sources and the interpreter version>``."""
    crc = zlib.crc32(sys.version.encode())
    size = 0
    for name in _SOURCES:
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        crc = zlib.crc32(data, crc)
        size += len(data)
    return f"{sys.implementation.cache_tag}.{crc:08x}{size:x}"


def load(directory: str = HERE, module: str = "pybroker.net.protocol.messages",
         cache_dir: str | None = None) -> dict[int, Api]:
    """``APIS`` of the table in ``directory`` (see :func:`load_tables`)."""
    return load_tables(directory, module, cache_dir)[0]


def load_tables(directory: str = HERE, module: str = "pybroker.net.protocol.messages",
                cache_dir: str | None = None) -> Tables:
    """``(APIS, DATA)`` of the table in ``directory``: from the cache, else by importing
    ``module`` (then written to the cache when it can be)."""
    cache_dir = cache_dir or os.path.join(directory, "__pycache__")
    try:
        path = os.path.join(cache_dir, f"messages.{cache_key(directory)}.pickle")
    except OSError:
        path = None  # sources not readable as files (a zip import): no cache
    if path is not None:
        try:
            with open(path, "rb") as f:
                tables = pickle.load(f)
            if isinstance(tables, tuple) and len(tables) == 2:
                return tables
        except Exception:  # noqa: BLE001 - missing or damaged, whatever the way: rebuild
            pass
    import importlib

    messages = importlib.import_module(module)
    tables = (messages.APIS, messages.DATA)
    if path is not None:
        _write(path, tables)
    return tables


def _write(path: str, tables: Tables) -> None:
    """Atomically (brokers may start side by side); stale tables of older keys go."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                pickle.dump(tables, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        stale = f"messages.{sys.implementation.cache_tag}."
        for name in os.listdir(directory):
            if name.startswith(stale) and name.endswith(".pickle") and \
                    os.path.join(directory, name) != path:
                os.unlink(os.path.join(directory, name))
    except OSError:
        pass  # a read-only install: import the source next time too


APIS, DATA = load_tables()
