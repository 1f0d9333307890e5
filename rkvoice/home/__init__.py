"""Home Assistant from the local assistant: the ``home`` route (``route.HomeRoute``) asks HA's
conversation agent (``client.HaClient``, REST) after the local tools and before the LLM; ``ws`` reads
what HA exposes to Assist; ``vocab`` keeps the home's names (read from HA, cached on disk) and
``correct`` puts a misheard name right before HA reads a command."""
