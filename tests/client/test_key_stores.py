"""Key stores: one key per intent for the service's retention, in memory or on disk across restarts.

The SQLite store is checked as a crash would test it: a second store on
the same file (a restarted process) finds the key the first one handed
out, and threads and processes asking at once all get one key. Retention
runs on a clock of the test's own.
"""

import os
import re
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from order_service_client import (
    DEFAULT_RETENTION,
    KeyStore,
    LeasingKeyStore,
    MemoryKeyStore,
    SQLiteKeyStore,
)

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / "client"
HOUR = 3600.0

Store = MemoryKeyStore | SQLiteKeyStore


@dataclass
class Clock:
    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Store]:
    """A factory of stores of one kind; SQLite ones share one file, as restarts do."""

    def make(
        *, retention: float = DEFAULT_RETENTION, clock: Callable[[], float] | None = None
    ) -> Store:
        clock = clock or Clock()
        if request.param == "memory":
            return MemoryKeyStore(retention=retention, clock=clock)
        return SQLiteKeyStore(tmp_path / "keys.sqlite3", retention=retention, clock=clock)

    return make


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


def test_both_stores_are_key_stores(store: Store) -> None:
    assert isinstance(store, KeyStore)


def test_an_intent_keeps_its_key(store: Store) -> None:
    first = store.key_for("pay:invoice-7")

    again = store.key_for("pay:invoice-7")

    assert again == first
    assert uuid.UUID(first).version == 4


def test_each_intent_has_a_key_of_its_own(store: Store) -> None:
    assert store.key_for("pay:invoice-7") != store.key_for("pay:invoice-8")


def test_a_forgotten_intent_gets_a_new_key(store: Store) -> None:
    first = store.key_for("pay:invoice-7")
    other = store.key_for("pay:invoice-8")

    store.forget("pay:invoice-7")

    assert store.key_for("pay:invoice-7") != first
    assert store.key_for("pay:invoice-8") == other


def test_forgetting_an_unknown_intent_is_harmless(store: Store) -> None:
    store.forget("never-seen")
    store.forget("never-seen")


def test_threads_asking_at_once_get_one_key(store: Store) -> None:
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


# Retention: as long as the service keeps the key, whatever the answer.


def test_the_default_retention_is_the_services_default_key_ttl() -> None:
    # A shorter one would hand out a new key while the service still
    # replays the old one: a rerun would act twice.
    settings = (ROOT / "config" / "settings.py").read_text()
    (ttl,) = re.findall(r'"IDEMPOTENCY_KEY_TTL", default=(\d+)', settings)

    assert DEFAULT_RETENTION == float(ttl) == 24 * HOUR
    assert MemoryKeyStore().retention == DEFAULT_RETENTION


def test_an_intent_keeps_its_key_for_the_retention(make_store: Callable[..., Store]) -> None:
    clock = Clock()
    store = make_store(clock=clock)
    key = store.key_for("order:cart-81")

    clock.now += 24 * HOUR - 1

    assert store.key_for("order:cart-81") == key


def test_an_intent_unused_for_the_retention_gets_a_new_key(
    make_store: Callable[..., Store],
) -> None:
    # By then the service has forgotten the key too: the old one would be
    # a new key to it all the same.
    clock = Clock()
    store = make_store(clock=clock)
    key = store.key_for("order:cart-81")

    clock.now += 24 * HOUR

    assert store.key_for("order:cart-81") != key


def test_the_retention_counts_from_the_first_use(make_store: Callable[..., Store]) -> None:
    # The service counts its retention from the first request under the key
    # that reached it: at the earliest, the key's first use. A key kept
    # longer could reach the service after it forgot it, and run the
    # command again (docs/SPECIFICATION.md §3 rule 13).
    clock = Clock()
    store = make_store(clock=clock)
    key = store.key_for("order:cart-81")
    clock.now += 20 * HOUR
    assert store.key_for("order:cart-81") == key

    clock.now += 4 * HOUR

    assert store.key_for("order:cart-81") != key


def test_a_lease_says_how_long_the_key_has_left(make_store: Callable[..., Store]) -> None:
    clock = Clock()
    store = make_store(clock=clock)
    assert isinstance(store, LeasingKeyStore)
    key, left = store.lease("order:cart-81")
    assert left == 24 * HOUR

    clock.now += 20 * HOUR

    assert store.lease("order:cart-81") == (key, 4 * HOUR)
    assert store.key_for("order:cart-81") == key


def test_the_retention_is_configurable(make_store: Callable[..., Store]) -> None:
    clock = Clock()
    store = make_store(clock=clock, retention=48 * HOUR)
    key = store.key_for("order:cart-81")

    clock.now += 47 * HOUR

    assert store.retention == 48 * HOUR
    assert store.key_for("order:cart-81") == key


@pytest.mark.parametrize("retention", [0, -1.0])
def test_a_retention_that_keeps_nothing_is_refused(
    make_store: Callable[..., Store], retention: float
) -> None:
    with pytest.raises(ValueError, match="retention"):
        make_store(retention=retention)


def test_expired_intents_are_purged_when_the_store_is_used(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "keys.sqlite3"
    store = SQLiteKeyStore(path, clock=clock)
    for number in range(100):
        store.key_for(f"order:cart-{number}")
    clock.now += 12 * HOUR
    # Used again, but first used 24 hours before the purge: purged all the same.
    store.key_for("order:cart-0")
    store.key_for("order:cart-late")
    clock.now += 12 * HOUR

    store.key_for("order:cart-new")

    with closing(sqlite3.connect(path)) as db:
        kept = {intent for (intent,) in db.execute("SELECT intent FROM idempotency_keys")}
    assert kept == {"order:cart-late", "order:cart-new"}


def test_expired_intents_are_purged_from_memory_too() -> None:
    clock = Clock()
    store = MemoryKeyStore(clock=clock)
    for number in range(100):
        store.key_for(f"order:cart-{number}")
    clock.now += 12 * HOUR
    store.key_for("order:cart-0")
    store.key_for("order:cart-late")
    clock.now += 12 * HOUR

    store.key_for("order:cart-new")

    assert set(store._keys) == {"order:cart-late", "order:cart-new"}


def test_a_file_written_before_retention_keeps_its_keys(tmp_path: Path) -> None:
    # Its rows are intents whose outcome was open when the program stopped.
    path = tmp_path / "keys.sqlite3"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "CREATE TABLE idempotency_keys"
            " (intent TEXT PRIMARY KEY, key TEXT NOT NULL, created_at REAL NOT NULL)"
        )
        db.execute("INSERT INTO idempotency_keys VALUES ('pay:invoice-7', 'k-open', ?)", (1e9,))

    store = SQLiteKeyStore(path, clock=Clock(now=1e9 + HOUR))

    assert store.key_for("pay:invoice-7") == "k-open"
    assert store.key_for("pay:invoice-8") != "k-open"
