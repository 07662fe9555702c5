"""What the machine did during a benchmark run, from the `machine` figures that
`sluice bench --count-cpu` records (the one /proc reading, src/bench/machine.rs): shared by
scripts/bench-summary.py and scripts/bench-pair."""

# A run is quiet when other work stayed under this many cores.
QUIET_OTHER_CORES = 0.1


def other_cores(run):
    """The other work during `run` in cores: the machine's CPU time (steal included) less the
    server's, Redis's and the load generator's, over the run's wall time; None for a run
    recorded without the machine's figures."""
    m = run.get("machine")
    if not m or not m["wall_s"]:
        return None
    own = m["load_ticks"] + run.get("server_cpu_ticks", 0) + run.get("redis_cpu_ticks", 0)
    return max(m["busy_ticks"] - own, 0) / run["clk_tck"] / m["wall_s"]
