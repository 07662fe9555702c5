//! Other work on the machine during a run: its CPU time less this load generator's and that of
//! the processes given with `--server-pid`, read from `/proc` (Linux). The binary's one reader
//! of `/proc` (CPU ticks, and the load average a run reports beside them): the scripts use it
//! through `sluice bench --count-cpu` and `--cpu-ticks`.
//!
//! The load average cannot tell: it counts the load generator's own busy threads and a local
//! server under test, so a run that keeps one core busy reads "not quiet" on any small machine.

/// Other work, in cores on average over a run, under which the run counts as quiet.
pub const QUIET_OTHER_CORES: f64 = 0.1;

/// The CPU counters of the machine and of the benchmark's own processes at one instant, in
/// clock ticks (`/proc/stat` and `/proc/PID/stat` count in the same unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    /// User, nice, system and steal time of all CPUs.
    busy: u64,
    /// Every state of all CPUs (idle and I/O wait included).
    total: u64,
    /// CPUs in `/proc/stat`.
    cpus: u32,
    /// User and system time of this process and of the watched ones.
    ours: u64,
}

impl CpuSample {
    /// Reads the counters now; `None` where `/proc` cannot tell (another system, or a watched
    /// process that has exited).
    pub fn take(watched: &[u32]) -> Option<Self> {
        let (busy, total, cpus, _steal) =
            machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let mut ours = process_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        let me = std::process::id();
        for &pid in watched.iter().filter(|&&pid| pid != me) {
            ours += process_ticks(&read_process(pid)?)?;
        }
        Some(Self {
            busy,
            total,
            cpus,
            ours,
        })
    }
}

/// `/proc/PID/stat` of `pid`, if it exists.
pub fn read_process(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// The cores' worth of other work on average between two samples, never negative: a sample's
/// clock ticks are rounded, so our own ticks can pass the machine's on a quiet machine, and the
/// difference saturates at zero.
pub fn other_cores(before: &CpuSample, after: &CpuSample) -> Option<f64> {
    let total = after.total.checked_sub(before.total).filter(|&t| t > 0)?;
    let busy = after.busy.checked_sub(before.busy)?;
    let ours = after.ours.checked_sub(before.ours)?;
    // Ticks of all CPUs over the run, divided by the CPUs: ticks of one core over the run.
    let one_core = total as f64 / f64::from(after.cpus.max(1));
    Some(busy.saturating_sub(ours) as f64 / one_core)
}

/// The 1-minute load average (`/proc/loadavg`), where the system has one.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Busy and steal ticks of all CPUs now, from `/proc/stat` (what `sluice bench --count-cpu`
/// records around a command).
pub fn busy_and_steal_now() -> Option<(u64, u64)> {
    let (busy, _total, _cpus, steal) = machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some((busy, steal))
}

/// User plus system ticks `pid` has used so far (`sluice bench --cpu-ticks`).
pub fn pid_ticks(pid: u32) -> Option<u64> {
    process_ticks(&read_process(pid)?)
}

/// User plus system ticks of this process's waited-for children (their descendants included).
pub fn children_ticks_now() -> Option<u64> {
    children_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// Busy, total and steal ticks of all CPUs, and how many CPUs, from `/proc/stat`.
fn machine_ticks(stat: &str) -> Option<(u64, u64, u32, u64)> {
    let mut lines = stat.lines();
    let all = lines.next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = all
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal (guest time is already in user and nice):
    // busy as scripts/bench-counted counts it.
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = fields[..] else {
        return None;
    };
    let cpus = lines
        .filter(|line| {
            line.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    let busy = user + nice + system + steal;
    let total = busy + idle + iowait + irq + softirq;
    Some((busy, total, u32::try_from(cpus).ok()?, steal))
}

/// User plus system ticks of one process, from its `/proc/PID/stat`.
fn process_ticks(stat: &str) -> Option<u64> {
    // utime and stime are fields 14 and 15.
    pair_from(stat, 14)
}

/// User plus system ticks of a process's waited-for children, from its `/proc/PID/stat`.
fn children_ticks(stat: &str) -> Option<u64> {
    // cutime and cstime are fields 16 and 17.
    pair_from(stat, 16)
}

/// The sum of fields `field` and `field + 1` (numbered from 1, as proc(5) does) of a
/// `/proc/PID/stat` line.
fn pair_from(stat: &str, field: usize) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces and parentheses itself:
    // the fields after it start past the last ')', with field 3.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(field.checked_sub(3)?);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 40 800 10 3 2 7 0 0\n\
                        cpu0 50 2 20 400 5 1 1 3 0 0\n\
                        cpu1 50 3 20 400 5 2 1 4 0 0\n\
                        intr 12345\nctxt 678\n";

    #[test]
    fn machine_ticks_count_busy_states_and_cpus() {
        assert_eq!(machine_ticks(STAT), Some((152, 967, 2, 7)));
        assert_eq!(machine_ticks("intr 1\n"), None);
        assert_eq!(machine_ticks("cpu  1 2 3\n"), None, "too few fields");
    }

    #[test]
    fn process_ticks_skip_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(process_ticks(stat), Some(325));
        assert_eq!(children_ticks(stat), Some(0));
        let waited = "7 (sh) S 1 7 7 0 -1 0 0 0 0 0 1 2 30 12 20 0 1 0";
        assert_eq!(children_ticks(waited), Some(42));
        assert_eq!(process_ticks("4242 (short) S 1"), None);
    }

    #[test]
    fn other_work_is_the_machine_less_our_own() {
        let before = CpuSample {
            busy: 1_000,
            total: 10_000,
            cpus: 2,
            ours: 300,
        };
        // 2 CPUs over 500 ticks each: 1,000 ticks in all; 700 busy, 600 of them ours.
        let after = CpuSample {
            busy: 1_700,
            total: 11_000,
            cpus: 2,
            ours: 900,
        };
        let cores = other_cores(&before, &after).unwrap();
        assert!((cores - 0.2).abs() < 1e-9, "{cores}");
        // Rounding can put our own ticks above the machine's: no negative work.
        let quiet = CpuSample {
            ours: 1_000,
            ..after
        };
        assert_eq!(other_cores(&before, &quiet), Some(0.0));
        assert_eq!(other_cores(&after, &before), None, "time runs forward");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn samples_read_this_machine() {
        let before = CpuSample::take(&[std::process::id()]).expect("/proc is readable");
        // The counters move once a clock tick (10 ms): read until they have.
        let after = (0..100_000)
            .filter_map(|_| CpuSample::take(&[]))
            .find(|after| after.total > before.total)
            .expect("the machine's clock ticks");
        assert!(after.cpus >= 1);
        assert!(other_cores(&before, &after).is_some_and(|c| c >= 0.0));
        assert_eq!(CpuSample::take(&[u32::MAX]), None, "no such process");
    }
}
