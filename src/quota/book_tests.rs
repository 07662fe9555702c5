//! The quota book on its own: answers, pushes and their order, warm-up, expiry, reloads, caps.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{ManualClock, SECOND};
use crate::rules::bucket::{QuotaAction, QuotaRate};

use super::fleet::PushLog;
use super::share::Share;
use super::*;

/// A stream's pushes, and every push of the test in order (stream number, answers).
#[derive(Clone)]
struct Inbox {
    name: usize,
    all: PushLog,
}

impl Push for Inbox {
    fn push(&self, answers: Vec<Assignment>) -> bool {
        self.all.lock().unwrap().push((self.name, answers));
        true
    }
}

struct Rig {
    clock: ManualClock,
    book: QuotaBook,
    pushes: PushLog,
}

impl Rig {
    /// A book past its warm-up.
    fn new() -> Rig {
        let clock = ManualClock::new(1_000 * SECOND);
        let book = QuotaBook::new(Arc::new(clock.clone()), Arc::new(WholeLimit));
        clock.advance(Duration::from_nanos(WARM_UP));
        book.tick();
        Rig {
            clock,
            book,
            pushes: Arc::default(),
        }
    }

    fn open(&self, name: usize) -> StreamId {
        let inbox = Inbox {
            name,
            all: self.pushes.clone(),
        };
        self.book.open("edge", Arc::new(inbox))
    }

    fn taken(&self) -> Vec<(usize, Vec<Assignment>)> {
        std::mem::take(&mut *self.pushes.lock().unwrap())
    }

    fn after(&self, seconds: u64) {
        for _ in 0..seconds {
            self.clock.advance(Duration::from_secs(1));
            self.book.tick();
        }
    }
}

fn id(name: &str) -> BucketId {
    BucketId::from([("name".to_string(), name.to_string())])
}

fn usage(name: &str, elapsed_seconds: u64, allowed: u64, denied: u64) -> Usage {
    Usage {
        bucket: id(name),
        elapsed: elapsed_seconds * SECOND,
        allowed,
        denied,
    }
}

/// 10 a second, burst 20: fill interval 10 s, 100 tokens per fill.
fn limited() -> QuotaAction {
    QuotaAction::Limited {
        rule: "edge.name".into(),
        rate: QuotaRate {
            requests: 10,
            window: SECOND,
            burst: 20,
        },
        shadow: false,
    }
}

fn tb(max: u32, tpf: u32, interval: u32) -> Strategy {
    Strategy::TokenBucket {
        max_tokens: NonZeroU32::new(max).unwrap(),
        tokens_per_fill: NonZeroU32::new(tpf).unwrap(),
        fill_interval_seconds: NonZeroU32::new(interval).unwrap(),
    }
}

fn strategy_of(answer: &Assignment) -> Option<Strategy> {
    match answer {
        Assignment::Assign { strategy, .. } => Some(*strategy),
        Assignment::Abandon { .. } => None,
    }
}

fn answer(rig: &Rig, stream: StreamId, u: Usage, action: QuotaAction) -> Option<Strategy> {
    let reported = rig.book.report(stream, &[u], &|_| action.clone()).unwrap();
    reported.answers.first().and_then(strategy_of)
}

#[test]
fn a_lone_stream_gets_the_whole_limit() {
    let rig = Rig::new();
    let a = rig.open(0);
    assert_eq!(
        answer(&rig, a, usage("x", 0, 1, 0), limited()),
        Some(tb(20, 100, 10))
    );
    assert_eq!(rig.book.streams(), 1);
    assert_eq!(rig.book.buckets(), 1);
}

#[test]
fn a_second_stream_shrinks_the_first_before_it_is_answered() {
    let rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    let got = answer(&rig, b, usage("x", 0, 1, 0), limited());
    let pushes = rig.taken();
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].0, 0);
    assert_eq!(strategy_of(&pushes[0].1[0]), Some(tb(10, 50, 10)));
    assert_eq!(got, Some(tb(10, 50, 10)));
}

