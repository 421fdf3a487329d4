"""``python -m clustertwin``: the command line, where the console script is not installed."""

from clustertwin.cli import main

raise SystemExit(main())
