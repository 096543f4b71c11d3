"""``python -m commlens`` runs the command-line interface."""

from commlens.cli.main import main

raise SystemExit(main())
