//! Publish and subscribe with the Rust client against a running broker
//! (`cargo run --release -- serve` in another terminal).
//!
//! `cargo run --example pubsub [ws://127.0.0.1:7878/ws]`

use std::time::Duration;

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
    for _ in 0..2 {
        match temps.recv_timeout(Duration::from_secs(5)).await {
            Some(m) => println!("{} = {}", m.topic, String::from_utf8_lossy(&m.payload)),
            None => println!("no message within 5 s"),
        }
    }
    client.close(true).await
}