#[test]
fn a_stream_asking_little_gets_its_ask_with_headroom() {
    let rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    answer(&rig, b, usage("x", 0, 1, 0), limited());
    // a offers 1/s: 10 per 10 s interval, with headroom 12.5 of the 100 tokens.
    let small = answer(&rig, a, usage("x", 5, 5, 0), limited()).unwrap();
    assert_eq!(Share::of(Some(small), 10).tokens, 13);
    rig.taken();
    // b is pushed the rest once the tick sees a's answer taken.
    rig.after(1);
    let pushes = rig.taken();
    assert_eq!(
        strategy_of(&pushes[0].1[0]).map(|s| Share::of(Some(s), 10).tokens),
        Some(87)
    );
}

#[test]
fn a_small_move_re_sends_the_same_strategy() {
    let rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    answer(&rig, b, usage("x", 0, 1, 0), limited());
    let first = answer(&rig, a, usage("x", 5, 20, 0), limited());
    rig.after(1);
    let again = answer(&rig, a, usage("x", 5, 21, 0), limited());
    assert_eq!(first, again);
}

#[test]
fn during_the_warm_up_enforced_limits_get_no_answer() {
    let clock = ManualClock::new(1_000 * SECOND);
    let book = QuotaBook::new(Arc::new(clock.clone()), Arc::new(WholeLimit));
    let pushes: PushLog = Arc::default();
    let a = book.open(
        "edge",
        Arc::new(Inbox {
            name: 0,
            all: pushes.clone(),
        }),
    );
    let usages = [usage("x", 5, 3, 0), usage("open", 5, 3, 0)];
    let resolve = |b: &BucketId| {
        if b == &id("x") {
            limited()
        } else {
            QuotaAction::NoRule
        }
    };
    let reported = book.report(a, &usages, &resolve).unwrap();
    assert_eq!(reported.answers.len(), 1);
    assert_eq!(strategy_of(&reported.answers[0]), Some(Strategy::AllowAll));
    clock.advance(Duration::from_nanos(WARM_UP - SECOND));
    book.tick();
    assert!(pushes.lock().unwrap().is_empty());
    clock.advance(Duration::from_secs(1));
    book.tick();
    let pushed = pushes.lock().unwrap().clone();
    assert_eq!(strategy_of(&pushed[0].1[0]), Some(tb(20, 100, 10)));
}

#[test]
fn blanket_rules_and_tallies() {
    let rig = Rig::new();
    let a = rig.open(0);
    let rule: Arc<str> = "edge.name".into();
    let deny = QuotaAction::Deny {
        rule: rule.clone(),
        shadow: false,
    };
    assert_eq!(
        answer(&rig, a, usage("d", 0, 1, 0), deny),
        Some(Strategy::DenyAll)
    );
    let unlimited = QuotaAction::Unlimited { rule: rule.clone() };
    assert_eq!(
        answer(&rig, a, usage("u", 0, 1, 0), unlimited),
        Some(Strategy::AllowAll)
    );
    assert_eq!(
        answer(&rig, a, usage("n", 0, 1, 0), QuotaAction::NoRule),
        Some(Strategy::AllowAll)
    );
    let QuotaAction::Limited { rate, .. } = limited() else {
        unreachable!()
    };
    let shadow = QuotaAction::Limited {
        rule: rule.clone(),
        rate,
        shadow: true,
    };
    let reported = rig
        .book
        .report(a, &[usage("s", 0, 50, 0)], &|_| shadow.clone())
        .unwrap();
    assert_eq!(strategy_of(&reported.answers[0]), Some(Strategy::AllowAll));
    // The whole limit's burst is 20: 30 of the 50 would have been refused.
    let want = Tally {
        rule: Some(rule),
        allowed: 50,
        denied: 0,
        shadow_refused: 30,
    };
    assert_eq!(reported.tallies, vec![want]);
}

