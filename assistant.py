#!/usr/bin/env python3
"""rkvoice entry point: ``assistant.py --say TEXT`` and friends (see ``--help``).

Run it with the project's interpreter (``py312/bin/python assistant.py ...``); started by
another Python that lacks the packages, it re-executes itself with py312/ when present.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    try:
        import numpy  # noqa: F401  (a stand-in for "the project's packages are here")
    except ImportError:
        venv = HERE / "py312"
        venv_python = venv / "bin" / "python"
        if venv_python.exists() and Path(sys.prefix).resolve() != venv.resolve():
            os.execv(str(venv_python), [str(venv_python), str(Path(__file__).resolve()), *sys.argv[1:]])
        sys.exit("error: the packages are missing: run ./install.sh first")
    sys.path.insert(0, str(HERE))
    from rkvoice.cli.entry import main

    sys.exit(main())
