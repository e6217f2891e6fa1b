"""``python -m engine.daemon``: the CLI daemon (started by ``engine run``; see engine/daemon/server.py)."""

import sys

from .server import main

sys.exit(main())
