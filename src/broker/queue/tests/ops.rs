//! Random sequences: the operations, their strategies, and the test that
//! runs them through the harness.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    Ack,
    Nack(Option<u64>),
    Reject,
    Touch(Option<u64>),
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    Enqueue {
        priority: u8,
        ttl: Option<u64>,
    },
    /// mode 0-1: a new sink; 2: another consumer on a live sink; 3: the key
    /// of a cancelled consumer again; 4: an attached consumer's key again
    /// (refused as a duplicate).
    Consume {
        prefetch: u32,
        pick: u8,
        mode: u8,
    },
    Cancel {
        pick: u8,
    },
    /// `Subscription::cancel` of an attached consumer (as a session does
    /// before the queue's cancel task), then maybe that task.
    Unsubscribe {
        pick: u8,
        cancel: bool,
    },
    Disconnect {
        pick: u8,
    },
    Full {
        pick: u8,
        on: bool,
    },
    /// Some of a consumer's own in-flight ids (`mask` picks which).
    Settle {
        pick: u8,
        how: How,
        mask: u8,
        repeat: bool,
    },
    /// Ids that are not the consumer's (kind 0: another's in flight; 1:
    /// settled already; 2: never issued; 3: from a cancelled consumer),
    /// maybe with one of its own: refused, nothing changes.
    Wrong {
        pick: u8,
        how: How,
        kind: u8,
        with_own: bool,
    },
    /// Advance the clock, then tick as the broker's ticker would (only if
    /// the queue says it needs it).
    Advance {
        ms: u64,
    },
    /// `take_ready(max)`: the messages wait outside (a redrive moving
    /// them) until `PutBack`.
    Take {
        max: u8,
    },
    /// `put_back` of the messages outside that `mask` picks (those the
    /// redrive could not place); the rest have left the queue.
    PutBack {
        mask: u8,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Cfg {
    pub(super) ack_timeout_ms: u64,
    pub(super) max_deliveries: u32,
    pub(super) backoff_ms: Vec<u64>,
    pub(super) ttl_ms: u64,
    pub(super) drop_expired: bool,
    pub(super) max_length: u64,
    pub(super) dlq: bool,
}

impl Cfg {
    pub(super) fn options(&self) -> QueueOptions {
        QueueOptions {
            ack_timeout_ms: self.ack_timeout_ms,
            max_deliveries: self.max_deliveries,
            dead_letter: String::new(),
            backoff_ms: self.backoff_ms.clone(),
            ttl_ms: self.ttl_ms,
            expired: if self.drop_expired {
                ExpiredPolicy::Drop
            } else {
                ExpiredPolicy::DeadLetter
            },
            max_length: self.max_length,
            memory_window: 10_000,
            dedupe_window_ms: 0,
        }
    }
}

fn how_strategy() -> impl Strategy<Value = How> {
    prop_oneof![
        8 => Just(How::Ack),
        2 => Just(How::Nack(None)),
        1 => Just(How::Nack(Some(0))),
        2 => (1u64..3000).prop_map(|d| How::Nack(Some(d))),
        2 => Just(How::Reject),
        1 => Just(How::Touch(None)),
        1 => (0u64..5000).prop_map(|d| How::Touch(Some(d))),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let ttl = prop_oneof![
        6 => Just(None),
        1 => Just(Some(0u64)),
        3 => (200u64..6000).prop_map(Some),
    ];
    prop_oneof![
        24 => (prop_oneof![20 => 0u8..10, 1 => 10u8..=255], ttl)
            .prop_map(|(priority, ttl)| Op::Enqueue { priority, ttl }),
        6 => (1u32..=4, any::<u8>(), 0u8..5)
            .prop_map(|(prefetch, pick, mode)| Op::Consume { prefetch, pick, mode }),
        3 => any::<u8>().prop_map(|pick| Op::Cancel { pick }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(pick, cancel)| Op::Unsubscribe { pick, cancel }),
        2 => any::<u8>().prop_map(|pick| Op::Disconnect { pick }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(pick, on)| Op::Full { pick, on }),
        30 => (any::<u8>(), how_strategy(), any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, how, mask, repeat)| Op::Settle { pick, how, mask, repeat }),
        5 => (any::<u8>(), how_strategy(), 0u8..4, any::<bool>())
            .prop_map(|(pick, how, kind, with_own)| Op::Wrong { pick, how, kind, with_own }),
        20 => prop_oneof![3 => 0u64..300, 3 => 300u64..2000, 1 => 2000u64..10_000]
            .prop_map(|ms| Op::Advance { ms }),
        1 => (1u8..6).prop_map(|max| Op::Take { max }),
        1 => prop_oneof![Just(0u8), Just(0xff), any::<u8>()].prop_map(|mask| Op::PutBack { mask }),
    ]
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    (
        100u64..3000,
        0u32..=4,
        prop_oneof![
            Just(vec![]),
            Just(vec![200u64]),
            Just(vec![100u64, 1000, 5000]),
        ],
        prop_oneof![3 => Just(0u64), 1 => 1000u64..8000],
        prop::bool::weighted(0.3),
        prop_oneof![3 => Just(1_000_000u64), 1 => 3u64..25],
        prop::bool::weighted(0.85),
    )
        .prop_map(
            |(
                ack_timeout_ms,
                max_deliveries,
                backoff_ms,
                ttl_ms,
                drop_expired,
                max_length,
                dlq,
            )| {
                Cfg {
                    ack_timeout_ms,
                    max_deliveries,
                    backoff_ms,
                    ttl_ms,
                    drop_expired,
                    max_length,
                    dlq,
                }
            },
        )
}

static COVERAGE: Mutex<BTreeMap<&str, u64>> = Mutex::new(BTreeMap::new());

fn run_case(cfg: &Cfg, ops: &[Op]) -> Result<(), String> {
    let mut h = Harness::new(cfg);
    for (i, op) in ops.iter().enumerate() {
        h.step(op)
            .map_err(|e| format!("step {i} ({op:?}) at {}: {e}", h.now))?;
    }
    h.drain().map_err(|e| format!("drain at {}: {e}", h.now))?;
    let mut cov = COVERAGE.lock().unwrap();
    for (k, n) in std::mem::take(&mut h.m.cov) {
        *cov.entry(k).or_default() += n;
    }
    Ok(())
}

#[test]
fn random_sequences_match_the_model() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        cfg_strategy(),
        prop::collection::vec(op_strategy(), 1..=200),
    );
    let result = runner.run(&strategy, |(cfg, ops)| {
        run_case(&cfg, &ops).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, (cfg, ops))) => {
            panic!("{reason}\nminimal case:\n{cfg:#?}\n{ops:#?}")
        }
        Err(e) => panic!("{e}"),
    }
    let cov = COVERAGE.lock().unwrap();
    println!("{cases} sequences exercised: {cov:#?}");
    if cases >= 100 {
        for what in [
            "delivered",
            "redelivered",
            "offer among several priorities",
            "offer to a full sink",
            "offer to a closed sink",
            "closed consumer's deliveries returned",
            "back ahead of younger messages",
            "ack",
            "nack",
            "reject",
            "touch",
            "ack timeout",
            "returned with a delay",
            "delay over",
            "expired at dispatch",
            "expired by the scan",
            "dead-lettered: max-deliveries",
            "dead-lettered: rejected",
            "dead-lettered: expired",
            "discarded",
            "enqueue refused: full",
            "settle refused: unknown delivery",
            "settle refused: unknown consumer",
            "consume refused: duplicate",
            "put back",
            "moved away",
            "unsubscribed",
        ] {
            let n = cov.get(what).copied().unwrap_or(0);
            assert!(
                n >= 10,
                "the random sequences reached {what:?} only {n} times"
            );
        }
    }
}
