//! The book on its own, stepped by hand on a manual clock: answers, pushes and their order,
//! warm-up, expiry, reloads, caps, a reconnecting Envoy's shares, replicas' portions, pages.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::share::Share;
use super::*;
use crate::clock::{ManualClock, SECOND};
use crate::rlqs::assign::{Assignment, Strategy, Tally};
use crate::rlqs::limits::{
    FLOOR_USABLE, FORGET_AFTER, HELD_FOR, MAX_BUCKETS_PER_STREAM, PORTION_FRESH, WARM_UP,
};
use crate::rules::bucket::SharedRate;

/// Everything the book sent, in order: (stream number, what went out).
type Sent = Arc<Mutex<Vec<(usize, Outgoing)>>>;

/// A stream's outbox in the tests: every message logged in order; one that has "gone" refuses.
struct Inbox {
    name: usize,
    all: Sent,
    ended: Arc<Mutex<Vec<(usize, RlqsError)>>>,
}

impl Outbox for Inbox {
    fn send(&self, out: Outgoing) -> bool {
        self.all.lock().unwrap().push((self.name, out));
        true
    }

    fn end(&self, error: RlqsError) {
        self.ended.lock().unwrap().push((self.name, error));
    }

    fn is_gone(&self) -> bool {
        false
    }
}

/// The rules: an action per bucket name, `limited()` unless set.
#[derive(Default)]
struct Actions(Mutex<HashMap<String, BucketAction>>);

impl Resolve for Actions {
    fn action(&self, _: &str, id: &BucketId) -> BucketAction {
        let name = id.get("name").cloned().unwrap_or_default();
        (self.0.lock().unwrap().get(&name).cloned()).unwrap_or_else(limited)
    }
}

struct Rig {
    clock: ManualClock,
    book: Book,
    actions: Arc<Actions>,
    sent: Sent,
    ended: Arc<Mutex<Vec<(usize, RlqsError)>>>,
}

impl Rig {
    /// A book alone, past its warm-up.
    fn new() -> Rig {
        Rig::with(Portions::Whole, true)
    }

    fn with(portions: Portions, warmed: bool) -> Rig {
        let clock = ManualClock::new(1_000 * SECOND);
        let actions = Arc::new(Actions::default());
        let clock_arc = Arc::new(clock.clone());
        let mut book = Book::new(clock_arc, actions.clone(), portions, MAX_BUCKETS_PER_STREAM);
        if warmed {
            clock.advance(Duration::from_nanos(WARM_UP));
            book.tick();
        }
        Rig {
            clock,
            book,
            actions,
            sent: Arc::default(),
            ended: Arc::default(),
        }
    }

