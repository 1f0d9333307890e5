"""Board-side helpers that run (and are tested) anywhere: version probes, espeak-ng preload, --check."""
