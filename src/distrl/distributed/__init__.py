"""Everything that knows about more than one process: rank context, collectives, strategies,
and the torchrun launcher."""
