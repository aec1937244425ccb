//! The `wharf` binary: parse the command line, load and check the config,
//! install logging and signal handling, and run the broker; or, with the
//! `client` feature, run one of the client commands of [`cli`] (`pub`,
//! `sub`, `queue`, `job`, `top`, `completions`).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use wharf::config::{Config, DEFAULT_TOML, LogFormat};

mod alloc_tidy;
#[cfg(feature = "client")]
mod cli;

// `RUSTFLAGS="--cfg wharf_system_alloc"` builds the binary on the system
// allocator, so that heaptrack (which sees malloc, not mimalloc) can say
// who holds the memory (benches/README.md, "Memory per idle connection").
#[cfg(not(wharf_system_alloc))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status for a refused configuration or command line.
const EXIT_CONFIG: u8 = 2;

#[derive(Parser)]
#[command(name = "wharf", version, about = "A message broker on actix and sled")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker until SIGINT or SIGTERM.
    Serve {
        /// A config file; without it the embedded defaults are used.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Listen address (`HOST:PORT`: `127.0.0.1:7878`, `localhost:7878`,
        /// `[::1]:7878`), overriding `server.bind`. Port 0: any free port,
        /// and the MQTT listeners too unless `--mqtt-bind` is given.
        #[arg(long, value_name = "ADDR", value_parser = parse_bind)]
        bind: Option<SocketAddr>,
        /// Data directory, overriding `store.data_dir`.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// MQTT-over-TCP address, overriding `mqtt.tcp_bind`
        /// (127.0.0.1:1883 by default, which a local Mosquitto may hold):
        /// `127.0.0.1:1884` to move it, "" for no MQTT over TCP, port 0 for
        /// any free port.
        #[arg(long, value_name = "ADDR")]
        mqtt_bind: Option<String>,
        /// Not an option: says to use --bind.
        #[arg(long, hide = true, value_name = "PORT")]
        port: Option<String>,
    },
    /// Print the default configuration (the shipped config.toml).
    Config,
    /// Work on a stopped broker's data directory.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Read a password (without echo) and print its argon2id hash, for
    /// `password_hash` of an `[[auth.users]]` entry.
    Passwd {
        /// Read the password from standard input (one line) instead of
        /// the terminal, for scripts.
        #[arg(long)]
        stdin: bool,
    },
    /// Print a new random API token and its SHA-256, for an
    /// `[[auth.tokens]]` entry (the config keeps only the digest).
    Token,
    /// The client commands.
    #[cfg(feature = "client")]
    #[command(flatten)]
    Client(cli::ClientCommand),
}

/// `wharf store ...`.
#[derive(Subcommand)]
enum StoreCommand {
    /// Rewrite the store compactly, giving back the space of deleted
    /// records (sled keeps it, even across restarts). The broker must be
    /// stopped: the store is locked while it runs.
    Compact {
        /// The broker's config file (for `[store]`); without it the
        /// embedded defaults are used.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Data directory, overriding `store.data_dir`.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Config => {
            print!("{DEFAULT_TOML}");
            ExitCode::SUCCESS
        }
        Command::Serve {
            port: Some(port), ..
        } => {
            eprintln!(
                "wharf: serve has no --port; give the whole address: --bind 127.0.0.1:{port} \
                 (and --mqtt-bind for MQTT over TCP)"
            );
            ExitCode::from(EXIT_CONFIG)
        }
        Command::Serve {
            config,
            bind,
            data_dir,
            mqtt_bind,
            port: None,
        } => serve(config, bind, data_dir, mqtt_bind),
        Command::Store(StoreCommand::Compact { config, data_dir }) => compact(config, data_dir),
        Command::Passwd { stdin } => passwd(stdin),
        Command::Token => {
            let token = wharf::auth::new_token();
            println!("token:        {token}");
            println!("token_sha256: {}", wharf::auth::token_digest(&token));
            ExitCode::SUCCESS
        }
        #[cfg(feature = "client")]
        Command::Client(command) => cli::run(command, <Cli as clap::CommandFactory>::command),
    }
}

/// `--bind`: an IP address and port, or a host name and port resolved
/// now (`localhost:7878`: its first address).
fn parse_bind(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let syntax = "expected HOST:PORT, for example 127.0.0.1:7878, localhost:7878 or [::1]:7878";
    if !text
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    {
        return Err(syntax.to_owned());
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{text} resolves to no address")),
        Err(e) => Err(format!("cannot resolve {text}: {e} ({syntax})")),
    }
}

/// The config file at `path`, or the embedded defaults; an invalid one
/// has been reported.
fn load_config(path: Option<&std::path::Path>) -> Result<Config, ExitCode> {
    match path {
        Some(path) => Config::from_file(path),
        None => Config::embedded(),
    }
    .map_err(|e| config_error(&e))
}

