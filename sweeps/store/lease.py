"""The writer lock of a store on an object store (s3://, gs://): a lease.

Object stores (s3://, gs://) have no file locks: the lock is a LEASE, the object
RESULTS_DIR/writer.lock with the record of a local lock (`records.LockHolder`, owner token included)
plus an expiry:

    {..., "owner": "<random>", "lease_seconds": 60, "renewed_at": ..., "expires_at": ...}

Every write of the lease object is conditional on the version last read or written (S3,
boto3: `If-None-Match: *` to create, `If-Match: <ETag>` to renew, take over or delete), so
of two writers exactly one wins each write and the other learns it at once. Taking it: read
the object; a live holder (not expired, and not a dead pid on this host) is refused
(StoreLocked); a free lock is created, an expired or dead holder's lease replaced (with a notice),
each only if unchanged since the read: a writer that loses the race re-reads and is
refused. While held, a heartbeat thread renews the lease every lease/4 seconds, again only
if unchanged since its last renewal; a renewal that fails (its lease expired while it was
paused or cut off, and someone took over) says so and interrupts the sweep (as Ctrl-C
would: finished packs stay, exit 130). Release (also at interpreter exit) stops and joins
the heartbeat, then deletes the object if unchanged. Stores without conditional writes (GCS
through pyarrow, an S3-compatible store that refuses them) fall back to plain writes:
write, wait a moment, re-read (whoever's token is there wins), and re-read before each
renewal, which leaves a takeover between that read and the write unseen.

What a lease guarantees, and what it cannot: two writers never both START on a free or
held lock; a writer killed in any way blocks the store until its lease expires (at once
when the next writer runs on the same host and sees the pid dead). It assumes clocks agree
to within a few seconds, and it cannot stop a holder frozen for longer than the lease (a
suspended VM, a long network partition) from finishing the pack it was writing after
another writer took over. That overlap is harmless to the data: every pack is written under
write-once keys with its manifest last, and readers take each (config, seed) from the
newest manifest, so no half pack is visible and nothing is counted twice.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import uuid
from typing import Callable, Self

from sweeps.store.holder import LOCK_FILE, HeldLock, StoreLocked, describe, holder_body, log, stale
from sweeps.store.records import LockHolder, RecordError, parse_record, record_json
from sweeps.store.uris import ObjectFiles, StorageError, redact

LEASE_SECONDS = float(os.environ.get("FADE_SWEEP_LEASE_SECONDS", "60"))  # a lease not renewed expires
SETTLE_SECONDS = 1.0  # takeover without conditional writes: wait before re-reading who won


def _parse_holder(raw: bytes, written: Callable[[], float], where: str) -> LockHolder:
    """The lease's holder; a damaged one (not a holder record) is held until a lease after `written()`, then stale."""
    try:
        return parse_record(LockHolder, raw, where)
    except RecordError:
        return LockHolder(expires_at=written() + LEASE_SECONDS)


def read_lease(location: ObjectFiles) -> LockHolder | None:
    """Who holds the lease of an object store (None: nobody), read with the store's filesystem."""
    def written() -> float:
        try:
            return (location.info(LOCK_FILE).mtime_ns or 0) / 1e9
        except (OSError, StorageError):
            return time.time()

    try:
        return _parse_holder(location.read_bytes(LOCK_FILE), written, location.url(LOCK_FILE))
    except FileNotFoundError:
        return None


