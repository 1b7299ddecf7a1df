"""Which op: drive an engine's SGLang-style tensor dumper and name the first module whose inputs agree and whose
output differs (docs/localize.md). ``core`` is the pure method, ``dumps`` reads dump folders, ``guards`` the
settings a dump needs, ``session`` drives an engine, ``jsonl`` writes SGLang-comparator records."""