#[test]
fn a_closed_stream_gives_its_share_back_once_it_has_expired() {
    let rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    answer(&rig, b, usage("x", 0, 1, 0), limited());
    rig.taken();
    rig.book.close(b);
    assert_eq!(rig.book.streams(), 1);
    // Two reports of a within b's TTL plus a second (HELD_FOR, 11 s).
    for _ in 0..(HELD_FOR / SECOND - 1) / 5 {
        rig.after(5);
        // a keeps reporting more than the limit; b's Envoy may still hold its half.
        let kept = answer(&rig, a, usage("x", 5, 100, 0), limited());
        assert_eq!(kept, Some(tb(10, 50, 10)));
    }
    rig.after(1);
    let pushes = rig.taken();
    assert_eq!(strategy_of(&pushes[0].1[0]), Some(tb(20, 100, 10)));
}

#[test]
fn a_report_past_the_bucket_cap_is_refused_whole() {
    let rig = Rig::new();
    let a = rig.open(0);
    let many: Vec<Usage> = (0..=MAX_BUCKETS_PER_STREAM)
        .map(|i| usage(&i.to_string(), 0, 1, 0))
        .collect();
    let refused = rig.book.report(a, &many, &|_| QuotaAction::NoRule);
    assert_eq!(
        refused,
        Err(QuotaError::TooManyBuckets {
            limit: MAX_BUCKETS_PER_STREAM
        })
    );
    assert_eq!(rig.book.buckets(), 0);
    assert!(
        rig.book
            .report(a, &many[1..], &|_| QuotaAction::NoRule)
            .is_ok()
    );
    assert!(
        rig.book
            .report(StreamId(99), &many[..1], &|_| QuotaAction::NoRule)
            .is_err()
    );
}

#[test]
fn a_reload_pushes_new_assignments_at_once() {
    let rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    answer(&rig, b, usage("x", 0, 1, 0), limited());
    rig.taken();
    let halved = QuotaAction::Limited {
        rule: "edge.name".into(),
        rate: QuotaRate {
            requests: 5,
            window: SECOND,
            burst: 10,
        },
        shadow: false,
    };
    rig.book.refresh(&|_, _| halved.clone());
    let pushes = rig.taken();
    assert_eq!(pushes.len(), 2);
    // 5/s: a 20 s interval holds 100 tokens.
    assert!(
        pushes
            .iter()
            .all(|(_, p)| strategy_of(&p[0]) == Some(tb(5, 50, 20)))
    );
    rig.book.refresh(&|_, _| QuotaAction::NoRule);
    let pushes = rig.taken();
    assert!(
        pushes
            .iter()
            .all(|(_, p)| strategy_of(&p[0]) == Some(Strategy::AllowAll))
    );
}

#[test]
fn a_bucket_nobody_reports_is_forgotten_and_abandoned() {
    let rig = Rig::new();
    let a = rig.open(0);
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    rig.after(FORGET_AFTER / SECOND + 1);
    let pushes = rig.taken();
    assert_eq!(
        pushes.last().map(|(_, p)| p[0].clone()),
        Some(Assignment::Abandon { bucket: id("x") })
    );
    assert_eq!(rig.book.buckets(), 0);
}

#[test]
fn the_snapshot_shows_each_stream_share() {
    let rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    answer(&rig, a, usage("x", 0, 1, 0), limited());
    answer(&rig, b, usage("x", 5, 40, 10), limited());
    let views = rig.book.snapshot();
    assert_eq!(views.len(), 1);
    let view = &views[0];
    assert_eq!(view.rule.as_deref(), Some("edge.name"));
    let rates: f64 = view.holders.iter().map(|h| h.rate_per_second).sum();
    assert!(rates <= 10.0 && rates > 9.0, "{rates}");
    assert_eq!(view.holders[1].demand_per_second, Some(10.0));
}
