//! Many modelled Envoys ([`EnvoyModel`]) sharing one limit through one [`Book`] on a manual
//! clock, stepped in fixed slices: what the bound's property test, the fairness tests and
//! `sluice simulate --rlqs` run. It checks the book's invariant as it goes and records, per
//! step, the requests admitted and the tokens assignments added at once (the bound's slack).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::{Clock, ManualClock, Nanos, SECOND};
use crate::rlqs::assign::{BucketId, Outbox, Outgoing, RlqsError, Strategy, StreamId, Usage};
use crate::rlqs::book::{Book, Portions, Resolve};
use crate::rlqs::limits::{MAX_BUCKETS_PER_STREAM, REPORT_INTERVAL};
use crate::rlqs::view::rate_of;
use crate::rules::bucket::{BucketAction, SharedRate};

use super::envoy_model::EnvoyModel;

/// How a fleet is set up.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The limit every Envoy's bucket reaches (enforced, not shadow).
    pub rate: SharedRate,
    /// The Envoys' `no_assignment_behavior`.
    pub fallback: Strategy,
    /// The time slice (divides a second).
    pub step: Nanos,
    /// The clock's start.
    pub start: Nanos,
    /// Check the book's own view after every single push (costly with many Envoys), besides
    /// every Envoy's assignments after every operation.
    pub check_pushes: bool,
    /// Up to how many holders a report re-splits its bucket at once (0: only its first
    /// report, so every other report takes the path of large fleets).
    pub split_at_once: usize,
}

/// One modelled Envoy of a fleet.
#[derive(Debug, Clone)]
pub struct Member {
    envoy: EnvoyModel,
    stream: Option<StreamId>,
    /// Whether it ever opened a stream: the first opens with the first bucket, a lost one is
    /// reopened at the next report tick.
    opened: bool,
    demand: f64,
    carry: f64,
    extra: u64,
    alive: bool,
    /// Requests it admitted so far.
    pub admitted: u64,
    /// Requests it was offered so far.
    pub offered: u64,
}

impl Member {
    /// Whether it is still running.
    pub fn alive(&self) -> bool {
        self.alive
    }
}

/// One time slice: requests admitted by every Envoy, tokens added at once by assignments.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepRecord {
    /// Requests admitted in the slice.
    pub admitted: u64,
    /// Tokens assignments added at once in the slice (fresh buckets, fill-ratio growth).
    pub jumps: f64,
    /// What a previous process's assignments, still live in the slice, can admit in all.
    pub previous: f64,
}

/// Everything the book sent, in order: (stream number, what went out).
pub(crate) type SentLog = Arc<Mutex<Vec<(usize, Outgoing)>>>;

/// A stream's outbox in the fleet: logged in order; the fleet applies each to the Envoy after
/// each call to the book.
pub(crate) struct Mailbox {
    pub member: usize,
    pub log: SentLog,
}

impl Outbox for Mailbox {
    fn send(&self, out: Outgoing) -> bool {
        (self.log.lock())
            .map(|mut log| log.push((self.member, out)))
            .is_ok()
    }

    fn end(&self, _: RlqsError) {}

    fn is_gone(&self) -> bool {
        false
    }
}

/// Every bucket is the fleet's one limit.
struct Fixed(BucketAction);

impl Resolve for Fixed {
    fn action(&self, _: &str, _: &BucketId) -> BucketAction {
        self.0.clone()
    }
}

/// Up to this many Envoys the invariant is checked after every report; a larger fleet is
/// checked after every step's reports and every tick instead: the check walks every Envoy, and
/// after each of thousands of reports a second it would be most of the run (and would evict the
/// book from the caches between the reports it times).
const CHECKED_EACH_REPORT: usize = 1_000;

/// The fleet.
pub struct Fleet {
    config: FleetConfig,
    clock: ManualClock,
    book: Book,
    generation: u64,
    bucket: BucketId,
    members: Vec<Member>,
    next_stream: u64,
    log: SentLog,
    records: Vec<StepRecord>,
    violations: Vec<String>,
    reports: u64,
    report_time: Duration,
    /// What the previous processes' assignments can still admit in all, and until when they
    /// may be live.
    previous: (f64, Nanos),
}

impl Fleet {
    /// A fleet with no Envoys; the book starts (and warms up) at `config.start`.
    pub fn new(config: FleetConfig) -> Self {
        let clock = ManualClock::new(config.start);
        let book = book(&clock, &config);
        Fleet {
            config,
            clock,
            book,
            generation: 0,
            bucket: BucketId::from([("name".to_string(), "shared".to_string())]),
            members: Vec::new(),
            next_stream: 1,
            log: SentLog::default(),
            records: Vec::new(),
            violations: Vec::new(),
            reports: 0,
            report_time: Duration::ZERO,
            previous: (0.0, 0),
        }
    }

    /// The time now.
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Every Envoy, by the number [`Fleet::join`] gave it.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The record of every step so far.
    pub fn records(&self) -> &[StepRecord] {
        &self.records
    }

