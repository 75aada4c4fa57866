"""The statements come from clients/protocol/statements.json: the generated copies are up to date, and no
statement text is left in the package's own modules."""
import os
import subprocess
import sys

PROTOCOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "protocol")


def test_generated_copies_are_up_to_date():
    subprocess.run([sys.executable, os.path.join(PROTOCOL, "generate.py"), "--check"], check=True)


def test_no_statement_outside_the_protocol():
    subprocess.run([sys.executable, os.path.join(PROTOCOL, "check_sources.py"), "python"], check=True)