/// `wharf store compact`: opens the store as the broker would (finishing
/// an interrupted compaction), compacts it and says what it gave back.
fn compact(path: Option<PathBuf>, data_dir: Option<PathBuf>) -> ExitCode {
    let mut config = match load_config(path.as_deref()) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(dir) = data_dir {
        config.store.data_dir = dir;
    }
    if let Err(e) = config.validate() {
        return config_error(&e);
    }
    let mut store_config = config.store.clone();
    // Compacted once, below, whatever its size.
    store_config.compact_at_start = false;
    let done = wharf::store::Store::open(&store_config).and_then(|s| s.compact(&store_config));
    match done {
        Ok((_, done)) => {
            let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
            println!(
                "compacted {}: {} records ({:.1} MiB of keys and values), {:.1} MiB before, {:.1} MiB after",
                store_config.data_dir.display(),
                done.records,
                mib(done.live_bytes),
                mib(done.before),
                mib(done.after)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wharf store compact: {e}");
            ExitCode::FAILURE
        }
    }
}

fn passwd(stdin: bool) -> ExitCode {
    let read = if stdin {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| {
            line.truncate(line.trim_end_matches(['\r', '\n']).len());
            line
        })
    } else {
        rpassword::prompt_password("password: ").and_then(|first| {
            let again = rpassword::prompt_password("again: ")?;
            if first == again {
                Ok(first)
            } else {
                Err(std::io::Error::other("the passwords differ"))
            }
        })
    };
    let password = match read {
        Ok(p) if !p.is_empty() => p,
        Ok(_) => {
            eprintln!("wharf passwd: the password is empty");
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(e) => {
            eprintln!("wharf passwd: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match wharf::auth::hash_password(password.as_bytes()) {
        Ok(hash) => {
            println!("{hash}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wharf passwd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(
    path: Option<PathBuf>,
    bind: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    mqtt_bind: Option<String>,
) -> ExitCode {
    let mut config = match load_config(path.as_deref()) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(bind) = bind {
        config.server.bind = bind;
        // A free port asked for: the MQTT listeners take free ports too
        // (logged as `serving MQTT over TCP at ADDR`), so that a test or
        // a second broker does not collide with a local MQTT broker.
        if bind.port() == 0 && mqtt_bind.is_none() {
            for addr in [&mut config.mqtt.tcp_bind, &mut config.mqtt.tls_bind] {
                if let Some(any_port) = with_port_zero(addr) {
                    *addr = any_port;
                }
            }
        }
    }
    if let Some(dir) = data_dir {
        config.store.data_dir = dir;
    }
    if let Some(addr) = mqtt_bind {
        config.mqtt.tcp_bind = addr;
    }
    if let Err(e) = wharf::check_config(&config) {
        return config_error(&e);
    }
    // Before binding: an open listener is refused without ever listening.
    let mut addrs = vec![config.server.bind];
    let mqtt_addrs = config
        .mqtt
        .tcp_addr()
        .and_then(|tcp| Ok((tcp, config.mqtt.tls_addr(&config.server.tls)?)));
    match mqtt_addrs {
        Ok((tcp, tls)) => addrs.extend(tcp.into_iter().chain(tls)),
        Err(e) => return config_error(&e),
    }
    if let Err(e) = config.auth.check_exposure(&addrs) {
        return config_error(&e);
    }
    init_logging(&config);
    if !config.server.huge_pages {
        disable_huge_pages();
    }
    raise_file_limit(config.server.max_connections);
    // Memory freed under load goes back to the system once idle.
    let _alloc_tidy = alloc_tidy::start();

    let listener = match TcpListener::bind(config.server.bind) {
        Ok(listener) => listener,
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (another program listens there: choose another address with --bind, \
                 for example --bind 127.0.0.1:0 for any free port)"
            } else {
                ""
            };
            report_failure(
                config.log.format,
                &format!("cannot bind {}: {e}{hint}", config.server.bind),
            );
            return ExitCode::FAILURE;
        }
    };
    let listeners = match wharf::Listeners::bind_mqtt(listener, &config) {
        Ok(l) => l,
        Err(e) => {
            report_failure(config.log.format, &format!("{e}{}", bind_hint(&e)));
            return ExitCode::FAILURE;
        }
    };
    let log_format = config.log.format;
    let result = actix_rt::System::new().block_on(async move {
        // Handlers are installed before the broker starts, so a signal
        // that arrives while it starts stops it cleanly.
        let shutdown = shutdown_signal();
        let reload = reload_signal();
        wharf::serve(listeners, config, shutdown, reload).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(wharf::Error::Config(e)) => {
            report_failure(log_format, &format!("invalid configuration: {e}"));
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            report_failure(log_format, &e.to_string());
            ExitCode::FAILURE
        }
    }
}

/// `addr` (a `HOST:PORT` listener address) with port 0; `None` when it
/// is empty (no listener) or not an address.
fn with_port_zero(addr: &str) -> Option<String> {
    let mut parsed: SocketAddr = addr.parse().ok()?;
    parsed.set_port(0);
    Some(parsed.to_string())
}

/// What to do about a listener that could not be bound.
fn bind_hint(e: &wharf::Error) -> &'static str {
    match e {
        wharf::Error::Bind {
            key: "mqtt.tcp_bind",
            ..
        } => {
            " (an MQTT broker such as Mosquitto often holds 1883: move Wharf's MQTT listener \
             with --mqtt-bind 127.0.0.1:1884, turn it off with --mqtt-bind \"\", or set \
             [mqtt] tcp_bind in the config)"
        }
        wharf::Error::Bind {
            key: "mqtt.tls_bind",
            ..
        } => " (move it, or turn it off with tls_bind = \"\", under [mqtt] in the config)",
        _ => "",
    }
}

/// Says once why the broker could not start or run: on stderr as text,
/// or as an ERROR event when the logs are JSON (a log collector reads
/// those; a person reads the former).
fn report_failure(format: LogFormat, message: &str) {
    match format {
        LogFormat::Json => tracing::error!("{message}"),
        LogFormat::Text => eprintln!("wharf: {message}"),
    }
}

/// Turns transparent huge pages off for this process (see `[server]
/// huge_pages`); inherited by every thread started after it.
fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        tracing::warn!("cannot turn transparent huge pages off: {e}");
    }
}

/// Raises this process's soft limit on open files to its hard limit: the
/// soft limit is often 1,024, far below `[server] max_connections`, and a
/// broker that runs out of descriptors refuses connections it was
/// configured to take. Says so when even the hard limit is too low.
fn raise_file_limit(max_connections: usize) {
    #[cfg(unix)]
    {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            return;
        };
        if soft < hard {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, "cannot raise the open-file limit: {e}");
                return;
            }
        }
        // A connection takes one descriptor; the store, listeners and
        // threads take a few dozen more.
        let wanted = max_connections as u64 + 64;
        // Warned when the operator asked for more connections than the
        // limit allows; with the default max_connections (above some
        // systems' limits) a default start says it only at DEBUG.
        if hard < wanted {
            let past = hard.saturating_sub(64);
            if max_connections != wharf::config::ServerConfig::default().max_connections {
                tracing::warn!(
                    limit = hard,
                    max_connections,
                    "the open-file limit is below [server] max_connections: connections past \
                     about {past} will be refused (raise it with ulimit -n or LimitNOFILE=)"
                );
            } else {
                tracing::debug!(
                    limit = hard,
                    max_connections,
                    "the open-file limit is below the default max_connections: connections past \
                     about {past} will be refused (raise it with ulimit -n or LimitNOFILE=)"
                );
            }
        }
    }
}

