"""Redis key layout of a memory instance.

Every key of one instance is ``compozy:<project>:memory:{<key>}:<part>``. The sanitised
instance key is the Cluster hash tag, so all parts live in one slot and every multi-key script
is legal on Redis Cluster.

Sanitising follows the Compozy spec (keep ``[a-zA-Z0-9-_.:]``, replace each run of anything
else with ``_``) with two fixes:

* a sanitised key longer than 512 characters keeps a 479-character prefix, then ``#`` and
  128 bits of the SHA-256 of the *original* input. ``#`` never survives sanitising, so a
  shortened key can never equal a key that was short to begin with, and two long keys that
  share a prefix still differ.
* ``{`` and ``}`` are outside the allowed set, so no input can open or close a hash tag and
  choose its slot or leave its project's namespace.

Inputs that differ only in disallowed characters (``a b`` and ``a/b``) share a key, as in the
spec: key templates should be built from identifiers, not free text.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from compozy_memory.errors import ConfigurationError

__all__ = ["MAX_KEY_LENGTH", "InstanceKeys", "sanitize_key", "validate_project"]

MAX_KEY_LENGTH = 512
_DIGEST_HEX = 32
_DISALLOWED = re.compile(r"[^a-zA-Z0-9\-_.:]+")
_PROJECT = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-_.]{0,127}$")


def sanitize_key(raw: str) -> str:
    """Map any string to a key part that is safe inside ``{...}`` on Redis Cluster."""
    if not isinstance(raw, str):
        raise ConfigurationError(f"a memory key must be a string, got {type(raw).__name__}")
    cleaned = _DISALLOWED.sub("_", raw)
    if not cleaned.strip("_"):
        raise ConfigurationError(
            f"memory key {raw!r} is empty once sanitised: use letters, digits or -_.:"
        )
    if len(cleaned) <= MAX_KEY_LENGTH:
        return cleaned
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX]
    return f"{cleaned[: MAX_KEY_LENGTH - _DIGEST_HEX - 1]}#{digest}"


def validate_project(project: str) -> str:
    """Return ``project`` if it is a valid project id, else raise ConfigurationError."""
    if not isinstance(project, str) or not _PROJECT.match(project):
        raise ConfigurationError(
            f"project id {project!r} is invalid: use 1-128 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return project


@dataclass(frozen=True, slots=True)
class InstanceKeys:
    """The Redis keys of one memory instance, all in one Cluster slot."""

    project: str
    key: str

    @classmethod
    def build(cls, project: str, raw_key: str) -> InstanceKeys:
        """Sanitise ``raw_key`` and place it in ``project``'s namespace."""
        return cls(validate_project(project), sanitize_key(raw_key))

    @property
    def prefix(self) -> str:
        return f"compozy:{self.project}:memory:{{{self.key}}}"

    @property
    def msgs(self) -> str:
        return f"{self.prefix}:msgs"

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def archive(self) -> str:
        return f"{self.prefix}:archive"

    @property
    def summaries(self) -> str:
        return f"{self.prefix}:summaries"

    @property
    def dedupe(self) -> str:
        """Sorted set of recent append/replace dedupe keys, scored by the first id each got."""
        return f"{self.prefix}:dedupe"

    @property
    def lock(self) -> str:
        return f"{self.prefix}:lock"

    @property
    def data(self) -> tuple[str, str, str, str, str]:
        """The keys every write script receives, in the order the scripts expect."""
        return (self.msgs, self.meta, self.archive, self.summaries, self.dedupe)
