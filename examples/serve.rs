//! Runs the broker from your own `main`: bind the listener yourself, pick
//! the config in code, and decide what stops it (here: Ctrl-C or 60 s).
//!
//! `cargo run -p wharf-examples --example serve`

use std::time::Duration;

fn main() -> Result<(), wharf::Error> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let mut config = wharf::Config::default();
    config.store.data_dir = std::env::temp_dir().join("wharf-example");
    // MQTT over TCP defaults to 127.0.0.1:1883, which a local Mosquitto
    // often holds: any free port instead (logged as `serving MQTT over TCP
    // at ADDR`); "" would turn it off.
    config.mqtt.tcp_bind = "127.0.0.1:0".into();
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    println!("try: curl http://{}/health", listener.local_addr()?);
    actix_rt::System::new().block_on(wharf::run(listener, config, async {
        tokio::select! {
            _ = actix_rt::signal::ctrl_c() => {}
            _ = actix_rt::time::sleep(Duration::from_secs(60)) => {}
        }
    }))
}
