//! Publish and subscribe with the Rust client against a running broker
//! (`cargo run --release -- serve` in another terminal).
//!
//! `cargo run -p wharf-examples --example pubsub [ws://127.0.0.1:7878/ws]`

use std::time::{Duration, Instant};

use wharf::client::{Client, ClientError, ClientOptions};

#[actix_web::main]
async fn main() -> Result<(), ClientError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "ws://127.0.0.1:7878/ws".to_owned());
    let client = Client::connect(&url, ClientOptions::default()).await?;
    println!("connected as {}", client.welcome().client_id);

    let mut temps = client.subscribe("home/+/temperature").await?;
    for (room, value) in [("kitchen", "21.5"), ("hall", "19.0")] {
        let topic = format!("home/{room}/temperature");
        client
            .publish_confirmed(&topic, value.as_bytes().to_vec())
            .await?;
    }
    // A topic's retained message (the README's curl example leaves one on
    // home/kitchen/temperature) comes first, on subscribe, flagged
    // `retained`: it is labelled and not counted among the two published
    // above.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut live = 0;
    while live < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(m) = temps.recv_timeout(left).await else {
            println!("no message within 5 s");
            break;
        };
        let payload = String::from_utf8_lossy(&m.payload);
        if m.retained {
            println!("{} = {payload} (retained)", m.topic);
        } else {
            live += 1;
            println!("{} = {payload}", m.topic);
        }
    }
    client.close(true).await
}
