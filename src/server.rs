//! Running the broker as a server: start a [`Wharf`], serve its routes on
//! a listener the caller bound (and MQTT over TCP and TLS on theirs), and
//! shut down in order when the caller's shutdown future completes.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_http::HttpService;
use actix_service::{Service, map_config};
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use actix_web::{App, web};

/// A TLS connection on the HTTP listener.
type Tls = actix_tls::accept::rustls_0_23::TlsStream<TcpStream>;
/// Longest a client may take to send its request head (actix-web's
/// default).
const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a closing connection may take to shut down (actix-web's
/// default).
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

use crate::config::Config;
use crate::embed::{Error, Wharf};
use crate::transport;

/// Serves the broker on `listener` until `shutdown` completes, then stops
/// gracefully: stop accepting, let in-flight requests finish (up to
/// `server.shutdown_timeout_s`), stop the task-queue workers, and sync the
/// store to disk.
///
/// Must be called inside an actix system (`#[actix_web::main]`,
/// `actix_rt::System::new().block_on(..)`). Installs no signal handler:
/// the caller decides what `shutdown` is. Bind `127.0.0.1:0` to get a free
/// port; the bound address is logged as `listening on ADDR`.
///
/// # Errors
/// An invalid config, a store that will not open, a scheduler that cannot
/// start, or an I/O error from the listener.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> Result<(), wharf::Error> {
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # drop(stop);
/// wharf::run(listener, wharf::Config::default(), async {
///     let _ = stopped.await;
/// })
/// .await
/// # }
/// ```
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + 'static,
) -> Result<(), Error> {
    let (_keep, reload) = tokio::sync::mpsc::channel(1);
    run_with_reload(listener, config, shutdown, reload).await
}

/// [`run`], and each message on `reload` re-reads what can change while
/// running (the JWKS file of `[auth.jwt]`); the binary sends one on
/// SIGHUP. A file that does not load leaves the old keys in force, with
/// a warning.
///
/// The MQTT listeners `[mqtt] tcp_bind` and `tls_bind` name are bound
/// here (see [`Listeners::bind_mqtt`]).
///
/// # Errors
/// As [`run`]; also a listener on a non-loopback address with no
/// authentication configured and `auth.anonymous` unset
/// ([`Error::Config`], naming `auth.anonymous`), or an MQTT address that
/// cannot be bound ([`Error::Bind`], naming its key).
pub async fn run_with_reload(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + 'static,
    reload: tokio::sync::mpsc::Receiver<()>,
) -> Result<(), Error> {
    // A bad config is reported as such before any address is bound.
    crate::embed::check_config(&config)?;
    let listeners = Listeners::bind_mqtt(listener, &config)?;
    serve(listeners, config, shutdown, reload).await
}

/// Re-reads `[[history]]` and `[[presence]]` from the config file (on
/// SIGHUP); a file that does not load or validate keeps the entries in
/// force.
async fn reload_history(wharf: &Wharf) {
    let Some(file) = wharf.config().file.clone() else {
        return;
    };
    let read = web::block(move || {
        let config = Config::from_file(&file)?;
        config.validate()?;
        Ok::<_, crate::config::ConfigError>((config.history, config.presence))
    })
    .await;
    match read {
        Ok(Ok((history, presence))) => {
            wharf.broker().history().set(&history).await;
            wharf.broker().presence().set(&presence).await;
            tracing::info!(
                history = history.len(),
                presence = presence.len(),
                "[[history]] and [[presence]] entries reloaded"
            );
        }
        Ok(Err(e)) => {
            tracing::warn!("[[history]] and [[presence]] not reloaded, the old entries stay: {e}")
        }
        Err(e) => tracing::warn!("[[history]] and [[presence]] not reloaded: {e}"),
    }
}

