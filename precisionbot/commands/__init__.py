"""Commands: one module per subcommand (``register(subparsers)`` plus its handler), the composition root's floor.

A command resolves its arguments once, at the top of its handler, into the values the lower floors take (a
``Config``, a ``SuiteConfig``, an ``EngineChoice``): nothing below a command sees argparse. The flags several
commands share are defined once, in ``options/`` (``options.engine``, ``options.suite``, ``options.store`` and
``options.builtin``), which no subcommand module is: only cli.py imports a subcommand module.
"""
