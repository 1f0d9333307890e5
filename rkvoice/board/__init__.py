"""Probes of this machine, below the stages (they import only config and errors): sound devices,
NPU runtime versions read from the libraries' bytes, the espeak-ng preload. ``--check`` reads them
from the CLI (rkvoice.cli.check)."""
