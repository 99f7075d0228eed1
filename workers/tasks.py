"""Thin tasks: take ids, refetch rows, call one service, own only the retry policy."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="workers.ping", soft_time_limit=30, time_limit=60)
def ping(*, note: str) -> str:
    """Write a heartbeat row so a caller can see a real worker reached the database."""
    from console.accounts.services import heartbeat_record

    return str(heartbeat_record(note=note).pk)
