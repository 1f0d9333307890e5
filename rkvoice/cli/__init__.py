"""The command line (``assistant.py``): entry (flags, logging, errors), say, ask, replay, output.
The CLI imports the stages; no stage package imports the CLI."""
