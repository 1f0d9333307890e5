"""The real daemon process on scripted stages, for test_daemon_service.py: ``python
tests/daemon_process.py CONFIG`` runs ``rkvoice.daemon.service.serve`` (what ``assistant.py`` without a
mode runs) on ``test_daemon_fakes.subprocess_plan``, with CONFIG layered over the defaults (read again
on SIGHUP)."""

import sys
from pathlib import Path

from test_daemon_fakes import subprocess_plan

from rkvoice.config import DEFAULT_CONFIG, load_config
from rkvoice.daemon.service import serve, setup_logging

setup_logging()
sys.exit(serve(lambda: load_config(None, [DEFAULT_CONFIG, Path(sys.argv[1])]), subprocess_plan))