    /// Every breach of the invariant seen (empty when the book kept it).
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Report calls made and the wall-clock time the book took to answer them.
    pub fn report_load(&self) -> (u64, Duration) {
        (self.reports, self.report_time)
    }

    /// A new Envoy offered `demand` requests per second; its first request makes its bucket.
    pub fn join(&mut self, demand: f64) -> usize {
        self.join_every(demand, REPORT_INTERVAL)
    }

    /// As [`Fleet::join`], an Envoy reporting every `every`.
    pub fn join_every(&mut self, demand: f64, every: Nanos) -> usize {
        self.members.push(Member {
            envoy: EnvoyModel::new(self.config.fallback).reporting_every(every),
            stream: None,
            opened: false,
            demand,
            carry: 0.0,
            extra: 0,
            alive: true,
            admitted: 0,
            offered: 0,
        });
        self.members.len() - 1
    }

    /// Stops an Envoy: its stream ends and its assignments go with it.
    pub fn leave(&mut self, member: usize) {
        let Some(m) = self.members.get_mut(member).filter(|m| m.alive) else {
            return;
        };
        m.alive = false;
        if let Some(stream) = m.stream.take() {
            self.book.close(stream);
        }
        self.flush(self.now());
    }

    /// Changes an Envoy's demand.
    #[cfg(test)]
    pub fn set_demand(&mut self, member: usize, demand: f64) {
        if let Some(m) = self.members.get_mut(member) {
            m.demand = demand;
        }
    }

    /// `count` extra requests for an Envoy in the next step.
    #[cfg(test)]
    pub fn burst(&mut self, member: usize, count: u64) {
        if let Some(m) = self.members.get_mut(member) {
            m.extra += count;
        }
    }

    /// The server restarts: a new book (warming up), every stream lost; the Envoys keep their
    /// assignments and reconnect at their next report tick.
    #[cfg(test)]
    pub fn restart(&mut self) {
        let now = self.now();
        // Each old assignment may still spend its bucket and its refill until it expires (and
        // a second: Envoy counts whole seconds).
        let (mut slack, mut until) = self.previous;
        for m in self.members.iter().filter(|m| m.alive) {
            m.envoy.each_held(now, |strategy, _, expires| {
                if let Strategy::TokenBucket { max_tokens, .. } = strategy {
                    let live_for = (expires + SECOND - now) as f64 / SECOND as f64;
                    slack += max_tokens.get() as f64 + rate_of(Some(strategy)) * live_for;
                    until = until.max(expires + SECOND);
                }
            });
        }
        self.previous = (slack, until);
        self.generation += 1;
        self.book = book(&self.clock, &self.config);
        self.log.lock().map(|mut l| l.clear()).ok();
        for m in &mut self.members {
            m.stream = None;
        }
    }

    /// The rate (requests per second) of the token bucket an Envoy enforces now.
    #[cfg(test)]
    pub fn assigned_rate(&self, member: usize) -> f64 {
        let now = self.now();
        self.members.get(member).map_or(0.0, |m| {
            let held = m.envoy.held(now);
            rate_of(held.first().map(|(_, s, _)| *s))
        })
    }

    /// Steps until the clock reads at least `until`.
    pub fn run_until(&mut self, until: Nanos) {
        while self.now() < until {
            self.step();
            self.clock.set(self.now() + self.config.step);
        }
    }

    fn step(&mut self) {
        let now = self.now();
        let mut jumps = 0.0;
        if now >= self.previous.1 {
            self.previous = (0.0, 0);
        }
        let previous = self.previous.0;
        if (now - self.config.start).is_multiple_of(SECOND) {
            self.book.tick();
            jumps += self.flush(now);
            self.check_all(now, "tick");
        }
        for i in 0..self.members.len() {
            let m = &self.members[i];
            if m.alive && m.envoy.due(now) {
                if m.stream.is_none() {
                    let stream = self.open(i);
                    self.members[i].stream = Some(stream);
                    self.members[i].opened = true;
                }
                let usages = self.members[i].envoy.report(now);
                jumps += self.send(i, &usages, now);
            }
        }
        let mut admitted = 0;
        for i in 0..self.members.len() {
            let (a, j) = self.requests(i, now);
            admitted += a;
            jumps += j;
        }
        if self.members.len() > CHECKED_EACH_REPORT {
            self.check_all(now, "a step's reports");
        }
        self.records.push(StepRecord {
            admitted,
            jumps,
            previous,
        });
    }

    /// Opens a stream for member `member`.
    fn open(&mut self, member: usize) -> StreamId {
        let id = StreamId(self.next_stream);
        self.next_stream += 1;
        let mailbox = Mailbox {
            member,
            log: self.log.clone(),
        };
        self.book.open(id, "edge".into(), None, Box::new(mailbox));
        id
    }

