"""Commands: one module per subcommand (``register(subparsers)`` plus its handler), the composition root's floor.

A command resolves its arguments once, at the top of its handler, into the values the lower floors take (a
``Config``, a ``SuiteConfig``, an ``EngineChoice``): nothing below a command sees argparse. The flags several
commands share are defined once, in ``engine_option``, ``suite_option`` and ``store_option``.
"""
