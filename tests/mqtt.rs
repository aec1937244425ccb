//! MQTT over WebSocket with a client nobody here wrote: Eclipse Paho
//! (Python paho-mqtt, installed by .ci/run and scripts/test), against a
//! broker started by the test on loopback.

mod common;

use std::process::Command;
use std::time::Duration;

use common::TestBroker;

fn paho(b: &TestBroker, scenario: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/mqtt_paho.py");
    let out = Command::new("python3")
        .args([script, &b.addr.port().to_string(), scenario])
        .output()
        .expect("python3 runs (scripts/test installs paho-mqtt)");
    assert!(
        out.status.success(),
        "paho {scenario}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn paho_qos_0_1_2_round_trips() {
    let b = TestBroker::start(|_| {});
    paho(&b, "qos");
}

#[test]
fn paho_wildcards_and_dollar_topics() {
    let b = TestBroker::start(|_| {});
    paho(&b, "wildcards");
}

#[test]
fn paho_retained_messages() {
    let b = TestBroker::start(|_| {});
    paho(&b, "retained");
}

#[test]
fn paho_will_on_abrupt_disconnect_only() {
    let b = TestBroker::start(|_| {});
    paho(&b, "will");
}

#[test]
fn paho_persistent_session_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    paho(&b, "persist1");
    // The copies are written asynchronously: let them land.
    std::thread::sleep(Duration::from_millis(300));
    b.stop().unwrap();
    let b = TestBroker::start_in(&data, |_| {});
    paho(&b, "persist2");
}
