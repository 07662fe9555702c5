#!/usr/bin/env python3
"""Summarises what scripts/bench wrote under OUT (argument 1) as Markdown: medians, ratios to
the do-nothing baseline, and whether the machine was quiet while the timing figures were taken:
in every run, the machine's CPU time less the server's, Redis's and the load generator's (other
work, hypervisor steal included) under a tenth of a core. Runs recorded before that was measured
fall back on the 1-minute load average (< 1.0 before and after)."""
import json
import os
import re
import statistics
import sys

from bench_machine import QUIET_OTHER_CORES, other_cores

QUIET = 1.0  # load average, for runs without the machine's CPU time
out = sys.argv[1]
med = statistics.median


def lines(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []


def quiet_note(pairs, rs=()):
    """pairs: (load before, load after) of each run (none for runs that record only the
    machine's CPU time); rs: the runs themselves."""
    if not pairs and not rs:
        return ""
    notes, worst = [], float("inf")
    if pairs:
        worst = max(max(a, b if b is not None else a) for a, b in pairs)
        best = min(a for a, _ in pairs)
        notes.append(f"load average over the runs: {best:.2f} to {worst:.2f}")
    other = [other_cores(r) for r in rs]
    if other and None not in other:
        steal = max(r["machine"]["steal_ticks"] / r["clk_tck"] / r["machine"]["wall_s"] for r in rs)
        quiet = max(other) < QUIET_OTHER_CORES
        notes.append(f"other work {min(other):.2f} to {max(other):.2f} cores (steal up to "
                     f"{steal:.2f})")
    else:
        quiet = worst < QUIET
    note = "; ".join(notes)
    state = "quiet" if quiet else "**NOT quiet** (timing figures include other work)"
    return f"{note}: {state}"


print("# sluice benchmark results\n")
if os.path.exists(f"{out}/machine.txt"):
    print(open(f"{out}/machine.txt").read())

if os.path.exists(f"{out}/criterion.txt"):
    print("## criterion (median of criterion's estimate)\n")
    print("| bench | time |\n| --- | --- |")
    name = None
    for line in open(f"{out}/criterion.txt"):
        line = line.rstrip()
        m = re.match(r"^(\S+/\S+)\s*(time:.*)?$", line)
        if m and "/" in line.split()[0]:
            name = m.group(1)
        t = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if t and name:
            print(f"| {name} | {t.group(1)} {t.group(2)} |")
            name = None

memory = lines("memory.jsonl")
if memory:
    print("\n## memory per active counter\n")
    print("| algorithm | counters | hits each | bytes per counter |\n| --- | --- | --- | --- |")
    for m in memory:
        print(f"| {m['algorithm']} | {m['counters']:,} | {m['hits_per_counter']} | {m['bytes_per_counter']} |")

runs = lines("runs.jsonl")


def pick(server, keys, mode, inflight=64, rows=None):
    return [r for r in (runs if rows is None else rows) if r["server"] == server and r["keys"] == keys and r["mode"] == mode
            and r.get("inflight", 64) == inflight]


def cpu_us(r, ticks="server_cpu_ticks"):
    return r.get(ticks, 0) / r["clk_tck"] * 1e6 / max(r["report"]["calls"], 1)


def loads(rs):
    return [(r["report"].get("load_before", r["load_before"]) or 0, r["report"].get("load_after"))
            for r in rs]


e2e = [r for r in runs if r["server"] in ("baseline", "sluice", "sluice-no-persist")
       and r.get("inflight", 64) == 64]
if pick("sluice", 1, "closed"):
    print("\n## end to end (`sluice bench`, median of %d runs each)\n" % len(pick("sluice", 1, "closed")))
    print(quiet_note(loads(e2e), e2e) + "\n")
    print("| server | keys | closed loop calls/s | vs baseline | server CPU µs/call | p50 µs | p99 µs |"
          " open loop rate | open p50 µs | open p99 µs | open p99.9 µs | errors |")
    print("| --- " * 12 + "|")
    for keys in (1, 100000):
        base = med([r["report"]["calls_per_sec"] for r in pick("baseline", keys, "closed")] or [0])
        for server in ("baseline", "sluice", "sluice-no-persist"):
            c, o = pick(server, keys, "closed"), pick(server, keys, "open")
            if not c:
                continue
            rate = med([r["report"]["calls_per_sec"] for r in c])
            lat = lambda rs, p: med([r["report"]["latency_us"][p] for r in rs]) if rs else float("nan")
            print(f"| {server} | {keys:,} | {rate:,.0f} | {rate / base if base else 0:.2f} "
                  f"| {med([cpu_us(r) for r in c]):.1f} | {lat(c, 'p50'):.0f} | {lat(c, 'p99'):.0f} "
                  f"| {o[0]['rate'] if o else '-':,} | {lat(o, 'p50'):.0f} | {lat(o, 'p99'):.0f} "
                  f"| {lat(o, 'p999'):.0f} | {sum(r['report']['errors'] for r in o + c)} |")

h2 = lines("h2load.jsonl")
if h2:
    print("\n## h2load, 1 key (median calls/s; ratio to the baseline)\n")
    print(quiet_note([(r["load_before"], r["load_after"]) for r in h2], h2) + "\n")
    print("| server | runs | calls/s | vs baseline |\n| --- | --- | --- | --- |")
    base = med([r["calls_per_sec"] for r in h2 if r["server"] == "baseline"] or [0])
    for server in ("baseline", "sluice", "sluice-no-persist"):
        rates = [r["calls_per_sec"] for r in h2 if r["server"] == server]
        if rates:
            print(f"| {server} | {len(rates)} | {med(rates):,.0f} | {med(rates) / base if base else 0:.3f} |")

def envoy_table(rows):
    """The Envoy step's table over `rows` (runs of scripts/bench-envoy); each ratio is the median
    over the rounds of a run's figure over Envoy alone's in the same round."""
    print("| Envoy | runs | requests/s | vs alone | p99 µs | p99 vs alone | Envoy CPU µs/request "
          "| vs alone | sluice CPU µs/request | alone ÷ (Envoy + sluice) CPU | RLS calls or RLQS "
          "reported a request |")
    print("| --- " * 11 + "|")
    alone = {r["round"]: r for r in rows if r["server"] == "envoy-plain"}
    # The CPU-bound ratio: Envoy alone's CPU a request over this run's Envoy and sluice CPU.
    cpu_bound = lambda r, a: a["envoy_cpu_us"] / (r["envoy_cpu_us"] + r["sluice_cpu_us"])
    ratio = lambda rs, f: med([f(r, alone[r["round"]]) for r in rs if r["round"] in alone] or [0])
    by = lambda field: lambda r, a: r[field] / a[field] if a[field] else 0
    for name in ("envoy-plain", "envoy-rls", "envoy-rlqs"):
        rs = [r for r in rows if r["server"] == name]
        if not rs:
            continue
        of = lambda field: med([r[field] for r in rs])
        work = {"envoy-rls": "rls_calls", "envoy-rlqs": "rlqs_reported"}.get(name)
        done = med([r[work] / r["requests"] for r in rs]) if work else 0
        print(f"| {name} | {len(rs)} | {of('requests_per_sec'):,.0f} "
              f"| {ratio(rs, by('requests_per_sec')):.3f} | {of('p99_us'):,.0f} "
              f"| {ratio(rs, by('p99_us')):.2f} | {of('envoy_cpu_us'):.1f} "
              f"| {ratio(rs, by('envoy_cpu_us')):.3f} | {of('sluice_cpu_us'):.1f} "
              f"| {ratio(rs, cpu_bound):.3f} | {done:.3f} |")
    # Where each filter's gap comes from: Envoy's own CPU against Envoy alone, and sluice's.
    gaps = []
    for name, filt in (("envoy-rls", "RLS"), ("envoy-rlqs", "RLQS")):
        rs = [r for r in rows if r["server"] == name and r["round"] in alone]
        if rs:
            extra = med([r["envoy_cpu_us"] - alone[r["round"]]["envoy_cpu_us"] for r in rs])
            gaps.append(f"{filt}: Envoy's filter {extra:+.1f} µs of Envoy CPU a request, sluice "
                        f"{med([r['sluice_cpu_us'] for r in rs]):.1f} µs")
    if gaps:
        print("\nAgainst Envoy alone (medians over the rounds): " + "; ".join(gaps) + ".")


envoy = lines("envoy.jsonl")
if envoy:
    checked = [r for r in envoy if "sluice_cpu_ticks" in r]
    print("\n## Envoy with a rate-limit filter (`scripts/bench-envoy`: h2load through one front Envoy")
    print("proxying to a backend Envoy; medians of the runs; each ratio is the median over the rounds")
    print("of the run's figure over Envoy alone's in the same round)\n")
    if not checked:
        print("envoy.jsonl was written by the script before issue 39, which sent every request to a")
        print("direct response (no RLS call at all) and checked nothing: not summarised.")
    else:
        print(quiet_note([], checked) + "\n")
        print(f"{checked[0]['requests']:,} requests a run over {checked[0]['connections']} "
              "HTTP/1.1 connections; every run checked from sluice's /metrics and Envoy's admin "
              "(every request 200, proxied, and an RLS call or an RLQS report for each).\n")
        envoy_table(checked)
        rounds = sorted({r["round"] for r in checked})
        noisy = {r["round"] for r in checked if (other_cores(r) or 0) >= QUIET_OTHER_CORES}
        quiet_rounds = [r for r in checked if r["round"] not in noisy]
        if noisy and quiet_rounds:
            print(f"\nThe rounds in which every run was quiet ({len(rounds) - len(noisy)} of "
                  f"{len(rounds)}: other work under {QUIET_OTHER_CORES} core):\n")
            envoy_table(quiet_rounds)

# The Redis step's own rows (it tags them); rows of an older script carry no step.
redis = [r for r in runs if r.get("step") == "redis"] or [
    r for r in runs if r["server"] in ("baseline", "sluice-redis")
    and r.get("inflight", 64) in (64, 256) and any(x["server"] == "sluice-redis" for x in runs)]
if any(r["server"] == "sluice-redis" for r in redis):
    print("\n## Redis store (`sluice bench`, 1 key, closed loop; Redis on the server's machine;")
    print("sluice-redis-lease: the same rule with `lease: 1000`)\n")
    one_key = [r for r in redis if r["keys"] == 1]
    print(quiet_note(loads(one_key), one_key) + "\n")
    print("| in flight | server | calls/s | vs baseline | server CPU µs/call | Redis CPU µs/call | p99 µs | errors |")
    print("| --- " * 8 + "|")
    for inflight in (64, 256):
        base = med([r["report"]["calls_per_sec"] for r in pick("baseline", 1, "closed", inflight, redis)] or [0])
        for server in ("baseline", "sluice-redis", "sluice-redis-lease"):
            c = pick(server, 1, "closed", inflight, redis)
            if not c:
                continue
            rate = med([r["report"]["calls_per_sec"] for r in c])
            redis_cpu = med([cpu_us(r, "redis_cpu_ticks") for r in c]) if server != "baseline" else 0
            print(f"| {inflight} | {server} | {rate:,.0f} | {rate / base if base else 0:.2f} "
                  f"| {med([cpu_us(r) for r in c]):.1f} | {redis_cpu:.1f} "
                  f"| {med([r['report']['latency_us']['p99'] for r in c]):.0f} "
                  f"| {sum(r['report']['errors'] for r in c)} |")

if os.path.exists(f"{out}/callgrind/results.md"):
    print()
    print(open(f"{out}/callgrind/results.md").read())
