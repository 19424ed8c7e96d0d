"""Redis ACL users confined to one project's memories.

Every key of a project lives under ``compozy:<project>:memory:``, ``compozy:<project>:result:``
(results stored by reference) or ``compozy:<project>:sessions`` (the session index), so three
key patterns confine a user to one project. (Which agent may read which result namespace is
the library's check, not the server's: the patterns cover the whole project.) The scripts
run as the calling user and the server checks each command they call against the user's
rules, so a read-only user whose client calls a write script
directly is still refused by the server (NOPERM), not only by the library.

``compozy-memory acl --project acme --user support-bot [--read-only]`` prints the line to run.
Every command of the CLI but ``install`` and ``demo`` works with it (``flush``, ``clear`` and
``purge`` need the read-write line), checked by ``integration/test_cli_acl.py`` against real
servers. ``ls --scan`` needs SCAN, which the line leaves out unless asked (``--allow-scan``):
the server does not apply key patterns to SCAN, so a user who may SCAN sees the key names of
every project (not their values).

Every value that reaches the line is checked to be one plain token, because the line is run
as text: ``--password 's3cret nopass'`` would otherwise print ``>s3cret nopass``, which
redis-cli splits into a password and the ``nopass`` rule (any password logs in). User names
are identifiers, so none can start with what the ACL grammar gives meaning to (``>`` ``<``
``#`` ``!`` ``~`` ``%`` ``&`` ``+`` ``-`` ``@``...); passwords are printable ASCII without
spaces or the quotes and backslash redis-cli interprets; project ids are checked by
:func:`validate_project`, which also keeps glob characters out of the key pattern.
"""

from __future__ import annotations

import re

from compozy_memory._model.keys import validate_project
from compozy_memory.errors import UsageError

__all__ = [
    "CLIENT_CONNECTION",
    "CLIENT_READS",
    "CLIENT_WRITES",
    "READ_COMMANDS",
    "SCAN_COMMANDS",
    "WRITE_COMMANDS",
    "acl_rules",
    "acl_setuser",
]

_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_PASSWORD = re.compile(r"[!#-&(-\[\]-~]{1,512}")  # printable ASCII but space " ' and \

#: What the client sends itself: calls of the installed functions (reads as FCALL_RO, which
#: declares its keys as read) and the connection handshake. Never EVAL, EVALSHA, FUNCTION or
#: SCRIPT: a tenant's own script could allocate past maxmemory or loop, and stop the server
#: for every tenant. redis-py's CLIENT SETINFO is left out: Redis 7.0 does not know it, and
#: redis-py ignores its refusal.
CLIENT_CONNECTION = ("fcall", "fcall_ro", "ping", "hello")
#: The plain reads the client sends itself: the archive's pages (``recall``), one fact, the
#: length and token count, a stored result, the CLI's TTLs and listing.
CLIENT_READS = ("lrange", "lindex", "llen", "hget", "hmget", "pttl")
#: The plain commands a writing handle sends itself: an append as a checked transaction
#: (``WATCH``, its reads, then ``MULTI`` ``RPUSH`` ``HSET`` ``EXEC``; refused, appends go as
#: the function); a message's pin on a stored result (``append(..., offload=True)``) with the
#: memory's deadline, and the pins it keeps alive; and an operator's ``SessionIndex.prune``.
#: Every other write is a function's.
CLIENT_WRITES = (
    "watch",
    "unwatch",
    "multi",
    "exec",
    "rpush",
    "hset",
    "hincrby",
    "pexpire",
    "pexpireat",
    "pexpiretime",
    "hlen",
    "hkeys",
    "zremrangebyscore",
    "hdel",
)
#: What a Cluster client asks to learn the slot map and the command table.
_CLUSTER_CLIENT = ("cluster|slots", "cluster|shards", "cluster|nodes", "cluster|info", "command")
#: What the read scripts (``flags=no-writes``: read, context, search, health, snapshot...) and
#: the client's plain reads call. ``tests/test_acl.py`` derives the set from the scripts and
#: checks this list against it: Redis checks each command a function calls against its
#: caller's rules.
READ_COMMANDS = (
    *CLIENT_CONNECTION,
    "lrange",
    "llen",
    "lindex",
    "hget",
    "hmget",
    "hgetall",
    "hstrlen",
    "hlen",
    "exists",
    "zrange",
    "zrevrange",
    "zcard",
    "pttl",
    # The scripts size a key before they read it whole (lua/lib/args.lua: sized).
    "memory|usage",
)
#: What ``ls --scan`` adds (``--allow-scan``): key patterns do not confine it.
SCAN_COMMANDS = ("scan",)
#: What the write scripts call on top of the reads (the same check), and CLIENT_WRITES.
WRITE_COMMANDS = (
    "watch",
    "unwatch",
    "multi",
    "exec",
    "rpush",
    "lpush",
    "ltrim",
    "lpop",
    "rpop",
    "hset",
    "hdel",
    "hkeys",
    "hexists",
    "hincrby",
    "del",
    "unlink",
    "pexpire",
    "pexpireat",
    "pexpiretime",
    "persist",
    "zadd",
    "zscore",
    "zrem",
    "zpopmin",
    "zremrangebyrank",
    "zremrangebyscore",
    "set",
    "get",
    "strlen",
    "time",
    # The server's replication id: a compare-and-set after a failover is refused
    # (lua/lib/deltas.lua: lineage). INFO with this argument only.
    "info|replication",
)


def acl_rules(
    project: str, *, read_only: bool, cluster: bool = False, scan: bool = False
) -> list[str]:
    """The ACL rules (after the user name) for a user of ``project``'s memories.

    Read-only users get only read commands and read-only key permission (``%R~``), so the
    server refuses their writes twice over. ``cluster`` adds what a Cluster client asks to
    learn the slot map; ``scan`` adds SCAN (see the module's docstring). The functions must
    have been installed (``compozy-memory install``) by an operator: these users may not load
    them."""
    validate_project(project)
    patterns = [f"compozy:{project}:{part}" for part in ("memory:*", "result:*", "sessions*")]
    commands = READ_COMMANDS if read_only else (*READ_COMMANDS, *WRITE_COMMANDS)
    if cluster:
        commands = (*commands, *_CLUSTER_CLIENT)
    if scan:
        commands = (*commands, *SCAN_COMMANDS)
    return [
        "resetkeys",
        "resetchannels",
        *(f"%R~{pattern}" if read_only else f"~{pattern}" for pattern in patterns),
        "-@all",
        *(f"+{c}" for c in commands),
    ]


def acl_setuser(
    user: str,
    project: str,
    *,
    read_only: bool,
    password: str,
    cluster: bool = False,
    scan: bool = False,
) -> list[str]:
    """The whole ``ACL SETUSER`` command, as arguments, each one plain token.

    UsageError for a user name or password that is not; ConfigurationError for a project id
    that is not valid."""
    if not isinstance(user, str) or not _USER.fullmatch(user):
        raise UsageError(
            f"ACL user name {user!r} is refused: use 1-128 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    if not isinstance(password, str) or not _PASSWORD.fullmatch(password):
        raise UsageError(
            "ACL password refused: use 1-512 printable ASCII characters without spaces, "
            "quotes or backslashes, which would change how the printed line is read"
        )
    rules = acl_rules(project, read_only=read_only, cluster=cluster, scan=scan)
    return [
        "ACL",
        "SETUSER",
        user,
        "reset",
        "on",
        f">{password}",
        *rules,
    ]
