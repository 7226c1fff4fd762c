"""``python -m hpsearch`` runs the CLI."""

from hpsearch.cli import main

main()
