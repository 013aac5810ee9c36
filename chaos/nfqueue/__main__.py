"""``python -m chaos.nfqueue --queue N --control SOCKET ...``: the handler process (see chaos/nfqueue/handler.py)."""

import sys

from chaos.nfqueue.handler import main

sys.exit(main())
