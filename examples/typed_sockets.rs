//! Typed sockets: a shop's app with two kinds of WebSocket connection of
//! its own, on Wharf's session machinery.
//!
//! - `CustomerSocket` at `/customers/{id}`: a customer's browser. It says
//!   `track <order>` to follow an order; the order's status updates reach
//!   it as Wharf `message` frames (it subscribes to `orders/<order>/status`),
//!   and the app's notices reach it through `Sockets::tell`.
//! - `OrderSocket` at `/orders/{id}?customer=<id>`: the warehouse's
//!   terminal for one order. A JSON `{"status": "..."}` from it is
//!   published to `orders/<id>/status`, and its customer is told.
//! - `POST /customers/{id}/notify`: the app's own route, telling every
//!   socket of that customer a notice (how many took it is the answer).
//!
//! `cargo run -p wharf-examples --example typed_sockets`, then:
//!
//! ```text
//! websocat ws://127.0.0.1:8080/customers/c1        # then type: track o1
//! websocat 'ws://127.0.0.1:8080/orders/o1?customer=c1'   # then: {"status":"packed"}
//! curl -X POST 127.0.0.1:8080/customers/c1/notify -d 'your coupon: TEA10'
//! curl 127.0.0.1:8080/broker/admin/sessions        # kind: customer, order
//! ```
#![allow(dead_code)] // tests/it/typed_sockets.rs includes this file as a module

use std::sync::{Arc, Mutex};

use actix_web::{HttpResponse, web};
use wharf::sockets::{Closed, Open, Refusal, Socket, SocketMessage, SocketType, Sockets};
use wharf::{Config, Wharf};

/// What the app tells a customer's sockets.
#[derive(Debug, Clone)]
pub enum CustomerEvent {
    /// A line to show the customer.
    Notice(String),
}

/// A customer's connection.
pub struct CustomerSocket {
    customer: String,
    /// Where the app keeps a line per closed socket (the test reads it).
    closed: Arc<Mutex<Vec<String>>>,
}

/// Ids are short and plain: they become topic levels.
fn plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The app's shared state, as actix-web hands it to the sockets.
fn shop(open: &Open<'_>) -> Result<web::Data<Shop>, Refusal> {
    open.request()
        .app_data::<web::Data<Shop>>()
        .cloned()
        .ok_or_else(|| Refusal::not_found("the shop is not mounted"))
}

impl SocketType for CustomerSocket {
    const KIND: &'static str = "customer";
    type Event = CustomerEvent;

    async fn on_open(open: &Open<'_>, socket: &Socket) -> Result<Self, Refusal> {
        let customer = open.path_param("id").unwrap_or_default().to_owned();
        if !plain_id(&customer) {
            return Err(Refusal::bad_request(
                "a customer id is 1-64 letters, digits, - or _",
            ));
        }
        let _ = socket.send(format!("welcome {customer}"));
        Ok(CustomerSocket {
            customer,
            closed: shop(open)?.closed.clone(),
        })
    }

    fn id(&self) -> &str {
        &self.customer
    }

    async fn on_message(&mut self, socket: &Socket, message: SocketMessage) {
        let SocketMessage::Text(text) = message else {
            let _ = socket.send("customers speak text");
            return;
        };
        let reply = match text.split_once(' ') {
            Some(("track", order)) if plain_id(order) => {
                match socket.subscribe(&format!("orders/{order}/status")).await {
                    Ok(()) => format!("tracking {order}"),
                    Err(e) => format!("cannot track {order}: {e}"),
                }
            }
            Some(("untrack", order)) if plain_id(order) => {
                match socket.unsubscribe(&format!("orders/{order}/status")).await {
                    Ok(true) => format!("stopped tracking {order}"),
                    Ok(false) => format!("was not tracking {order}"),
                    Err(e) => format!("cannot stop tracking {order}: {e}"),
                }
            }
            _ => format!("unknown command {text:?} (track <order>, untrack <order>)"),
        };
        let _ = socket.send(reply);
    }

    async fn on_event(&mut self, socket: &Socket, event: CustomerEvent) {
        let CustomerEvent::Notice(line) = event;
        // Notices go ahead of whatever else is queued for the customer.
        let _ = socket.send_urgent(serde_json::json!({ "notice": line }).to_string());
    }

