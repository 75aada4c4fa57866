#!/usr/bin/env python3
"""One round of bench/workflows.py's (d): WORKFLOWS five-step workflows of
DBOS Transact (the `dbos` package, run from its own virtualenv) by WORKERS
threads, against the same PostgreSQL server, in a database of its own.

Each workflow is a @DBOS.workflow() calling five @DBOS.step() functions that
return {"done": true}: DBOS records the workflow and the output of each step
in its system database, as concurrency_ext records a task's steps in its row.
The workflows are started by direct calls (DBOS's fastest path: no queue to
poll), WORKERS at a time.

Usage: workflows_dbos.py SYSTEM_DATABASE_URL WORKFLOWS WORKERS
Prints one JSON line: {"workflows": N, "seconds": S, "per_s": N/S}.
"""
import json
import sys
import threading
import time
import uuid

from dbos import DBOS, SetWorkflowID


def main():
    url, total, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    DBOS(config={"name": "bench-workflows", "system_database_url": url, "sys_db_pool_size": workers + 4,
                 "log_level": "WARNING"})

    @DBOS.step()
    def step(n):
        return {"done": True, "step": n}

    @DBOS.workflow()
    def five_steps():
        for n in range(5):
            step(n)
        return {"done": True}

    DBOS.launch()
    left = [total]
    lock = threading.Lock()
    run = uuid.uuid4().hex[:8]

    def worker(index):
        i = 0
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            i += 1
            # a workflow id of its own, as a task's id
            with SetWorkflowID(f"{run}-{index}-{i}"):
                five_steps()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    DBOS.destroy()
    print(json.dumps({"workflows": total, "seconds": elapsed, "per_s": total / elapsed}), flush=True)


if __name__ == "__main__":
    main()
