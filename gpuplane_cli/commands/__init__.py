"""One module per command group; each has ``register(subparsers, parents)`` and handlers that take a Context."""