    /// One step's requests of an Envoy: the first may make its bucket, whose immediate report
    /// is answered before the rest are decided.
    fn requests(&mut self, i: usize, now: Nanos) -> (u64, f64) {
        let step = self.config.step as f64 / SECOND as f64;
        let bucket = self.bucket.clone();
        let m = &mut self.members[i];
        if !m.alive {
            return (0, 0.0);
        }
        m.carry += m.demand * step;
        let count = m.carry.floor() as u64 + std::mem::take(&mut m.extra);
        m.carry -= m.carry.floor();
        if count == 0 {
            return (0, 0.0);
        }
        m.offered += count;
        let mut admitted = m.envoy.request(&bucket, 1, now);
        let fresh = m.envoy.immediate(now);
        let mut jumps = 0.0;
        if !fresh.is_empty() && !m.opened {
            m.opened = true;
            let stream = self.open(i);
            self.members[i].stream = Some(stream);
        }
        if !fresh.is_empty() && self.members[i].stream.is_some() {
            jumps += self.send(i, &fresh, now);
        }
        let m = &mut self.members[i];
        admitted += m.envoy.request(&bucket, count - 1, now);
        m.admitted += admitted;
        (admitted, jumps)
    }

    /// Sends a report, and applies what it caused in order: the pushes, then its answers.
    fn send(&mut self, i: usize, usages: &[Usage], now: Nanos) -> f64 {
        let Some(stream) = self.members[i].stream else {
            return 0.0;
        };
        let started = Instant::now();
        self.book.report(stream, usages);
        self.report_time += started.elapsed();
        self.reports += 1;
        let jumps = self.flush(now);
        if self.members.len() <= CHECKED_EACH_REPORT {
            self.check_all(now, "report");
        }
        jumps
    }

    /// Applies what the book sent, in order, checking the book's own view after each push.
    fn flush(&mut self, now: Nanos) -> f64 {
        let sent: Vec<_> = self
            .log
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let mut jumps = 0.0;
        for (member, out) in sent {
            let pushed = out.reported.is_none();
            if let Some(m) = self.members.get_mut(member).filter(|m| m.alive) {
                jumps += m.envoy.apply(&out.answers, self.generation, now);
            }
            if pushed && self.config.check_pushes {
                self.check(now, Some(self.generation), "push");
            }
        }
        jumps
    }

    /// The current server's assignments against the limit (a previous process's may still be
    /// live after a restart; the windows count them as slack).
    fn check_all(&mut self, now: Nanos, after: &str) {
        self.check(now, Some(self.generation), after);
    }

    /// Sums the token buckets Envoys enforce (only those the current server sent, with
    /// `generation`) against the limit; `ALLOW_ALL` counts as over.
    fn check(&mut self, now: Nanos, generation: Option<u64>, after: &str) {
        let (mut rate, mut burst, mut open) = (0.0, 0u64, false);
        for m in self.members.iter().filter(|m| m.alive) {
            m.envoy.each_held(now, |strategy, g, _| {
                if generation.is_some_and(|want| want != g) {
                    return;
                }
                match strategy {
                    Strategy::AllowAll => open = true,
                    Strategy::DenyAll => {}
                    Strategy::TokenBucket { max_tokens, .. } => {
                        rate += rate_of(Some(strategy));
                        burst += max_tokens.get() as u64;
                    }
                }
            });
        }
        let limit = &self.config.rate;
        let per_second = limit.per_second();
        if open || rate > per_second * (1.0 + 1e-9) || burst > limit.burst {
            let at = (now - self.config.start) as f64 / SECOND as f64;
            self.violations.push(format!(
                "at {at:.1}s after {after}: rate {rate:.3}/s of {per_second:.3}, burst {burst} of {}{}",
                limit.burst,
                if open { ", ALLOW_ALL held" } else { "" }
            ));
        }
    }

    /// For every window of `steps` consecutive steps: requests admitted, and the bound
    /// `burst + rate × span + jumps + previous` (span: from the window's first step to its last;
    /// previous: the most a previous process's live assignments can admit, if any overlap it).
    pub fn windows(&self, steps: usize) -> Vec<(u64, f64)> {
        let limit = &self.config.rate;
        let per_second = limit.per_second();
        let span = steps.saturating_sub(1) as f64 * self.config.step as f64 / SECOND as f64;
        let plain = limit.burst as f64 + per_second * span;
        self.records
            .windows(steps.max(1))
            .map(|w| {
                let admitted = w.iter().map(|r| r.admitted).sum();
                let jumps: f64 = w.iter().map(|r| r.jumps).sum();
                let previous = w.iter().map(|r| r.previous).fold(0.0, f64::max);
                (admitted, plain + jumps + previous)
            })
            .collect()
    }
}

/// A book past nothing yet, alone, whose every bucket is the limit of `config`.
fn book(clock: &ManualClock, config: &FleetConfig) -> Book {
    let action = BucketAction::Limited {
        rule: "edge.shared".into(),
        rate: config.rate,
        shadow: false,
    };
    let rules = Arc::new(Fixed(action));
    Book::new(
        Arc::new(clock.clone()),
        rules,
        Portions::Whole,
        MAX_BUCKETS_PER_STREAM,
    )
    .with_split_at_once(config.split_at_once)
}