class LeaseObject:
    """The lease object's reads and writes. On S3 (boto3 installed) each write is conditional on the
    version (ETag) last read or written here: a create only if absent (If-None-Match: *), a renewal,
    takeover or delete only if unchanged since (If-Match), so of two writers exactly one wins and the
    other learns it. Elsewhere (GCS through pyarrow, a store refusing conditions) writes are plain and
    `conditional` is False: the caller settles and re-reads."""

    def __init__(self, location: ObjectFiles):
        self.location = location
        self.client = location.s3_client()
        self.bucket, _, self.key = location.path(LOCK_FILE).partition("/")
        self.version: str | None = None  # the ETag we last saw; None: absent (or not conditional)

    @property
    def conditional(self) -> bool:
        return self.client is not None

    def read(self) -> LockHolder | None:
        if not self.conditional:
            return read_lease(self.location)
        got = self._request("read", self.client.get_object, Bucket=self.bucket, Key=self.key)
        if got is None:
            self.version = None
            return None
        self.version = got["ETag"]
        return _parse_holder(got["Body"].read(), got["LastModified"].timestamp, self.location.url(LOCK_FILE))

    def write(self, data: bytes) -> bool:
        """Write if the object is still at `version` (absent when None); False: someone else wrote first."""
        if self.conditional:
            condition = {"IfMatch": self.version} if self.version else {"IfNoneMatch": "*"}
            put = self._request("write", self.client.put_object, Bucket=self.bucket, Key=self.key, Body=data, **condition)
            if put is not None:
                self.version = put["ETag"]
                return True
            if self.conditional:
                return False
        self.location.write_bytes(LOCK_FILE, data)  # no conditions here
        return True

    def delete(self, owner: str) -> None:
        """Delete the lease if it is still `owner`'s: on S3 only if unchanged since `version`."""
        if self.conditional:
            self._request("delete", self.client.delete_object, Bucket=self.bucket, Key=self.key, IfMatch=self.version)
            if self.conditional:
                return
        holder = self.read()
        if holder is not None and holder.owner == owner:
            self.location.delete(LOCK_FILE)

    def _request(self, what: str, call, **args) -> dict | None:
        """One S3 request; None: its condition failed or the object is absent. A store that refuses
        conditions turns this object plain (`conditional` False) and also answers None."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(**args)
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey") or status in (409, 412):
                return None
            if code in ("NotImplemented", "InvalidArgument") or status == 501:
                self.client = None
                return None
            raise StorageError(f"{self.location.url(LOCK_FILE)}: cannot {what} ({redact(code or str(status))})") from None
        except BotoCoreError as err:
            raise StorageError(f"{self.location.url(LOCK_FILE)}: cannot {what} ({redact(type(err).__name__)})") from None


class LeaseLock(HeldLock):
    """The writer lock of a store on an object store (a `WriterLock`): a lease object, renewed by a
    heartbeat thread."""

    def __init__(self, location: ObjectFiles, command: str | None = None):
        self.location = location
        self.where = location.display
        self.command = command if command is not None else " ".join(sys.argv)
        self.owner = uuid.uuid4().hex
        self.body: LockHolder | None = None
        self.object = LeaseObject(location)
        self.interval = max(0.2, LEASE_SECONDS / 4)  # between renewals
        self.expires_at = 0.0  # of the last lease we wrote
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def _write(self) -> bool:
        """Write a fresh lease (conditional: see LeaseObject); False: another writer wrote first."""
        now = time.time()
        self.body = self.body.model_copy(update={"renewed_at": now, "expires_at": now + LEASE_SECONDS,
                                                 "lease_seconds": LEASE_SECONDS})
        if not self.object.write(record_json(self.body)):
            return False
        self.expires_at = now + LEASE_SECONDS
        return True

    def acquire(self) -> Self:
        location, lease = self.location, self.object
        location.check()
        for _ in range(10):
            holder = lease.read()
            if holder is not None and holder.owner != self.owner and not stale(holder):
                raise StoreLocked(f"{self.where} is being written by {describe(holder)}")
            self.body = holder_body(self.command, self.owner)
            if holder is not None:
                self.taking_over(holder)
            if not self._write():
                continue  # another writer created or took it over since we read: read who
            if not lease.conditional:  # a plain write: wait, then see whose token is there
                time.sleep(SETTLE_SECONDS)
                now_held = read_lease(location)
                if now_held is None or now_held.owner != self.owner:
                    raise StoreLocked(f"{self.where} is being written by {describe(now_held)}")
            self._thread = threading.Thread(target=self._heartbeat, name="fade-sweep-lease", daemon=True)
            self._thread.start()
            atexit.register(self.release)  # before the filesystems finalize: stop the heartbeat, free the lease
            return self
        raise StoreLocked(f"{self.where}: could not take {LOCK_FILE} (it keeps changing); try again")

    def renew(self) -> bool:
        """Extend the lease once (the heartbeat's step); False: it is no longer ours and the sweep was stopped."""
        try:
            if not self.object.conditional:  # plain writes: re-read first (a takeover in between goes unseen)
                holder = read_lease(self.location)
                if holder is not None and holder.owner not in (None, self.owner):
                    return self._lose(f"another writer took the store over ({describe(holder)})")
            if not self._write():
                holder = self.object.read()  # still our token: our own write landed twice (a retried request)
                if holder is None or holder.owner != self.owner:
                    return self._lose(f"another writer took the store over ({describe(holder)})")
        except (OSError, StorageError) as err:
            if time.time() > self.expires_at:
                return self._lose(f"the lease could not be renewed before it expired ({redact(str(err))})")
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.interval) and self.renew():
            pass

    def _lose(self, why: str) -> bool:
        import _thread

        self.lost = True
        log.error("%s: lost the writer lock: %s; stopping this sweep", self.where, why)
        _thread.interrupt_main()
        return False

    def release(self) -> None:
        """Stop and join the heartbeat, then delete the lease if it is still ours. Idempotent (also runs at exit)."""
        atexit.unregister(self.release)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        if self.lost or self.body is None:
            return
        try:
            self.object.delete(self.owner)  # a lease another writer took over is left alone
        except (OSError, StorageError):
            pass  # it expires by itself
        self.body = None

    def holder(self) -> LockHolder | None:
        """Who holds the lease now (None: nobody, or a holder that is provably gone), without taking it."""
        holder = read_lease(self.location)
        return None if holder is None or stale(holder) else holder

    def token(self) -> str | None:
        holder = read_lease(self.location)
        return None if holder is None else holder.owner
