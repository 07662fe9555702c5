//! Driving the load: C workers over M connections, closed loop or paced open loop.
//!
//! Closed loop: each worker sends its next call as soon as the last one is answered; latency is
//! send → answer. Open loop (`--rate R`): a pacer thread stamps each call with its intended send
//! time (i / R after the start) and workers take the stamps in order; latency is intended time →
//! answer, so a slow answer that delays later calls is charged to those calls too (no
//! coordinated omission). The pacer is an OS thread because tokio's timer has a 1 ms grain,
//! which would itself add up to 1 ms to every open-loop latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::{Mutex, mpsc};

use super::load::Load;
use super::machine::{CpuSample, load_average, other_cores};
use super::report::Report;
use super::wire::Connection;

/// When a run stops.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// After this long (calls in flight then are still awaited and counted).
    After(Duration),
    /// After this many calls.
    Calls(u64),
}

/// How one run is driven.
#[derive(Debug, Clone)]
pub struct Drive {
    /// Calls in flight at most (workers).
    pub concurrency: usize,
    /// When to stop.
    pub stop: Stop,
    /// Open loop at this many calls per second; `None` = closed loop.
    pub rate: Option<f64>,
    /// Processes whose CPU time counts as the benchmark's own, not as other work: the server
    /// under test and what it runs on (`--server-pid`).
    pub watched: Vec<u32>,
}

/// Highest latency the histogram tracks (larger values are recorded as this).
const MAX_LATENCY_NS: u64 = 60_000_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("constant bounds are valid")
}

/// One worker's counts.
struct WorkerTally {
    ok: u64,
    over_limit: u64,
    errors: u64,
    latency: Histogram<u64>,
    first_error: Option<String>,
}

impl WorkerTally {
    fn new() -> Self {
        Self {
            ok: 0,
            over_limit: 0,
            errors: 0,
            latency: histogram(),
            first_error: None,
        }
    }

    fn record(&mut self, answer: Result<i32, String>, latency: Duration) {
        match answer {
            Ok(1) => self.ok += 1,
            Ok(2) => self.over_limit += 1,
            other => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(match other {
                        Ok(code) => format!("answer with overall_code {code}"),
                        Err(e) => e,
                    });
                }
            }
        }
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency.saturating_record(ns.max(1));
    }
}

/// What every worker shares.
struct RunState {
    load: Load,
    /// Closed loop: the next call number (also the call budget under `Stop::Calls`).
    next: AtomicU64,
    stop: Stop,
    start: Instant,
}

impl RunState {
    /// Claims the next call in closed loop; `None` once the run is over.
    fn claim(&self) -> Option<u64> {
        match self.stop {
            Stop::After(d) if self.start.elapsed() >= d => None,
            Stop::Calls(n) => Some(self.next.fetch_add(1, Ordering::Relaxed)).filter(|&i| i < n),
            Stop::After(_) => Some(self.next.fetch_add(1, Ordering::Relaxed)),
        }
    }
}

/// Runs the load over `connections` and returns the figures.
pub async fn drive(connections: Vec<Connection>, load: Load, drive: Drive) -> Report {
    let load_before = load_average();
    let cpu_before = CpuSample::take(&drive.watched);
    let start = Instant::now();
    let shared = Arc::new(RunState {
        load,
        next: AtomicU64::new(0),
        stop: drive.stop,
        start,
    });
    let stamps = drive.rate.map(|rate| pace(rate, drive.stop, start));
    let workers: Vec<_> = (0..drive.concurrency.max(1))
        .map(|w| {
            let client = connections[w % connections.len()].clone();
            let shared = shared.clone();
            match &stamps {
                None => tokio::spawn(closed_loop(client, shared)),
                Some(stamps) => tokio::spawn(open_loop(client, shared, stamps.clone())),
            }
        })
        .collect();
    let mut total = WorkerTally::new();
    for worker in workers {
        // A worker never panics (it only counts); a join error would mean it did.
        let Ok(t) = worker.await else { continue };
        total.ok += t.ok;
        total.over_limit += t.over_limit;
        total.errors += t.errors;
        let _ = total.latency.add(&t.latency);
        total.first_error = total.first_error.or(t.first_error);
    }
    Report {
        calls: total.ok + total.over_limit + total.errors,
        ok: total.ok,
        over_limit: total.over_limit,
        errors: total.errors,
        elapsed: start.elapsed(),
        latency: total.latency,
        first_error: total.first_error,
        load: load_before.zip(load_average()),
        other_cores: cpu_before
            .zip(CpuSample::take(&drive.watched))
            .and_then(|(before, after)| other_cores(&before, &after)),
    }
}

async fn call(client: &mut Connection, shared: &RunState, n: u64) -> Result<i32, String> {
    client.call(shared.load.body(n)).await
}

async fn closed_loop(mut client: Connection, shared: Arc<RunState>) -> WorkerTally {
    let mut tally = WorkerTally::new();
    while let Some(n) = shared.claim() {
        let sent = Instant::now();
        let answer = call(&mut client, &shared, n).await;
        tally.record(answer, sent.elapsed());
    }
    tally
}

/// Intended send times with their call numbers, in order, shared by the open-loop workers.
type Stamps = Arc<Mutex<mpsc::UnboundedReceiver<(u64, Instant)>>>;

async fn open_loop(mut client: Connection, shared: Arc<RunState>, stamps: Stamps) -> WorkerTally {
    let mut tally = WorkerTally::new();
    loop {
        let next = stamps.lock().await.recv().await;
        let Some((n, intended)) = next else { break };
        let answer = call(&mut client, &shared, n).await;
        tally.record(answer, intended.elapsed());
    }
    tally
}

/// The pacer sleeps at least this long between batches: waking once per call at tens of
/// thousands of calls/s would cost the load generator's core more than the calls themselves.
/// Calls due meanwhile go out together, still stamped with their own intended times, so this
/// grain (plus the OS timer's slack, ~0.05 ms) is the most the pacing adds to a latency.
const PACER_GRAIN: Duration = Duration::from_micros(100);

/// Starts the pacer thread: call i is due at start + i / rate; each batch sends every call due.
fn pace(rate: f64, stop: Stop, start: Instant) -> Stamps {
    let (send, receive) = mpsc::unbounded_channel();
    let period = 1.0 / rate;
    let due = move |i: u64| -> Option<Instant> {
        let offset = Duration::try_from_secs_f64(i as f64 * period).ok()?;
        let within = match stop {
            Stop::After(d) => offset < d,
            Stop::Calls(n) => i < n,
        };
        if within {
            start.checked_add(offset)
        } else {
            None
        }
    };
    std::thread::spawn(move || {
        let mut i = 0u64;
        while let Some(next) = due(i) {
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).max(PACER_GRAIN));
                continue;
            }
            let now = Instant::now();
            while let Some(intended) = due(i).filter(|&t| t <= now) {
                if send.send((i, intended)).is_err() {
                    return;
                }
                i += 1;
            }
        }
    });
    Arc::new(Mutex::new(receive))
}
