"""The flags several commands share, each defined once, and what they resolve to: ``engine`` (which engine a
command talks to, ``--engine``/``--engine-url`` and friends, resolved into an ``EngineChoice``), ``store``
(``--store``), ``suite`` (``--suite`` and the size flags, resolved into a ``SuiteConfig``) and ``builtin`` (the
builtin engine's numerics and model flags). These are not subcommands: commands import them, cli.py does not."""
