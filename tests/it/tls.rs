//! TLS: `[server.tls]` serves wss:// (and https://) with a certificate
//! made at run time by a test CA; the Rust native and MQTT clients connect
//! to it trusting that CA, and nothing else gets through.

use crate::common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{TestBroker, block_on, make_certs};
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::client::{Client, ClientOptions};

const T: Duration = Duration::from_secs(10);

fn tls_broker(cert: &Path, key: &Path) -> TestBroker {
    let (cert, key) = (cert.to_owned(), key.to_owned());
    TestBroker::start(move |c| {
        c.server.tls.cert = cert;
        c.server.tls.key = key;
    })
}

#[test]
fn native_and_mqtt_clients_over_wss() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certs(dir.path());
    let b = tls_broker(&cert, &key);
    let trust = wharf::tls::client_config(&ca).unwrap();
    block_on(async {
        let url = format!("wss://127.0.0.1:{}/ws", b.addr.port());
        let options = ClientOptions {
            tls: Some(trust.clone()),
            ..ClientOptions::default()
        };
        let c = Client::connect(&url, options).await.expect("wss connect");
        let mut sub = c.subscribe("secure/+").await.unwrap();
        let mut m = MqttClient::connect(
            &format!("wss://127.0.0.1:{}/mqtt", b.addr.port()),
            MqttOptions {
                client_id: "tls-mqtt".into(),
                tls: Some(trust.clone()),
                ..MqttOptions::default()
            },
        )
        .await
        .expect("MQTT over wss");
        m.publish("secure/a", Bytes::from_static(b"over tls"), 1, false)
            .await
            .unwrap();
        let got = sub.recv_timeout(T).await.expect("the MQTT publish");
        assert_eq!(
            (got.topic.as_str(), &got.payload[..]),
            ("secure/a", &b"over tls"[..])
        );
        assert_eq!(m.subscribe("secure/#", 0).await.unwrap(), 0);
        c.publish_confirmed("secure/b", b"native".to_vec())
            .await
            .unwrap();
        let back = m.recv().await.unwrap();
        assert_eq!(back.topic, "secure/b");
        m.disconnect().await.unwrap();
    });
}

#[test]
fn only_tls_with_a_trusted_ca_gets_through() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, key) = make_certs(dir.path());
    let other = tempfile::tempdir().unwrap();
    let (stranger_ca, _, _) = make_certs(other.path());
    let b = tls_broker(&cert, &key);
    block_on(async {
        let wss = format!("wss://127.0.0.1:{}/ws", b.addr.port());
        // A CA that did not sign the broker's certificate.
        let options = ClientOptions {
            tls: Some(wharf::tls::client_config(&stranger_ca).unwrap()),
            timeout: T,
            ..ClientOptions::default()
        };
        let e = Client::connect(&wss, options).await.err().expect("refused");
        assert!(e.to_string().contains("TLS"), "{e}");
        // No CA given at all.
        let e = Client::connect(&wss, ClientOptions::default())
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().contains("CA"), "{e}");
        // Plain ws:// to the TLS port is not a WebSocket.
        let plain = ClientOptions {
            timeout: T,
            ..ClientOptions::default()
        };
        let ws = format!("ws://127.0.0.1:{}/ws", b.addr.port());
        assert!(Client::connect(&ws, plain).await.is_err());
    });
    // The broker is still serving TLS clients after all that.
    let ca = dir.path().join("ca.pem");
    block_on(async {
        let options = ClientOptions {
            tls: Some(wharf::tls::client_config(&ca).unwrap()),
            ..ClientOptions::default()
        };
        let url = format!("wss://127.0.0.1:{}/ws", b.addr.port());
        let c = Client::connect(&url, options).await.expect("still serving");
        c.ping().await.unwrap();
    });
}

#[test]
fn bad_tls_files_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, _) = make_certs(dir.path());
    let mut config = wharf::Config::default();
    config.server.tls.cert = cert.clone();
    let e = config.validate().unwrap_err();
    assert!(e.to_string().starts_with("server.tls"), "{e}");
    config.server.tls.key = dir.path().join("missing.pem");
    let e = wharf::tls::server_config(&config.server.tls).unwrap_err();
    assert!(e.to_string().starts_with("server.tls.key"), "{e}");
    config.server.tls.cert = dir.path().join("nothing.pem");
    std::fs::write(&config.server.tls.cert, "not a certificate").unwrap();
    let e = wharf::tls::server_config(&config.server.tls).unwrap_err();
    assert!(e.to_string().starts_with("server.tls.cert"), "{e}");
}
