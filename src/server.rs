//! Running the broker as a server: start a [`Wharf`], serve its routes on
//! a listener the caller bound, and shut down in order when the caller's
//! shutdown future completes.

use std::future::Future;
use std::net::TcpListener;
use std::time::Duration;

use actix_web::{App, HttpServer, web};

use crate::config::Config;
use crate::transport;
use crate::{Error, Wharf};

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
/// # Errors
/// As [`run`]; also a listener on a non-loopback address with no
/// authentication configured and `auth.anonymous` unset
/// ([`Error::Config`], naming `auth.anonymous`).
pub async fn run_with_reload(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + 'static,
    mut reload: tokio::sync::mpsc::Receiver<()>,
) -> Result<(), Error> {
    let addr = listener.local_addr()?;
    config.auth.check_exposure(&[addr])?;
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
        }
    });
    let workers = config.server.effective_http_workers();
    let routes = wharf.configure();
    let write_timeout = Duration::from_secs(config.session.write_timeout_s);
    let server = HttpServer::new(move || {
        App::new()
            .configure(routes.clone())
            .default_service(web::to(transport::not_found))
    })
    .on_connect(move |conn, _| {
        type Tls = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;
        let tcp = conn
            .downcast_ref::<actix_web::rt::net::TcpStream>()
            .or_else(|| conn.downcast_ref::<Tls>().map(|t| t.get_ref().0));
        if let Some(tcp) = tcp {
            // Writes are batched (many frames per write), so Nagle's
            // algorithm only adds delay: with delayed ACKs it stalls small
            // writes by up to 40 ms.
            let _ = tcp.set_nodelay(true);
            // A peer that stops acknowledging (dead, or a zero window) is
            // dropped by the kernel: actix has no write timeout for a
            // streaming response, so nothing else would end it.
            if write_timeout > Duration::ZERO {
                let _ = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(write_timeout));
            }
        }
    })
    .workers(workers)
    .max_connections(config.server.max_connections)
    .shutdown_timeout(config.server.shutdown_timeout_s)
    .disable_signals();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let server = match tls {
        Some(tls) => server.listen_rustls_0_23(listener, tls)?,
        None => server.listen(listener)?,
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
    actix_rt::spawn(async move {
        shutdown.await;
        tracing::info!(
            sessions = sessions.len(),
            "shutting down: closing sessions, no new connections, finishing in-flight work"
        );
        // Sessions get their queued messages and a 1001 close frame; the
        // graceful stop below waits for them up to the shutdown timeout.
        sessions.close_all(1001, "server shutting down", true);
        handle.stop(true).await;
    });
    let served = server.await;
    let stopped = wharf.shutdown().await;
    served?;
    stopped?;
    tracing::info!("stopped");
    Ok(())
}
