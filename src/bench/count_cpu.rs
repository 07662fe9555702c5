//! `sluice bench --count-cpu OUT.json -- COMMAND` and `--cpu-ticks PID`: the one `/proc` CPU
//! accounting the benchmark scripts use (`machine.rs` reads the counters).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::BenchError;
use super::machine;

/// What the machine did while a command ran, in clock ticks (the JSON scripts/bench records as
/// `machine`; scripts/bench_machine.py reads it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MachineCounts {
    /// Seconds the command ran.
    pub wall_s: f64,
    /// User, nice, system and steal ticks of all CPUs meanwhile (interrupt time left out, as a
    /// process's own figures leave it out).
    pub busy_ticks: u64,
    /// Ticks the hypervisor gave to other guests meanwhile.
    pub steal_ticks: u64,
    /// The command's own user and system ticks, its children included.
    pub load_ticks: u64,
}

impl MachineCounts {
    /// One JSON object with scripts/bench-counted's keys.
    pub fn json(&self) -> String {
        serde_json::json!({
            "wall_s": (self.wall_s * 1000.0).round() / 1000.0,
            "busy_ticks": self.busy_ticks,
            "steal_ticks": self.steal_ticks,
            "load_ticks": self.load_ticks,
        })
        .to_string()
    }
}

/// Runs `command` (standard streams passed through), writes what the machine did meanwhile to
/// `out`, and returns the command's exit code (1 if a signal ended it).
pub fn count(out: &Path, command: &[String]) -> Result<i32, BenchError> {
    let unreadable = || std::io::Error::other("/proc/stat or /proc/self/stat cannot be read");
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("--count-cpu needs a command after `--`"))?;
    let (busy0, steal0) = machine::busy_and_steal_now().ok_or_else(unreadable)?;
    let children0 = machine::children_ticks_now().ok_or_else(unreadable)?;
    let start = Instant::now();
    let status = Command::new(program).args(args).status()?;
    let wall_s = start.elapsed().as_secs_f64();
    let (busy1, steal1) = machine::busy_and_steal_now().ok_or_else(unreadable)?;
    let children1 = machine::children_ticks_now().ok_or_else(unreadable)?;
    let counted = MachineCounts {
        wall_s,
        busy_ticks: busy1.saturating_sub(busy0),
        steal_ticks: steal1.saturating_sub(steal0),
        load_ticks: children1.saturating_sub(children0),
    };
    std::fs::write(out, counted.json())?;
    Ok(status.code().unwrap_or(1))
}

/// The user plus system ticks `pid` has used so far.
pub fn cpu_ticks(pid: u32) -> Result<u64, BenchError> {
    machine::pid_ticks(pid).ok_or(BenchError::CpuTicksPid(pid))
}
