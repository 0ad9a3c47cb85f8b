"""Registers the scaling benchmarks: scaling, learn, comm, project."""

from distrl.bench.cli import register
from distrl.bench.comm import CommArgs, comm
from distrl.bench.learn import LearnArgs, learn
from distrl.bench.project import ProjectArgs, project_cmd
from distrl.bench.scaling import ScalingArgs, scaling

register("scaling", ScalingArgs, scaling)
register("learn", LearnArgs, learn)
register("comm", CommArgs, comm)
register("project", ProjectArgs, project_cmd)
