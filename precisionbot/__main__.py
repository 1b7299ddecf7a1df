from __future__ import annotations

from precisionbot.cli import main

raise SystemExit(main())
