"""Key stores: one key per intent until it is forgotten, in memory or on disk across restarts.

The SQLite store is checked as a crash would test it: a second store on
the same file (a restarted process) finds the key the first one handed
out, and threads and processes asking at once all get one key.
"""

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from order_service_client import KeyStore, MemoryKeyStore, SQLiteKeyStore

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> KeyStore:
    if request.param == "memory":
        return MemoryKeyStore()
    return SQLiteKeyStore(tmp_path / "keys.sqlite3")


def test_both_stores_are_key_stores(store: KeyStore) -> None:
    assert isinstance(store, KeyStore)


def test_an_intent_keeps_its_key(store: KeyStore) -> None:
    first = store.key_for("pay:invoice-7")

    again = store.key_for("pay:invoice-7")

    assert again == first
    assert uuid.UUID(first).version == 4


def test_each_intent_has_a_key_of_its_own(store: KeyStore) -> None:
    assert store.key_for("pay:invoice-7") != store.key_for("pay:invoice-8")


def test_a_forgotten_intent_gets_a_new_key(store: KeyStore) -> None:
    first = store.key_for("pay:invoice-7")
    other = store.key_for("pay:invoice-8")

    store.forget("pay:invoice-7")

    assert store.key_for("pay:invoice-7") != first
    assert store.key_for("pay:invoice-8") == other


def test_forgetting_an_unknown_intent_is_harmless(store: KeyStore) -> None:
    store.forget("never-seen")
    store.forget("never-seen")


def test_threads_asking_at_once_get_one_key(store: KeyStore) -> None:
    keys: list[str] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        keys.append(store.key_for("order:cart-81"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(keys) == 8
    assert len(set(keys)) == 1


def test_a_restarted_process_finds_the_key_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    before_the_crash = SQLiteKeyStore(path).key_for("pay:invoice-7")

    after_the_restart = SQLiteKeyStore(path)

    assert after_the_restart.key_for("pay:invoice-7") == before_the_crash


def test_forgetting_is_on_disk_too(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    first = SQLiteKeyStore(path)
    key = first.key_for("pay:invoice-7")

    first.forget("pay:invoice-7")

    assert SQLiteKeyStore(path).key_for("pay:invoice-7") != key


def test_processes_asking_at_once_get_one_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    SQLiteKeyStore(path)
    script = (
        "import sys; from order_service_client import SQLiteKeyStore; "
        "print(SQLiteKeyStore(sys.argv[1]).key_for('order:cart-81'))"
    )

    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(CLIENT_DIR)},
        )
        for _ in range(6)
    ]
    keys = {process.communicate(timeout=60)[0].strip() for process in processes}

    assert all(process.returncode == 0 for process in processes)
    assert len(keys) == 1
    assert keys == {SQLiteKeyStore(path).key_for("order:cart-81")}


@pytest.mark.parametrize("path", [":memory:", ""])
def test_sqlite_in_memory_is_refused(path: str) -> None:
    # Each call opens its own connection: an in-memory database would be
    # a new, empty one every time.
    with pytest.raises(ValueError, match="MemoryKeyStore"):
        SQLiteKeyStore(path)