    /// Opens stream `name` from the address `peer` (one number of 127.0.0.x).
    fn open_from(&mut self, name: usize, peer: u8) -> StreamId {
        let inbox = Inbox {
            name,
            all: self.sent.clone(),
            ended: self.ended.clone(),
        };
        let id = StreamId(name as u64 + 1);
        let peer = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, peer)));
        self.book.open(id, "edge".into(), peer, Box::new(inbox));
        id
    }

    fn open(&mut self, name: usize) -> StreamId {
        self.open_from(name, name as u8)
    }

    fn set(&self, name: &str, action: BucketAction) {
        self.actions.0.lock().unwrap().insert(name.into(), action);
    }

    /// Everything pushed (not a report's answer) since the last call, in order.
    fn pushed(&self) -> Vec<(usize, Vec<Assignment>)> {
        let all = std::mem::take(&mut *self.sent.lock().unwrap());
        (all.into_iter())
            .filter(|(_, out)| out.reported.is_none())
            .map(|(name, out)| (name, out.answers))
            .collect()
    }

    /// One report of `stream`: what answered it, everything else sent dropped.
    fn report(&mut self, stream: StreamId, usages: &[Usage]) -> Option<Outgoing> {
        self.book.report(stream, usages);
        let all = std::mem::take(&mut *self.sent.lock().unwrap());
        let own = stream.0 as usize - 1;
        (all.into_iter().rev())
            .find_map(|(name, out)| (name == own && out.reported.is_some()).then_some(out))
    }

    /// The strategy a one-bucket report of `stream` is answered with.
    fn answer(&mut self, stream: StreamId, u: Usage) -> Option<Strategy> {
        let out = self.report(stream, &[u])?;
        out.answers.first().and_then(strategy_of)
    }

    fn after(&mut self, seconds: u64) {
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
fn limited() -> BucketAction {
    BucketAction::Limited {
        rule: "edge.name".into(),
        rate: SharedRate {
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

#[test]
fn a_lone_stream_gets_the_whole_limit() {
    let mut rig = Rig::new();
    let a = rig.open(0);
    assert_eq!(rig.answer(a, usage("x", 0, 1, 0)), Some(tb(20, 100, 10)));
    assert_eq!(rig.book.load(), (1, 1));
}

#[test]
fn a_second_stream_shrinks_the_first_before_it_is_answered() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.book.report(b, &[usage("x", 0, 1, 0)]);
    // One path, in order: a's shrink, then b's answer.
    let sent = std::mem::take(&mut *rig.sent.lock().unwrap());
    assert_eq!(sent.len(), 2);
    assert_eq!((sent[0].0, sent[0].1.reported.is_none()), (0, true));
    assert_eq!(strategy_of(&sent[0].1.answers[0]), Some(tb(10, 50, 10)));
    assert_eq!((sent[1].0, sent[1].1.reported.is_some()), (1, true));
    assert_eq!(strategy_of(&sent[1].1.answers[0]), Some(tb(10, 50, 10)));
}

#[test]
fn a_stream_asking_little_gets_its_ask() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 5, 100, 0));
    // a offers 1/s: 10 per 10 s interval of the 100 tokens. b asks 20/s, more than all the
    // rest, so no headroom is offered to all; a, asking less than the fair share, keeps its
    // headroom (12.5, rounded by largest remainders) and b gets the rest.
    let small = rig.answer(a, usage("x", 5, 5, 0)).unwrap();
    assert_eq!(Share::of(Some(small), 10).tokens, 13);
    // b is pushed the rest once the tick sees a's answer taken.
    rig.after(1);
    let pushes = rig.pushed();
    assert_eq!(
        strategy_of(&pushes[0].1[0]).map(|s| Share::of(Some(s), 10).tokens),
        Some(87)
    );
}

/// Issue 41, item 2: a stream asking less than the fair share is offered headroom while it is
/// new or was refused lately; its first three reports made without a refusal, it is
/// held to its ask in whole tokens (headroom it does not use is lost to the streams refused), and
/// a refusal brings the headroom back. Refusals in a report covering time before it held its
/// share do not count.
#[test]
fn headroom_goes_to_small_askers_that_are_refused() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 0, 1, 0));
    let tokens = |s: Option<Strategy>| s.map(|s| Share::of(Some(s), 10).tokens);
    let round = |rig: &mut Rig, allowed, denied| {
        rig.after(5);
        rig.answer(b, usage("x", 5, 100, 0));
        tokens(rig.answer(a, usage("x", 5, allowed, denied)))
    };
    // Its first report covers time before it held its share: its refusal does not count.
    let mut shares = vec![round(&mut rig, 4, 1)];
    shares.extend((0..4).map(|_| round(&mut rig, 5, 0)));
    assert_eq!(shares, [Some(13), Some(13), Some(10), Some(10), Some(10)]);
    assert_eq!(round(&mut rig, 4, 1), Some(13));
}

#[test]
fn headroom_is_offered_when_the_limit_covers_it() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 0, 1, 0));
    // b asks 9/s (90 tokens, 112.5 with headroom): with a's 10 (12.5) more than the 100.
    rig.answer(b, usage("x", 5, 45, 0));
    let small = rig.answer(a, usage("x", 5, 5, 0)).unwrap();
    assert_eq!(Share::of(Some(small), 10).tokens, 13);
    // b asks 4/s (40, 50 with headroom; the larger of its last two reports): both with
    // headroom fit, and the 37.5 left are spread: a gets 12.5 + 18.75.
    rig.answer(b, usage("x", 5, 20, 0));
    rig.answer(b, usage("x", 5, 20, 0));
    let small = rig.answer(a, usage("x", 5, 5, 0)).unwrap();
    assert_eq!(Share::of(Some(small), 10).tokens, 31);
}

