"""The package's version, in a module of its own: the engine tags disk entries with it without
importing the `lazygraph` package that imports the engine."""

__version__ = "0.1.0"