fn config_error(e: &wharf::config::ConfigError) -> ExitCode {
    eprintln!("wharf: invalid configuration: {e}");
    ExitCode::from(EXIT_CONFIG)
}

fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    // RUST_LOG wins over the config file, as operators expect.
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match config.log.format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Installs SIGINT and SIGTERM handlers now (inside the runtime) and
/// returns what completes on the first of them.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use actix_rt::signal::unix::{SignalKind, signal};
    let watch = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("cannot watch {name}: {e}");
            None
        }
    };
    let mut term = watch(SignalKind::terminate(), "SIGTERM");
    let mut int = watch(SignalKind::interrupt(), "SIGINT");
    async move {
        tokio::select! {
            _ = next_signal(&mut term) => {}
            _ = next_signal(&mut int) => {}
        }
        tracing::info!("signal received");
    }
}

/// A message per SIGHUP: reload what can be reloaded (JWT keys).
fn reload_signal() -> tokio::sync::mpsc::Receiver<()> {
    use actix_rt::signal::unix::{SignalKind, signal};
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            actix_rt::spawn(async move {
                while hup.recv().await.is_some() {
                    tracing::info!("SIGHUP: reloading");
                    // A reload already pending covers this one too.
                    let _ = tx.try_send(());
                }
            });
        }
        Err(e) => tracing::warn!("cannot watch SIGHUP: {e}"),
    }
    rx
}

/// The next delivery of a watched signal; never, if it is not watched.
async fn next_signal(s: &mut Option<actix_rt::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}