/// A bucket many streams share (here past none) answers a report from its last split in
/// constant time and pushes nothing; the tick re-splits it and pushes the others' changes,
/// shrinks first, and what streams hold never sums above the limit.
#[test]
fn past_a_few_streams_a_report_is_answered_from_the_last_split() {
    let mut rig = Rig::new();
    let book = std::mem::replace(&mut rig.book, Rig::new().book);
    rig.book = book.with_split_at_once(0);
    let (a, b) = (rig.open(0), rig.open(1));
    assert_eq!(rig.answer(a, usage("x", 0, 1, 0)), Some(tb(20, 100, 10)));
    // The first split gave a everything: b gets what is left, nothing, until the tick.
    assert_eq!(rig.answer(b, usage("x", 0, 1, 0)), Some(Strategy::DenyAll));
    assert!(rig.pushed().is_empty());
    rig.after(1);
    let pushes = rig.pushed();
    assert_eq!(pushes.len(), 2, "{pushes:?}");
    assert_eq!(
        (pushes[0].0, strategy_of(&pushes[0].1[0])),
        (0, Some(tb(10, 50, 10)))
    );
    assert_eq!(
        (pushes[1].0, strategy_of(&pushes[1].1[0])),
        (1, Some(tb(10, 50, 10)))
    );
    // b asks 20/s: its answer stays (it holds what the split gives it).
    assert_eq!(rig.answer(b, usage("x", 5, 100, 0)), Some(tb(10, 50, 10)));
    // a now asks 1/s: its answer falls to its ask with headroom at once (12.5, rounded down
    // from the level), b grows at the next tick.
    let small = rig.answer(a, usage("x", 5, 5, 0)).unwrap();
    assert_eq!(Share::of(Some(small), 10).tokens, 12);
    assert!(rig.pushed().is_empty());
    rig.after(1);
    let pushes = rig.pushed();
    assert_eq!(pushes.len(), 1, "{pushes:?}");
    let grown = strategy_of(&pushes[0].1[0]).unwrap();
    assert_eq!((pushes[0].0, Share::of(Some(grown), 10).tokens), (1, 87));
    // Unchanged demand: the same strategy again, nothing pushed.
    assert_eq!(rig.answer(a, usage("x", 5, 5, 0)), Some(small));
    rig.after(1);
    assert!(rig.pushed().is_empty());
}

#[test]
fn a_small_move_re_sends_the_same_strategy() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 0, 1, 0));
    let first = rig.answer(a, usage("x", 5, 20, 0));
    rig.after(1);
    let again = rig.answer(a, usage("x", 5, 21, 0));
    assert_eq!(first, again);
}

#[test]
fn during_the_warm_up_enforced_limits_get_no_answer() {
    let mut rig = Rig::with(Portions::Whole, false);
    rig.set("open", BucketAction::NoRule);
    let a = rig.open(0);
    let out = rig.report(a, &[usage("x", 5, 3, 0), usage("open", 5, 3, 0)]);
    let out = out.unwrap();
    assert_eq!(out.answers.len(), 1);
    assert_eq!(strategy_of(&out.answers[0]), Some(Strategy::AllowAll));
    // Both reports are counted, answered or not.
    assert_eq!(out.reported.map(|r| r.tallies.len()), Some(2));
    rig.clock.advance(Duration::from_nanos(WARM_UP - SECOND));
    rig.book.tick();
    assert!(rig.pushed().is_empty());
    rig.after(1);
    let pushed = rig.pushed();
    assert_eq!(strategy_of(&pushed[0].1[0]), Some(tb(20, 100, 10)));
}

#[test]
fn blanket_rules_and_tallies() {
    let mut rig = Rig::new();
    let a = rig.open(0);
    let rule: Arc<str> = "edge.name".into();
    let deny = BucketAction::Deny {
        rule: rule.clone(),
        shadow: false,
    };
    rig.set("d", deny);
    rig.set("u", BucketAction::Unlimited { rule: rule.clone() });
    rig.set("n", BucketAction::NoRule);
    assert_eq!(rig.answer(a, usage("d", 0, 1, 0)), Some(Strategy::DenyAll));
    assert_eq!(rig.answer(a, usage("u", 0, 1, 0)), Some(Strategy::AllowAll));
    assert_eq!(rig.answer(a, usage("n", 0, 1, 0)), Some(Strategy::AllowAll));
    let BucketAction::Limited { rate, .. } = limited() else {
        unreachable!()
    };
    let shadow = BucketAction::Limited {
        rule: rule.clone(),
        rate,
        shadow: true,
    };
    rig.set("s", shadow);
    let out = rig.report(a, &[usage("s", 0, 50, 0)]).unwrap();
    assert_eq!(strategy_of(&out.answers[0]), Some(Strategy::AllowAll));
    // The whole limit's burst is 20: 30 of the 50 would have been refused.
    let want = Tally {
        rule: Some(rule),
        allowed: 50,
        denied: 0,
        shadow_refused: 30,
    };
    assert_eq!(out.reported.unwrap().tallies, vec![want]);
}

