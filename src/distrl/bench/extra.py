"""Registers the scaling benchmarks (scaling, learn, comm, project) once they exist."""
