"""Home Assistant from the local assistant: the ``home`` route (``route.HomeRoute``) asks HA's
conversation agent (``client.HaClient``, REST) after the local tools and before the LLM; ``ws`` reads
what HA exposes to Assist (names for the route, counts for ``--check``)."""