#[test]
fn a_closed_stream_gives_its_share_back_once_it_has_expired() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 0, 1, 0));
    rig.book.close(b);
    assert_eq!(rig.book.load().0, 1);
    // Two reports of a within b's TTL plus a second (HELD_FOR, 11 s).
    for _ in 0..(HELD_FOR / SECOND - 1) / 5 {
        rig.after(5);
        // a keeps reporting more than the limit; b's Envoy may still hold its half.
        let kept = rig.answer(a, usage("x", 5, 100, 0));
        assert_eq!(kept, Some(tb(10, 50, 10)));
    }
    rig.after(1);
    let pushes = rig.pushed();
    assert_eq!(strategy_of(&pushes[0].1[0]), Some(tb(20, 100, 10)));
}

/// Issue 40, item 2: an Envoy whose stream broke reconnects at once with the buckets it holds
/// (its first report covers time); the new stream takes over the old one's share, so it is
/// answered the same strategy (Envoy keeps its tokens) instead of `DENY_ALL` until the old
/// share expired.
#[test]
fn a_reconnecting_envoy_keeps_its_share() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open_from(1, 7));
    rig.answer(a, usage("x", 0, 1, 0));
    let held = rig.answer(b, usage("x", 0, 1, 0));
    assert_eq!(held, Some(tb(10, 50, 10)));
    rig.after(2);
    rig.book.close(b);
    rig.after(2);
    let again = rig.open_from(2, 7);
    assert_eq!(rig.answer(again, usage("x", 5, 40, 10)), held);
    // Nothing moved for a, and the old share is not reserved on top: when a asks for
    // everything past the old stream's TTL, it keeps half.
    assert!(rig.pushed().is_empty());
    rig.after(HELD_FOR / SECOND);
    rig.answer(again, usage("x", 5, 40, 10));
    assert_eq!(rig.answer(a, usage("x", 5, 100, 0)), Some(tb(10, 50, 10)));
}

/// The same bucket reported from another address, or with no time covered (a new Envoy), is
/// a different client: it takes nothing over and waits for the old share to expire; the same
/// Envoy takes it over.
#[test]
fn another_client_takes_no_share_over() {
    for (peer, elapsed, wanted) in [
        (8, 5, Strategy::DenyAll),
        (7, 0, Strategy::DenyAll),
        (7, 5, tb(20, 100, 10)),
    ] {
        let mut rig = Rig::new();
        let b = rig.open_from(1, 7);
        rig.answer(b, usage("x", 0, 1, 0));
        rig.book.close(b);
        let other = rig.open_from(2, peer);
        let got = rig.answer(other, usage("x", elapsed, 40, 10));
        assert_eq!(got, Some(wanted), "peer {peer}, elapsed {elapsed}");
    }
}

#[test]
fn a_report_past_the_bucket_cap_ends_the_stream_recording_nothing() {
    let mut rig = Rig::new();
    let a = rig.open(0);
    let many: Vec<Usage> = (0..=MAX_BUCKETS_PER_STREAM)
        .map(|i| usage(&i.to_string(), 0, 1, 0))
        .collect();
    rig.book.report(a, &many);
    assert_eq!(rig.book.load(), (0, 0));
    let ended = rig.ended.lock().unwrap().clone();
    assert!(
        matches!(&ended[..], [(0, RlqsError::Exhausted(m))] if m.contains("1000")),
        "{ended:?}"
    );
    let b = rig.open(1);
    rig.book.report(b, &many[1..]);
    assert_eq!(rig.book.load(), (1, MAX_BUCKETS_PER_STREAM));
}

