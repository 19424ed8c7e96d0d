"""Large results by reference: payloads stored once, outside any memory, named by their hash.

A tool that returns megabytes (a file, a query result, a page) should not sit in a
conversation: ``store_result`` keeps the bytes in Redis and returns a :class:`DataRef`, and
a message carries the reference and a short stub instead (``MemoryInstance.append(...,
offload=True)``). ``load_result`` gives the bytes back, checked against the SHA-256 the
reference names: a changed or damaged copy raises :class:`ResultCorruptError`.

**Namespaces.** Every result lives in one namespace: :meth:`Namespace.global_` (the whole
project), ``workflow(id)``, ``swarm(id)`` or ``agent(id)``. A :class:`ResultStore` is opened
for a viewer (its agent, workflow and swarm ids) and reads only the global namespace and
the ones whose id is its own: an agent never reads another agent's results. The id is
encoded with :func:`~compozy_memory._model.keys.sanitize_key`, which is injective and
escapes everything outside ``[a-zA-Z0-9-_.:]`` (braces included), and the kind comes from a
closed set, so ``agent:<encoded id>`` names exactly one namespace: no id with colons,
braces, slashes, ``..`` or look-alike Unicode reaches another's key. A reference is only
ever turned into a key by re-encoding its namespace, never by using text it carries.

**Keys and slots.** ``compozy:<project>:result:{<namespace>}:<sha256>``, a HASH (``data``,
``enc``, ``size``, ``kind``, ``ttl``, ``refs``). The namespace is the hash tag, so one
namespace's results share a slot (one agent's results on one node; the global namespace's
all on one node, which concentrates it: keep the global namespace for what is truly
shared). Results are not in a memory's slot: a message and the result it points at are
written by two calls. Every script touches one result key alone, so none crosses slots.

**Reference counts.** A message that points at a result pins it (``refs + 1``) in the same
call that stores it, before the message is appended. If the append then fails, the pin
stays with nothing pointing at it: the leak is bounded, because a pinned result's TTL is at
least its memory's TTL (``pin_ttl``), so it ends when that memory would. A pinned result of
a memory without a TTL is kept until :meth:`ResultStore.release`. ``memory.clear()`` releases
what its live and archived messages pin (read before the clear, released after). Trims and
flushes move a message to the archive, which still points at the result, so they release
nothing; when the archive's cap drops an original, its pin is not released (the memory's
scripts cannot reach a result's slot): it ends with the memory's TTL. Unpinned, a result
keeps its own ``ttl`` (none: it stays).

Payloads larger than :data:`COMPRESS_OVER` bytes are stored gzip-compressed. A slice
(:meth:`ResultStore.load_slice`) reads and checks the whole payload: the hash covers it all.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import zlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from compozy_memory._io.connection import transport_for
from compozy_memory._io.retry import RetryPolicy
from compozy_memory._model.keys import decode_key, sanitize_key, validate_project
from compozy_memory._model.limits import MAX_RESULT_BYTES
from compozy_memory._results.calls import ResultGateway
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import ConfigurationError, ResultCorruptError, UsageError

__all__ = [
    "COMPRESS_OVER",
    "DataRef",
    "Namespace",
    "NamespaceKind",
    "ResultStore",
]

#: Payloads larger than this many bytes are stored gzip-compressed.
COMPRESS_OVER = 16 * 1024
NamespaceKind = Literal["global", "workflow", "swarm", "agent"]
_KINDS: tuple[NamespaceKind, ...] = ("global", "workflow", "swarm", "agent")
_SHA = re.compile(r"[0-9a-f]{64}")
_KIND = re.compile(r"[a-z][a-z0-9_.\-]{0,63}")
_ENCODED_NS = re.compile(r"global|(?:workflow|swarm|agent):[a-zA-Z0-9\-_.:]+(?:#[0-9a-f]{32})?")


@dataclass(frozen=True, slots=True)
class Namespace:
    """Where a result lives: the project (GLOBAL), a workflow, a swarm, or one agent."""

    kind: NamespaceKind
    id: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise UsageError(f"a namespace kind is one of {', '.join(_KINDS)}, got {self.kind!r}")
        if self.kind == "global":
            if self.id is not None:
                raise UsageError("the global namespace has no id")
        elif not isinstance(self.id, str) or not self.id.strip():
            raise UsageError(f"a {self.kind} namespace needs a non-blank id, got {self.id!r}")

    @classmethod
    def global_(cls) -> Namespace:
        return cls("global")

    @classmethod
    def workflow(cls, id: str) -> Namespace:
        return cls("workflow", id)

    @classmethod
    def swarm(cls, id: str) -> Namespace:
        return cls("swarm", id)

    @classmethod
    def agent(cls, id: str) -> Namespace:
        return cls("agent", id)

    @property
    def encoded(self) -> str:
        """``global`` or ``<kind>:<encoded id>``: injective, inside ``[a-zA-Z0-9-_.:#]``."""
        if self.id is None:
            return "global"
        return f"{self.kind}:{sanitize_key(self.id)}"

    @classmethod
    def decode(cls, text: str) -> Namespace:
        """The namespace :attr:`encoded` wrote as ``text``; UsageError if none did."""
        if text == "global":
            return cls("global")
        kind, sep, rest = text.partition(":")
        if not sep or kind not in _KINDS or kind == "global":
            raise UsageError(f"{text!r:.80} is not a result namespace")
        try:
            raw = decode_key(rest)
        except ConfigurationError as exc:
            raise UsageError(f"{text!r:.80} is not a result namespace: {exc}") from None
        namespace = cls(kind, raw)
        if namespace.encoded != text:
            raise UsageError(f"{text!r:.80} is not a result namespace")
        return namespace


@dataclass(frozen=True, slots=True)
class DataRef:
    """A stored result: its namespace (encoded, :attr:`Namespace.encoded`: a shortened id
    cannot be decoded, but it can be compared), the SHA-256 of its bytes, its size and kind."""

    namespace: str
    sha256: str
    size: int
    kind: str = "bytes"

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not _ENCODED_NS.fullmatch(self.namespace):
            raise UsageError(f"{self.namespace!r:.80} is not an encoded result namespace")
        if not isinstance(self.sha256, str) or not _SHA.fullmatch(self.sha256):
            raise UsageError(
                f"a result's sha256 is 64 lowercase hex digits, got {self.sha256!r:.80}"
            )

    @property
    def token(self) -> str:
        """``<namespace>/<sha256>``: how a stub names its result to a model and its tools."""
        return f"{self.namespace}/{self.sha256}"

    def to_json(self) -> dict[str, Any]:
        return {
            "ns": self.namespace,
            "sha256": self.sha256,
            "size": self.size,
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, data: Any) -> DataRef:
        if not isinstance(data, dict):
            raise UsageError("a result reference is an object with ns, sha256, size, kind")
        size = data.get("size", 0)
        if not isinstance(size, int) or size < 0:
            raise UsageError(f"a result's size is an integer >= 0, got {size!r:.40}")
        return cls(
            str(data.get("ns")),
            str(data.get("sha256")),
            size,
            str(data.get("kind", "bytes")),
        )

    @classmethod
    def parse_token(cls, token: str) -> tuple[str, str]:
        """The encoded namespace and hash a :attr:`token` names."""
        if not isinstance(token, str):
            raise UsageError("a result token is text")
        ns, sep, sha = token.rpartition("/")
        if not sep or not _SHA.fullmatch(sha) or not _ENCODED_NS.fullmatch(ns):
            raise UsageError(f"{token!r:.80} is not a result token (<namespace>/<sha256>)")
        return ns, sha


def result_key(project: str, namespace: str, sha256: str) -> str:
    """The key of a result: ``namespace`` is encoded (:attr:`Namespace.encoded`)."""
    return f"compozy:{project}:result:{{{namespace}}}:{sha256}"


class ResultStore:
    """Stores and loads results for one viewer: an agent, in a workflow, in a swarm.

    On a ``redis.asyncio`` client its methods are awaited; a sync handle's store
    (``SyncMemoryInstance.results``) returns their results."""

    def __init__(
        self,
        client: Any,
        project: str,
        *,
        agent: str | None = None,
        workflow: str | None = None,
        swarm: str | None = None,
        retry: RetryPolicy | None = None,
        transport: Any = None,
    ) -> None:
        self.project = validate_project(project)
        self.agent, self.workflow, self.swarm = agent, workflow, swarm
        name = f"compozy:{project}:result"
        self.gateway = ResultGateway(
            transport or transport_for(client, retry=retry, batching=False, key=name)
        )

    @property
    def transport(self) -> Any:
        return self.gateway.transport

    def visible(self, namespace: Namespace | str) -> bool:
        """Whether this viewer may read and write ``namespace`` (or its encoded form)."""
        encoded = namespace.encoded if isinstance(namespace, Namespace) else namespace
        return encoded in self._allowed

    @property
    def _allowed(self) -> set[str]:
        # The encoded namespaces this viewer reaches: compared whole, so an id can only
        # match itself (the encoding is injective).
        allowed = {"global"}
        for kind, id in (("workflow", self.workflow), ("swarm", self.swarm), ("agent", self.agent)):
            if id is not None:
                allowed.add(Namespace(kind, id).encoded)  # type: ignore[arg-type]
        return allowed

    def _key(self, namespace: str, sha256: str) -> str:
        if not self.visible(namespace):
            raise UsageError(
                f"the namespace {namespace!r:.80} is not this viewer's (agent "
                f"{self.agent!r:.80}, workflow {self.workflow!r:.80}, swarm {self.swarm!r:.80})"
            )
        return result_key(self.project, namespace, sha256)

    @op
    def store_result(
        self,
        data: bytes | str,
        *,
        namespace: Namespace,
        ttl: timedelta | None = None,
        kind: str | None = None,
        pin: bool = False,
        pin_ttl: timedelta | None = None,
    ) -> Steps[DataRef]:
        """Store ``data`` (text as UTF-8) in ``namespace``; the same bytes get the same
        reference. ``pin`` counts one more message pointing at it (see the module's
        docstring); ``ttl`` applies while it is not pinned."""
        if isinstance(data, str):
            payload, kind = data.encode("utf-8", "surrogatepass"), kind or "text"
        elif isinstance(data, (bytes, bytearray, memoryview)):
            payload, kind = bytes(data), kind or "bytes"
        else:
            raise UsageError(f"a result is bytes or text, got {type(data).__name__}")
        if not _KIND.fullmatch(kind):
            raise UsageError(f"a result kind is a short lowercase name, got {kind!r:.80}")
        if len(payload) > MAX_RESULT_BYTES:
            raise UsageError(f"a result has at most {MAX_RESULT_BYTES} bytes, got {len(payload)}")
        sha = hashlib.sha256(payload).hexdigest()
        key = self._key(namespace.encoded, sha)
        stored, enc = payload, "raw"
        if len(payload) > COMPRESS_OVER:
            stored, enc = gzip.compress(payload, compresslevel=6, mtime=0), "gzip"
        (
            yield from self.gateway.put(
                key,
                data=stored,
                size=len(payload),
                enc=enc,
                kind=kind,
                ttl_ms=_ms(ttl),
                pin=pin,
                pin_ttl_ms=_ms(pin_ttl),
            )
        )
        return DataRef(namespace.encoded, sha, len(payload), kind)

    @op
    def load_result(self, ref: DataRef | str) -> Steps[bytes]:
        """The bytes ``ref`` names, checked against its SHA-256: ResultCorruptError if they
        do not hash to it, UsageError if there is no such result (expired, never stored)."""
        namespace, sha = (
            (ref.namespace, ref.sha256) if isinstance(ref, DataRef) else DataRef.parse_token(ref)
        )
        key = self._key(namespace, sha)
        data, enc, _, _ = yield from self.gateway.fetch(key)
        if data is None:
            raise UsageError(f"no result {namespace}/{sha} (expired, or never stored)")
        raw = bytes(data)
        encoding = enc.decode() if isinstance(enc, bytes) else str(enc)
        if encoding == "gzip":
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError, zlib.error) as exc:
                raise ResultCorruptError(
                    f"result {sha} cannot be decompressed: {exc}", key=key
                ) from None
        if hashlib.sha256(raw).hexdigest() != sha:
            raise ResultCorruptError(
                f"result {sha} does not hash to its name: it was changed", key=key
            )
        return raw

    @op
    def load_slice(self, ref: DataRef | str, start: int, length: int) -> Steps[bytes]:
        """``length`` bytes from ``start`` of the result (the whole payload is read and
        checked: the hash covers all of it)."""
        if not isinstance(start, int) or not isinstance(length, int) or start < 0 or length < 0:
            raise UsageError("a slice needs start >= 0 and length >= 0")
        return (yield from self.load_result(ref))[start : start + length]

    def key_of(self, ref: DataRef) -> str:
        """The Redis key of the result ``ref`` names (in a namespace this viewer sees)."""
        return self._key(ref.namespace, ref.sha256)

    @op
    def release(self, ref: DataRef) -> Steps[int]:
        """One message fewer points at ``ref``; returns the count left (-1: no such result)."""
        return (yield from self.gateway.release(self._key(ref.namespace, ref.sha256)))


def _ms(ttl: timedelta | None) -> int:
    if ttl is None:
        return 0
    if not isinstance(ttl, timedelta) or ttl.total_seconds() <= 0:
        raise UsageError(f"a result ttl is a positive timedelta, got {ttl!r}")
    return max(1, int(ttl.total_seconds() * 1000))
