"""Worker runtime and producer API for concurrency_ext task queues, on psycopg 3.

    from concurrency_ext import Worker

    def send(task, conn):
        conn.execute("INSERT INTO sent_mail (task_id, address) VALUES (%s, %s)", (task.id, task.payload["to"]))

    Worker("dbname=app", "emails", send, concurrency=4).run()

See README.md next to this package.
"""
from ._core import Task, TaskEnd
from .errors import LeaseLostError, QueueError
from .producer import (await_task, emit_event, enqueue, enqueue_batch, enqueue_graph, parent_results,
                       schedule, unschedule)
from .worker import Worker
from .workflow import TaskSuspended

__all__ = ["Worker", "Task", "QueueError", "LeaseLostError", "enqueue", "enqueue_batch", "enqueue_graph", "parent_results",
           "schedule", "unschedule", "await_task", "emit_event", "TaskEnd", "TaskSuspended",
           "AsyncWorker"]
__version__ = "0.4.0"


def __getattr__(name):
    if name == "AsyncWorker":  # asyncio is imported only by those who use it
        from .aio import AsyncWorker

        return AsyncWorker
    raise AttributeError(name)