    async fn on_close(self, _socket: &Socket, closed: Closed) {
        if let Ok(mut log) = self.closed.lock() {
            log.push(format!(
                "customer {} closed ({:?})",
                self.customer, closed.code
            ));
        }
    }
}

/// The warehouse's connection for one order.
pub struct OrderSocket {
    order: String,
    customer: String,
    customers: Sockets<CustomerSocket>,
}

impl SocketType for OrderSocket {
    const KIND: &'static str = "order";
    type Event = ();

    async fn on_open(open: &Open<'_>, _socket: &Socket) -> Result<Self, Refusal> {
        let order = open.path_param("id").unwrap_or_default().to_owned();
        let query = web::Query::<std::collections::HashMap<String, String>>::from_query(
            open.request().query_string(),
        )
        .map_err(|e| Refusal::bad_request(e.to_string()))?;
        let customer = query.get("customer").cloned().unwrap_or_default();
        if !plain_id(&order) || !plain_id(&customer) {
            return Err(Refusal::bad_request(
                "an order socket needs a plain order id and ?customer=<id>",
            ));
        }
        Ok(OrderSocket {
            order,
            customer,
            customers: shop(open)?.wharf.sockets::<CustomerSocket>(),
        })
    }

    fn id(&self) -> &str {
        &self.order
    }

    async fn on_message(&mut self, socket: &Socket, message: SocketMessage) {
        #[derive(serde::Deserialize)]
        struct Update {
            status: String,
        }
        let update = match &message {
            SocketMessage::Text(t) => serde_json::from_str::<Update>(t).ok(),
            SocketMessage::Binary(b) => serde_json::from_slice::<Update>(b).ok(),
        };
        let Some(update) = update else {
            let _ = socket.send(r#"{"error":"send {\"status\": \"...\"}"}"#);
            return;
        };
        let topic = format!("orders/{}/status", self.order);
        let reply = match socket.publish(&topic, update.status.clone()).await {
            Ok(outcome) => {
                let told = self.customers.tell(
                    &self.customer,
                    CustomerEvent::Notice(format!("order {} is {}", self.order, update.status)),
                );
                serde_json::json!({
                    "published": outcome.seq,
                    "subscribers": outcome.delivered,
                    "customer_sockets": told.sockets,
                })
            }
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        let _ = socket.send(reply.to_string());
    }
}

/// What the app's routes and sockets share.
pub struct Shop {
    /// The embedded broker.
    pub wharf: Wharf,
    /// A line per closed customer socket.
    pub closed: Arc<Mutex<Vec<String>>>,
}

/// `POST /customers/{id}/notify`: tells the customer's sockets.
async fn notify(shop: web::Data<Shop>, id: web::Path<String>, body: String) -> HttpResponse {
    let reached = shop
        .wharf
        .sockets::<CustomerSocket>()
        .tell(&id, CustomerEvent::Notice(body));
    HttpResponse::Ok().json(serde_json::json!({
        "sockets": reached.sockets,
        "refused": reached.refused,
    }))
}

/// The app: its two socket types, its own route, and the broker's routes
/// under `/broker`.
pub fn app(cfg: &mut web::ServiceConfig, shop: &web::Data<Shop>) {
    cfg.app_data(shop.clone())
        .configure(shop.wharf.socket::<CustomerSocket>("/customers/{id}"))
        .configure(shop.wharf.socket::<OrderSocket>("/orders/{id}"))
        .route("/customers/{id}/notify", web::post().to(notify))
        .service(web::scope("/broker").configure(shop.wharf.configure()));
}

/// Starts the broker and the shop's state.
pub async fn start(config: Config) -> Result<web::Data<Shop>, wharf::Error> {
    Ok(web::Data::new(Shop {
        wharf: Wharf::start(config).await?,
        closed: Arc::default(),
    }))
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let mut config = Config::default();
    config.store.data_dir = std::env::temp_dir().join("wharf-typed-sockets-example");
    let shop = start(config).await?;
    let routes = shop.clone();
    println!("listening on http://127.0.0.1:8080 (Ctrl-C to stop)");
    actix_web::HttpServer::new(move || actix_web::App::new().configure(|cfg| app(cfg, &routes)))
        .bind("127.0.0.1:8080")?
        // Open sockets hold a graceful stop until this passes.
        .shutdown_timeout(5)
        .run()
        .await?;
    shop.wharf.shutdown().await?;
    Ok(())
}