/// The sockets a broker serves, bound by the caller: HTTP and WebSocket,
/// and optionally MQTT over TCP and over TLS.
#[derive(Debug)]
pub struct Listeners {
    /// HTTP, WebSocket (`/ws`, `/mqtt`); https and wss with `[server.tls]`.
    pub http: TcpListener,
    /// MQTT over TCP (`[mqtt] tcp_bind`).
    pub mqtt: Option<TcpListener>,
    /// MQTT over TLS (`[mqtt] tls_bind`); needs `[server.tls]`.
    pub mqtt_tls: Option<TcpListener>,
}

impl Listeners {
    /// `http`, and the MQTT listeners `config` asks for, bound now.
    ///
    /// # Errors
    /// An address that does not parse ([`Error::Config`]) or cannot be
    /// bound ([`Error::Bind`]), naming its key.
    pub fn bind_mqtt(http: TcpListener, config: &Config) -> Result<Listeners, Error> {
        let bind = |key: &'static str, addr: Option<SocketAddr>| -> Result<_, Error> {
            addr.map(|addr| {
                TcpListener::bind(addr).map_err(|source| Error::Bind { key, addr, source })
            })
            .transpose()
        };
        Ok(Listeners {
            http,
            mqtt: bind("mqtt.tcp_bind", config.mqtt.tcp_addr()?)?,
            mqtt_tls: bind("mqtt.tls_bind", config.mqtt.tls_addr(&config.server.tls)?)?,
        })
    }

    fn addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
        let mut all = vec![self.http.local_addr()?];
        for l in [&self.mqtt, &self.mqtt_tls].into_iter().flatten() {
            all.push(l.local_addr()?);
        }
        Ok(all)
    }
}

