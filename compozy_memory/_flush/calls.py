"""The flush's script calls (``lua/flush/``), mixed into the memory's gateway: the fenced
lock's acquisition, refresh and release, and the commit of a planned flush. They touch only
the memory's own keys, so they are the memory's calls, built with the gateway's keys, TTL and
read-only check; the lock (:mod:`compozy_memory._flush.lock`) and the flusher
(:mod:`compozy_memory._flush.flusher`) run them."""

from __future__ import annotations

from typing import Any

from compozy_memory._model.results import FlushCommit, FlushPlan
from compozy_memory._wire import replies
from compozy_memory._wire.gateway_base import GatewayBase
from compozy_memory._wire.steps import Steps, op
from compozy_memory.errors import ReplicationError

__all__ = ["FlushCalls"]


class FlushCalls(GatewayBase):
    """The fenced lock's calls and a flush's commit."""

    @op
    def flush_commit(
        self,
        *,
        epoch: int,
        incarnation: str,
        plan: FlushPlan,
        summary_body: bytes,
        summary_tokens: int,
    ) -> Steps[FlushCommit]:
        """Apply ``plan`` (see ``lua/flush/flush_commit.lua``). A commit that was applied but
        not acknowledged by replicas raises ReplicationError with its FlushCommit."""
        try:
            commit = yield from self._writing(
                "flush_commit",
                {
                    "ttl_ms": self.ttl_ms,
                    "archive_max": self.policy.archive_max,
                    "epoch": epoch,
                    "incarnation": incarnation,
                    "prefix_len": len(plan.prefix_ids),
                    "n_remove": len(plan.remove_ids),
                    "n_fold": len(plan.fold_summary_ids),
                    "summary_tokens": summary_tokens,
                    "summary_body": summary_body,
                },
                self._flush_commit,
                [*plan.prefix_ids, *plan.remove_ids, *plan.fold_summary_ids],
            )
        except ReplicationError as exc:
            raise exc.with_result(self._flush_commit(exc.result)) from exc
        return commit

    @op
    def lock_acquire(self, token: str, lease_ms: int) -> Steps[tuple[int, str]]:
        """``(epoch, incarnation)``; epoch 0 when another holder has the lock."""
        reply = yield from self._writing(
            "lock_acquire",
            {"token": token, "lease_ms": lease_ms, "ttl_ms": self.ttl_ms},
            self._fields("lock_acquire"),
        )
        return int(reply["epoch"]), replies.text(reply["incarnation"])

    @op
    def lock_refresh(self, token: str, lease_ms: int) -> Steps[bool]:
        return (
            yield from self._writing("lock_refresh", {"token": token, "lease_ms": lease_ms}, bool)
        )

    @op
    def lock_release(self, token: str) -> Steps[bool]:
        return (yield from self._writing("lock_release", {"token": token}, bool))

    def _flush_commit(self, reply: Any) -> FlushCommit:
        return replies.flush_commit(self._fields("flush_commit")(reply))
