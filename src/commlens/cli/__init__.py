"""The ``commlens`` command line: one small module per subcommand."""