/// [`run_with_reload`] on listeners the caller bound (to pick free ports
/// for every one of them, say).
///
/// # Errors
/// As [`run_with_reload`]; an MQTT TLS listener without `[server.tls]` is
/// [`Error::Config`].
pub async fn serve(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + 'static,
    mut reload: tokio::sync::mpsc::Receiver<()>,
) -> Result<(), Error> {
    let addr = listeners.http.local_addr()?;
    config.auth.check_exposure(&listeners.addrs()?)?;
    if listeners.mqtt_tls.is_some() && !config.server.tls.enabled() {
        return Err(Error::Config(crate::config::ConfigError::Invalid {
            key: "mqtt.tls_bind".into(),
            reason: "an MQTT TLS listener needs [server.tls] cert and key".into(),
        }));
    }
    let Listeners {
        http: listener,
        mqtt,
        mqtt_tls,
    } = listeners;
    // Read before the store opens: a bad certificate fails fast.
    let tls = if config.server.tls.enabled() {
        Some(crate::tls::server_config(&config.server.tls)?)
    } else {
        None
    };
    let wharf = Wharf::start(config).await?;
    let config = wharf.config().clone();
    let reloading = wharf.clone();
    actix_rt::spawn(async move {
        while reload.recv().await.is_some() {
            match reloading.auth().reload() {
                Ok(keys) => tracing::info!(keys, "authentication keys reloaded"),
                Err(e) => {
                    tracing::warn!("authentication keys not reloaded, the old ones stay: {e}")
                }
            }
            let rules = reloading.rules_handle();
            match web::block(move || rules.reload()).await {
                Ok(Ok(rules)) => tracing::info!(rules, "rules reloaded"),
                Ok(Err(crate::rules::ReloadError::NoFile)) => {}
                Ok(Err(e)) => tracing::warn!("rules not reloaded, the old ones stay: {e}"),
                Err(e) => tracing::warn!("rules not reloaded: {e}"),
            }
            reload_history(&reloading).await;
        }
    });
    let workers = config.server.effective_http_workers();
    let routes = wharf.configure();
    let write_timeout = Duration::from_secs(config.session.write_timeout_s);
    let stopping_flag = wharf.app_state().streams;
    let make_app = move || {
        let stopping = stopping_flag.clone();
        App::new()
            .configure(routes.clone())
            .default_service(web::to(transport::not_found))
            // Once the broker stops, each answer closes its connection: a
            // client that keeps one alive (a browser, an agent polling)
            // would otherwise hold the graceful stop for as long as it
            // sends requests.
            .wrap_fn(move |req, srv| {
                let closing = stopping.is_closed();
                let answer = actix_web::dev::Service::call(srv, req);
                async move {
                    let mut res = answer.await?;
                    // Not an upgrade: its 101 must say `upgrade`.
                    if closing && res.status() != actix_web::http::StatusCode::SWITCHING_PROTOCOLS {
                        res.response_mut()
                            .head_mut()
                            .set_connection_type(actix_http::ConnectionType::Close);
                    }
                    Ok(res)
                }
            })
    };
    let builder = actix_server::Server::build()
        .workers(workers)
        .max_concurrent_connections(config.server.max_connections)
        .shutdown_timeout(config.server.shutdown_timeout_s)
        .disable_signals();
    let scheme = if tls.is_some() { "https" } else { "http" };
    // MQTT connections run in tasks of their own, counted here.
    let park_after = config.mqtt.park_after_ms;
    let mqtt_handed = transport::raw::Handed::parking(
        config.server.max_connections,
        (park_after > 0).then(|| Duration::from_millis(park_after)),
    );
    let mqtt_server = mqtt_server(
        &wharf,
        mqtt,
        mqtt_tls.map(|l| (l, tls.clone())),
        workers,
        &mqtt_handed,
    )?;
    let lean = config.server.lean_websockets;
    // WebSockets handed over leave actix-server's count: counted here.
    let handed = transport::raw::Handed::new(config.server.max_connections);
    // actix-web's HttpServer, built by hand for one thing it does not
    // offer: with `lean_websockets`, an upgrade hook, so that WebSocket
    // connections leave actix-http for their own reader and writer
    // (transport::raw) after the same routes have accepted them. The host
    // and address of the app config only matter to URL generation, which
    // no route uses.
    macro_rules! http_service {
        ($io:ty, $tcp:expr, $secure:expr) => {{
            crate::tidy::start_on_this_worker();
            let make_app = make_app.clone();
            let svc = HttpService::build()
                .client_request_timeout(CLIENT_REQUEST_TIMEOUT)
                .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                .local_addr(addr)
                .on_connect_ext(move |io: &$io, _: &mut _| tune($tcp(io), write_timeout));
            let svc = if $secure { svc.secure() } else { svc };
            (svc, make_app)
        }};
    }
    // actix-server keeps the future a service returns for a connection
    // beside the one it awaits, so an unboxed connection future (actix-http's
    // dispatcher, which a WebSocket handed over by `lean_websockets` keeps
    // for its life) sits in every connection's task twice: boxed, the task
    // holds a pointer twice (~1.3 KiB less per connection).
    macro_rules! boxed_connections {
        ($svc:expr) => {
            actix_service::apply_fn_factory($svc, |io, svc| Box::pin(svc.call(io)))
        };
    }
    let server = match (tls, lean) {
        (None, false) => builder.listen("wharf-http", listener, move || {
            let (svc, make_app) = http_service!(TcpStream, std::convert::identity, false);
            let svc = svc
                .finish(map_config(make_app(), |_| AppConfig::default()))
                .tcp();
            boxed_connections!(svc)
        })?,
        (None, true) => builder.listen("wharf-http", listener, {
            let handed = handed.clone();
            move || {
                let (svc, make_app) = http_service!(TcpStream, std::convert::identity, false);
                let svc = svc
                    .upgrade(transport::raw::upgrade_factory(
                        make_app.clone(),
                        handed.clone(),
                    ))
                    .finish(map_config(make_app(), |_| AppConfig::default()))
                    .tcp();
                boxed_connections!(svc)
            }
        })?,
        (Some(tls), false) => builder.listen("wharf-https", listener, move || {
            let (svc, make_app) = http_service!(Tls, tls_tcp, true);
            let svc = svc
                .finish(map_config(make_app(), |_| AppConfig::default()))
                .rustls_0_23(tls.clone());
            boxed_connections!(svc)
        })?,
        (Some(tls), true) => builder.listen("wharf-https", listener, {
            let handed = handed.clone();
            move || {
                let (svc, make_app) = http_service!(Tls, tls_tcp, true);
                let svc = svc
                    .upgrade(transport::raw::upgrade_factory(
                        make_app.clone(),
                        handed.clone(),
                    ))
                    .finish(map_config(make_app(), |_| AppConfig::default()))
                    .rustls_0_23(tls.clone());
                boxed_connections!(svc)
            }
        })?,
    }
    .run();
    tracing::info!(
        %addr,
        store = %config.store.data_dir.display(),
        http_workers = workers,
        scheme,
        "listening on {addr}"
    );

    let handle = server.handle();
    let sessions = wharf.sessions().clone();
    let shutdown_timeout_s = config.server.shutdown_timeout_s;
    let streams = wharf.app_state().streams;
    let mqtt_handle = mqtt_server.as_ref().map(actix_server::Server::handle);
    let mqtt_done = mqtt_server.map(actix_rt::spawn);
    // Set when the stop begins: from then on the servers get a deadline.
    let (stopping, stop_begun) = tokio::sync::oneshot::channel::<()>();
    actix_rt::spawn(async move {
        shutdown.await;
        let _ = stopping.send(());
        tracing::info!(
            sessions = sessions.len(),
            "shutting down: closing sessions, no new connections, finishing in-flight work"
        );
        // No new connections from here on.
        handle.pause().await;
        if let Some(mqtt) = &mqtt_handle {
            mqtt.pause().await;
        }
        // A TLS handshake under way at the pause sets its connection up
        // later: it is closed, not served past `close_all` below.
        mqtt_handed.shut();
        // Sessions get their queued messages and a 1001 close frame; the
        // graceful stop below waits for them up to the shutdown timeout.
        sessions.close_all(1001, crate::session::close_reason::SHUTDOWN, true);
        // Open dashboards' streams end within a second.
        streams.close();
        // WebSockets handed over (lean_websockets) are not in
        // actix-server's count, whose stop would end them with its
        // workers: they are waited for here, within the same timeout.
        // MQTT connections (in tasks of their own) likewise.
        let drain = Duration::from_secs(shutdown_timeout_s);
        let (ws, mqtt) = tokio::join!(handed.drained(drain), mqtt_handed.drained(drain));
        if !ws || !mqtt {
            tracing::warn!(
                websockets = handed.live(),
                mqtt = mqtt_handed.live(),
                "connections still draining after the shutdown timeout; stopping them"
            );
        }
        if let Some(mqtt) = mqtt_handle {
            mqtt.stop(true).await;
        }
        handle.stop(true).await;
    });
    // A graceful stop takes at most the shutdown timeout per server; past
    // twice that (and 5 s) the broker stops anyway, saying so, rather than
    // wait on a server that never reports back.
    let grace = Duration::from_secs(config.server.shutdown_timeout_s.saturating_mul(2) + 5);
    let deadline = async move {
        if stop_begun.await.is_ok() {
            actix_rt::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(deadline);
    let mut late = false;
    let served = tokio::select! {
        served = server => served,
        () = &mut deadline => {
            tracing::warn!(?grace, "the HTTP server did not stop in time; stopping the broker anyway");
            late = true;
            Ok(())
        }
    };
    if let Some(done) = mqtt_done.filter(|_| !late) {
        tokio::select! {
            _ = done => {}
            () = &mut deadline => {
                tracing::warn!(?grace, "the MQTT listeners did not stop in time; stopping the broker anyway");
            }
        }
    }
    let stopped = wharf.shutdown().await;
    served?;
    stopped?;
    tracing::info!("stopped");
    Ok(())
}

/// The TCP stream under a TLS connection.
fn tls_tcp(io: &Tls) -> &TcpStream {
    io.get_ref().0
}

/// Socket options every connection gets.
fn tune(tcp: &actix_web::rt::net::TcpStream, write_timeout: Duration) {
    // Writes are batched (many frames per write), so Nagle's algorithm
    // only adds delay: with delayed ACKs it stalls small writes by up to
    // 40 ms.
    let _ = tcp.set_nodelay(true);
    // A peer that stops acknowledging (dead, or a zero window) is dropped
    // by the kernel: actix has no write timeout for a streaming response,
    // so nothing else would end it.
    if write_timeout > Duration::ZERO {
        let _ = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(write_timeout));
    }
}

/// The MQTT-over-TCP and MQTT-over-TLS listeners as one actix server
/// (its own worker threads, as many as HTTP has), if either is wanted.
/// Each connection runs in a task of its own on the worker that accepted
/// it, counted in `handed` (against `[server] max_connections`, and for
/// the graceful stop): actix-server's own count holds a TLS connection
/// only until its handshake is done.
fn mqtt_server(
    wharf: &Wharf,
    tcp: Option<TcpListener>,
    tls: Option<(TcpListener, Option<rustls::ServerConfig>)>,
    workers: usize,
    handed: &Arc<transport::raw::Handed>,
) -> Result<Option<actix_server::Server>, Error> {
    use actix_service::fn_service;
    if tcp.is_none() && tls.is_none() {
        return Ok(None);
    }
    let config = wharf.config().clone();
    let write_timeout = Duration::from_secs(config.session.write_timeout_s);
    let mut builder = actix_server::Server::build()
        .workers(workers)
        .max_concurrent_connections(config.server.max_connections)
        .shutdown_timeout(config.server.shutdown_timeout_s)
        .disable_signals();
    if let Some(listener) = tcp {
        let addr = listener.local_addr()?;
        let state = wharf.app_state();
        let handed = handed.clone();
        builder = builder.listen("mqtt", listener, move || {
            crate::tidy::start_on_this_worker();
            let (state, handed) = (state.clone(), handed.clone());
            fn_service(move |io: actix_rt::net::TcpStream| {
                tune(&io, write_timeout);
                let peer = io.peer_addr().ok().map(|a| a.ip());
                transport::mqtt_tcp::spawn(io, peer, &state, &handed);
                std::future::ready(Ok::<_, std::convert::Infallible>(()))
            })
        })?;
        tracing::info!(%addr, "serving MQTT over TCP at {addr}");
    }
    if let Some((listener, Some(mut tls))) = tls {
        let addr = listener.local_addr()?;
        // Not HTTP: no ALPN protocol is offered.
        tls.alpn_protocols.clear();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let state = wharf.app_state();
        let handed = handed.clone();
        builder = builder.listen("mqtt-tls", listener, move || {
            crate::tidy::start_on_this_worker();
            let (state, acceptor, handed) = (state.clone(), acceptor.clone(), handed.clone());
            fn_service(move |io: actix_rt::net::TcpStream| {
                let (state, acceptor, handed) = (state.clone(), acceptor.clone(), handed.clone());
                // Boxed: actix-server keeps the future it is given beside
                // the one it awaits, which would hold this one twice.
                Box::pin(async move {
                    tune(&io, write_timeout);
                    let peer = io.peer_addr().ok().map(|a| a.ip());
                    let handshake = acceptor.accept(io);
                    match actix_rt::time::timeout(
                        transport::mqtt_tcp::TLS_HANDSHAKE_TIMEOUT,
                        handshake,
                    )
                    .await
                    {
                        Ok(Ok(stream)) => transport::mqtt_tcp::spawn(stream, peer, &state, &handed),
                        Ok(Err(e)) => tracing::info!(?peer, "MQTT TLS handshake failed: {e}"),
                        Err(_) => tracing::info!(?peer, "MQTT TLS handshake timed out"),
                    }
                    Ok::<_, std::convert::Infallible>(())
                })
            })
        })?;
        tracing::info!(%addr, "serving MQTT over TLS at {addr}");
    }
    Ok(Some(builder.run()))
}
