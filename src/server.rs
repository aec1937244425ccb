//! Running the broker: open the store, start the task-queue workers, serve
//! HTTP on a listener the caller bound, and shut down in order when the
//! caller's shutdown future completes.

use std::future::Future;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer, web};

use crate::Error;
use crate::broker::Broker;
use crate::config::Config;
use crate::session::Sessions;
use crate::store::Store;
use crate::taskq::Scheduler;
use crate::transport::{self, AppState, Health};

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
    config.validate()?;
    let store_config = config.store.clone();
    // sled does blocking I/O: open and read it off the async thread.
    let (store, retained) = web::block(move || {
        let store = Store::open(&store_config)?;
        let retained = store.load_retained()?;
        Ok::<_, crate::store::StoreError>((store, retained))
    })
    .await
    .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))??;
    let mut writer = store.start_writer(&config.store)?;
    let mut scheduler = Scheduler::new(&config.scheduler)?;

    let addr = listener.local_addr()?;
    let health = web::Data::new(Health::new());
    let broker = Broker::with_store(scheduler.handle(), writer.handle());
    // Retained messages are back before the first connection is accepted.
    let restored = retained.len();
    broker.restore_retained(retained).await?;
    if restored > 0 {
        tracing::info!(restored, "retained messages restored from the store");
    }
    let sessions = Sessions::new();
    let state = web::Data::new(AppState {
        broker: broker.clone(),
        sessions: sessions.clone(),
        config: Arc::new(config.clone()),
    });
    let workers = if config.server.http_workers == 0 {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        config.server.http_workers
    };
    let server = HttpServer::new(move || {
        App::new()
            .app_data(health.clone())
            .app_data(state.clone())
            .configure(transport::routes)
            .default_service(web::to(transport::not_found))
    })
    // Writes are batched (many frames per write), so Nagle's algorithm only
    // adds delay: with delayed ACKs it stalls small writes by up to 40 ms.
    .on_connect(|conn, _| {
        if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
            let _ = tcp.set_nodelay(true);
        }
    })
    .workers(workers)
    .max_connections(config.server.max_connections)
    .shutdown_timeout(config.server.shutdown_timeout_s)
    .disable_signals()
    .listen(listener)?
    .run();
    tracing::info!(
        %addr,
        store = %store.path().display(),
        http_workers = workers,
        taskq_workers = scheduler.stats().workers,
        "listening on {addr}"
    );

    // Topics nobody uses any more are swept every idle timeout.
    let idle = Duration::from_secs(config.topics.idle_timeout_s);
    let sweeper = actix_rt::spawn(async move {
        let mut tick = actix_rt::time::interval(idle);
        loop {
            tick.tick().await;
            let removed = broker.sweep_idle().await;
            if removed > 0 {
                tracing::debug!(removed, "idle topics swept");
            }
        }
    });

    let handle = server.handle();
    let closing = sessions.clone();
    actix_rt::spawn(async move {
        shutdown.await;
        tracing::info!(
            sessions = closing.len(),
            "shutting down: closing sessions, no new connections, finishing in-flight work"
        );
        // Sessions get their queued messages and a 1001 close frame; the
        // graceful stop below waits for them up to the shutdown timeout.
        closing.close_all(1001, "server shutting down", true);
        handle.stop(true).await;
    });
    let served = server.await;
    sweeper.abort();

    let timeout = Duration::from_secs(config.server.shutdown_timeout_s.max(1));
    // In order: topics finish their tasks, the writer commits what they
    // handed it, then the database files are synced.
    let (workers_done, synced) = web::block(move || {
        let done = scheduler.shutdown(timeout);
        let committed = writer.close(timeout);
        (done && committed, store.sync())
    })
    .await
    .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    if !workers_done {
        tracing::warn!("task queue workers or the store writer did not finish before the deadline");
    }
    served?;
    synced?;
    tracing::info!("stopped");
    Ok(())
}
