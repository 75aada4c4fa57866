"""Generated code is up to date: the statements' copy (clients/protocol/statements.json), with no statement
text left in the package's own modules, and the synchronous producer and workflow calls (from the asyncio
ones)."""
import os
import subprocess
import sys

PROTOCOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "protocol")


def test_generated_copies_are_up_to_date():
    subprocess.run([sys.executable, os.path.join(PROTOCOL, "generate.py"), "--check"], check=True)


def test_no_statement_outside_the_protocol():
    subprocess.run([sys.executable, os.path.join(PROTOCOL, "check_sources.py"), "python"], check=True)


def test_the_synchronous_producer_and_workflow_calls_are_generated_from_the_asyncio_ones():
    tools = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools")
    subprocess.run([sys.executable, os.path.join(tools, "generate_sync.py"), "--check"], check=True)
