"""schedule and unschedule, synchronous and asyncio, against a real server."""
import asyncio
import datetime
import re

import psycopg
import pytest

from concurrency_ext import QueueError, Worker, schedule, unschedule
from concurrency_ext import aio
from conftest import wait_until


def spec(admin, name):
    return admin.execute("SELECT spec, time_zone, enabled FROM concurrency.schedules WHERE name = %s",
                         (name,)).fetchall()


def test_schedule_enqueues_at_each_due_time_and_unschedule_removes_it(admin, dsn, queue):
    name = f"tick_{queue}"
    schedule(admin, name, queue, every=1, payload={"kind": "tick"}, priority=3)
    before = spec(admin, name)
    schedule(admin, name, queue, every=datetime.timedelta(seconds=1), payload={"kind": "tick"}, priority=3)
    assert spec(admin, name) == before, "the same settings again: no change"
    assert len(before) == 1
    got = []

    def handler(task, conn):
        got.append(task.payload)

    worker = Worker(dsn, queue, handler, wait=0.5)
    worker.start()
    try:
        wait_until(lambda: got, "a scheduled task")
    finally:
        worker.stop()
    assert got and got[0]["kind"] == "tick"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", got[0]["scheduled_for"])
    assert unschedule(admin, name) is True
    assert unschedule(admin, name) is False
    assert spec(admin, name) == []


@pytest.mark.parametrize("kwargs", [{"cron": "30 7 * * mon-fry"}, {"cron": "@daily", "every": 60}, {}])
def test_schedule_refuses_bad_settings_with_22023(admin, queue, kwargs):
    with pytest.raises(QueueError) as e:
        schedule(admin, f"bad_{queue}", queue, **kwargs)
    assert e.value.sqlstate == "22023"
    assert spec(admin, f"bad_{queue}") == []


def test_async_schedule_and_unschedule(admin, dsn, queue):
    name = f"async_{queue}"

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await aio.schedule(conn, name, queue, cron="@hourly", time_zone="Europe/Berlin")
            assert [row[1:] for row in spec(admin, name)] == [("Europe/Berlin", True)]
            assert await aio.unschedule(conn, name) is True

    asyncio.run(main())
    assert spec(admin, name) == []