#[test]
fn a_reload_pushes_new_assignments_at_once() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 0, 1, 0));
    let halved = BucketAction::Limited {
        rule: "edge.name".into(),
        rate: SharedRate {
            requests: 5,
            window: SECOND,
            burst: 10,
        },
        shadow: false,
    };
    let rules = Actions::default();
    rules.0.lock().unwrap().insert("x".into(), halved);
    rig.book.reload(Arc::new(rules));
    let pushes = rig.pushed();
    assert_eq!(pushes.len(), 2);
    // 5/s: a 20 s interval holds 100 tokens.
    assert!((pushes.iter()).all(|(_, p)| strategy_of(&p[0]) == Some(tb(5, 50, 20))));
    let rules = Actions::default();
    rules
        .0
        .lock()
        .unwrap()
        .insert("x".into(), BucketAction::NoRule);
    rig.book.reload(Arc::new(rules));
    let pushes = rig.pushed();
    assert!((pushes.iter()).all(|(_, p)| strategy_of(&p[0]) == Some(Strategy::AllowAll)));
}

#[test]
fn a_bucket_nobody_reports_is_forgotten_and_abandoned() {
    let mut rig = Rig::new();
    let a = rig.open(0);
    // Reports every 5 s (as its report covers): forgotten after two intervals.
    rig.answer(a, usage("x", 5, 1, 0));
    rig.after(FORGET_AFTER / SECOND + 1);
    let pushes = rig.pushed();
    assert_eq!(
        pushes.last().map(|(_, p)| p[0].clone()),
        Some(Assignment::Abandon { bucket: id("x") })
    );
    assert_eq!(rig.book.load().1, 0);
}

#[test]
fn a_page_shows_each_stream_share_and_pages_on() {
    let mut rig = Rig::new();
    let (a, b) = (rig.open(0), rig.open(1));
    rig.answer(a, usage("x", 0, 1, 0));
    rig.answer(b, usage("x", 5, 40, 10));
    for n in 0..5 {
        rig.answer(a, usage(&format!("y{n}"), 0, 1, 0));
    }
    let first = rig.book.page(PageQuery {
        after: None,
        limit: 4,
    });
    assert_eq!((first.count, first.streams, first.buckets.len()), (6, 2, 4));
    let view = &first.buckets[0];
    assert_eq!(view.rule.as_deref(), Some("edge.name"));
    let rates: f64 = view.holders.iter().map(|h| h.rate_per_second).sum();
    assert!(rates <= 10.0 && rates > 9.0, "{rates}");
    assert_eq!(view.holders[1].demand_per_second, Some(10.0));
    let rest = rig.book.page(PageQuery {
        after: first.next,
        limit: 4,
    });
    assert_eq!((rest.buckets.len(), rest.next), (2, None));
    assert_eq!(rest.buckets[1].bucket, id("y4"));
}

fn claimed(portion: f64, floor: f64, settling: bool) -> Claimed {
    Claimed {
        portion,
        others_demand: 0.0,
        others: 1,
        floor,
        settling,
    }
}

/// Issue 40, item 6, as the book sees it: no share of a bucket whose portion is not known
/// (no answer, a claim due at once); the portion once claimed; the floor once it is stale (a
/// claim failed); nothing once the floor ran out; and what it declares it holds meanwhile.
#[test]
fn a_replica_hands_out_its_portion_then_its_floor_then_nothing() {
    let mut rig = Rig::with(Portions::Shared(Default::default()), true);
    let a = rig.open(0);
    let out = rig.report(a, &[usage("x", 0, 1, 0)]).unwrap();
    assert!(out.answers.is_empty());
    assert!(rig.book.claim_due());
    let (keys, claims) = rig.book.claims();
    assert_eq!((claims.len(), claims[0].held), (1, 0.0));
    let at = rig.clock.now();
    rig.book.claimed(at, &keys, &[claimed(0.5, 0.25, false)]);
    assert_eq!(strategy_of(&rig.pushed()[0].1[0]), Some(tb(10, 50, 10)));
    // No claim since: the portion goes stale, the floor applies.
    rig.after(PORTION_FRESH / SECOND);
    let floor = rig.pushed();
    assert_eq!(strategy_of(&floor[0].1[0]), Some(tb(5, 25, 10)));
    assert_eq!(rig.book.claims().1[0].held, 0.5);
    // The Envoy keeps reporting; once the floor has run out, nothing.
    let mut last = None;
    for _ in 0..(FLOOR_USABLE - PORTION_FRESH) / SECOND / 5 + 1 {
        rig.after(5);
        last = rig.answer(a, usage("x", 5, 1, 0));
    }
    assert_eq!(last, Some(Strategy::DenyAll));
}

