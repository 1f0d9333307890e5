"""The command line (``assistant.py``): entry (flags, logging, errors), modes, output.
The CLI imports the stages; no stage package imports the CLI."""