/// A settling store granted nothing to a replica that held nothing: its bucket stays
/// unanswered (the Envoy's own `no_assignment_behavior`), not refused.
#[test]
fn a_settling_store_leaves_a_new_bucket_unanswered() {
    let mut rig = Rig::with(Portions::Shared(Default::default()), true);
    let a = rig.open(0);
    rig.report(a, &[usage("x", 0, 1, 0)]);
    let (keys, _) = rig.book.claims();
    let at = rig.clock.now();
    rig.book.claimed(at, &keys, &[claimed(0.0, 0.0, true)]);
    assert!(rig.pushed().is_empty());
    let out = rig.report(a, &[usage("x", 5, 1, 0)]).unwrap();
    assert!(out.answers.is_empty());
    // No claim answers after it (the store went away): the bucket still waits, as one never
    // claimed does, rather than be refused once the empty portion is stale.
    rig.after(PORTION_FRESH / SECOND + 1);
    assert!(rig.pushed().is_empty());
    let out = rig.report(a, &[usage("x", 5, 1, 0)]).unwrap();
    assert!(out.answers.is_empty(), "{out:?}");
}

/// A stream whose report interval is not known yet (its reports covered no time) may report
/// rarely: its bucket is not forgotten, nor its holder taken for silent, before the longest
/// interval has passed twice.
#[test]
fn a_bucket_of_an_unknown_interval_waits_for_the_longest() {
    use crate::rlqs::limits::LONGEST_INTERVAL;
    let mut rig = Rig::new();
    let a = rig.open(0);
    rig.answer(a, usage("x", 0, 1, 0));
    rig.after(FORGET_AFTER / SECOND + 1);
    assert!(rig.pushed().is_empty());
    assert_eq!(rig.book.load().1, 1);
    // Its next report, 30 s after the first, learns the interval: a TTL of 60 s.
    rig.after(30 - (FORGET_AFTER / SECOND + 1));
    let out = rig.report(a, &[usage("x", 30, 1, 0)]).unwrap();
    let Assignment::Assign { ttl_seconds, .. } = &out.answers[0] else {
        panic!("{out:?}")
    };
    assert_eq!(*ttl_seconds, 60);
    rig.after(2 * LONGEST_INTERVAL / SECOND);
    assert_eq!(rig.book.load().1, 0);
}

/// A report covering any time, however long, neither panics nor holds shares back for longer
/// than the longest interval and a second after a start.
#[test]
fn a_report_covering_ages_is_taken_in_stride() {
    use crate::rlqs::limits::LONGEST_INTERVAL;
    let mut rig = Rig::with(Portions::Whole, false);
    let a = rig.open(0);
    let ages = Usage {
        elapsed: u64::MAX,
        ..usage("x", 0, 1, 0)
    };
    let out = rig.report(a, std::slice::from_ref(&ages)).unwrap();
    assert!(out.answers.is_empty(), "held back in the warm-up: {out:?}");
    rig.after(LONGEST_INTERVAL / SECOND + 1);
    let out = rig.report(a, &[ages]).unwrap();
    let Assignment::Assign { ttl_seconds, .. } = &out.answers[0] else {
        panic!("{out:?}")
    };
    assert_eq!(*ttl_seconds, 120);
}

/// One round of claims (the clock a second on first) answered with all each asks, but half for
/// `short`: the names of the buckets claimed.
fn claim_round(rig: &mut Rig, short: &str) -> Vec<String> {
    rig.after(1);
    let (keys, claims) = rig.book.claims();
    let answers: Vec<Claimed> = (claims.iter())
        .map(|c| {
            let got = if c.bucket == id(short) {
                c.wanted / 2.0
            } else {
                c.wanted
            };
            claimed(got, got / 2.0, false)
        })
        .collect();
    let at = rig.clock.now();
    rig.book.claimed(at, &keys, &answers);
    (claims.iter())
        .map(|c| c.bucket.get("name").cloned().unwrap_or_default())
        .collect()
}

/// Issue 41, item 4: a bucket at rest (its last claim got all it asked, and neither what the
/// replica wants of it nor its demand moved) is claimed every other second, never going
/// stale; a bucket granted less than it asked is claimed every second; a demand that moved is
/// claimed at once.
#[test]
fn a_bucket_at_rest_is_claimed_every_other_second() {
    let mut rig = Rig::with(Portions::Shared(Default::default()), true);
    let a = rig.open(0);
    rig.report(a, &[usage("x", 5, 5, 0), usage("y", 5, 5, 0)]);
    // The first answers tell of another replica: what this one wants moves once.
    for _ in 0..3 {
        claim_round(&mut rig, "y");
    }
    rig.pushed();
    let rounds: Vec<Vec<String>> = (0..6).map(|_| claim_round(&mut rig, "y")).collect();
    let with = |name: &str| -> Vec<bool> {
        (rounds.iter())
            .map(|round| round.iter().any(|n| n == name))
            .collect()
    };
    assert_eq!(with("y"), [true; 6], "{rounds:?}");
    let x = with("x");
    assert_eq!(x.iter().filter(|&&c| c).count(), 3, "{rounds:?}");
    assert!(x.windows(2).all(|w| w[0] != w[1]), "{rounds:?}");
    // No portion went stale (the floor would have been pushed): nothing moved.
    assert!(rig.pushed().is_empty());
    // x claimed in the last round or the next: then its demand moves, and the round after
    // (a second later, which would have left it out) claims it.
    if !x[5] {
        assert!(claim_round(&mut rig, "y").contains(&"x".to_string()));
    }
    rig.report(a, &[usage("x", 5, 40, 0)]);
    assert!(claim_round(&mut rig, "y").contains(&"x".to_string()));
}

/// The TTL of the assignment in the first answer of `out`.
fn ttl_of(out: &Outgoing) -> u32 {
    match &out.answers[0] {
        Assignment::Assign { ttl_seconds, .. } => *ttl_seconds,
        other => panic!("{other:?}"),
    }
}

/// Issue 41, item 3, among replicas: a stream whose reports slow to every 30 s gets a TTL cut
/// to what the last claim reserved until a claim reserves its bucket as long as its shares
/// live (two intervals and a second, from the claim's freshness on); then its share is sent
/// again with its full TTL, and the replica declares its portion held (not just its floor) for
/// that long without a claim.
#[test]
fn a_replica_reserves_a_slow_streams_share_as_long_as_it_lives() {
    let mut rig = Rig::with(Portions::Shared(Default::default()), true);
    let a = rig.open(0);
    rig.report(a, &[usage("x", 0, 1, 0)]);
    let (keys, claims) = rig.book.claims();
    assert_eq!(claims[0].reserve_longer, 0);
    let at = rig.clock.now();
    rig.book.claimed(at, &keys, &[claimed(0.5, 0.25, false)]);
    rig.after(1);
    // Reserved for 14 s from the claim, a second ago: the 60 s TTL is cut to 12 s.
    let out = rig.report(a, &[usage("x", 30, 1, 0)]).unwrap();
    assert_eq!(ttl_of(&out), 12);
    let (keys, claims) = rig.book.claims();
    // A share handed out while the portion is fresh lives 61 s: 3 + 61 - 14 = 50 s longer.
    assert_eq!(claims[0].reserve_longer, 50 * SECOND);
    let at = rig.clock.now();
    rig.book.claimed(at, &keys, &[claimed(0.5, 0.25, false)]);
    // Reserved: the same share is sent again at once with its full TTL, so the Envoy keeps it
    // until its next report.
    let pushed = rig.pushed();
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    let Assignment::Assign {
        strategy,
        ttl_seconds,
        ..
    } = &pushed[0].1[0]
    else {
        panic!("{pushed:?}")
    };
    assert_eq!((*strategy, *ttl_seconds), (tb(10, 50, 10), 60));
    let out = rig.report(a, &[usage("x", 30, 1, 0)]).unwrap();
    assert_eq!(ttl_of(&out), 60);
    // No claim for 40 s (the store down): the portion is stale, the floor is handed out, and
    // the whole portion is still declared held, as shares of it live until 64 s.
    rig.after(40);
    let out = rig.report(a, &[usage("x", 30, 1, 0)]).unwrap();
    assert_eq!(strategy_of(&out.answers[0]), Some(tb(5, 25, 10)));
    assert_eq!(ttl_of(&out), 60);
    assert_eq!(rig.book.claims().1[0].held, 0.5);
}
