//! courier's data plane: the main thread, the workers, listeners, the HTTP
//! connection manager, the router and the admin endpoint.
//!
//! The main thread owns what is not per request (admin, signals, config
//! updates); each worker is an OS thread with its own current-thread tokio
//! runtime and its own `SO_REUSEPORT` sockets, so a connection lives its whole
//! life on one worker and nothing on the request path takes a lock.

// The request path's stages, top to bottom (docs/life-of-a-request.md): a
// module imports only from stages below it and from the leaf and support
// modules (checked by scripts/check-layers.py).
mod accept;
mod access_log;
mod attempt;
mod codec;
mod conn_manager;
mod filter_chain;
mod l4;
mod request;
mod router;
mod trace;
mod udp;
mod upstream;

// Support, below every stage.
pub mod app_log;
mod heap_trim;
mod log_time;
mod maybe_tls;
mod overload;
mod stats;
mod tls;

// Wiring: the threads, admin and xDS, which see everything.
mod admin;
#[doc(hidden)]
pub mod fuzzing;
mod serve_check;
mod server;
mod worker;
mod xds;

use std::process::ExitCode;
use std::time::Duration;

/// How to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Worker threads.
    pub workers: usize,
    /// How long draining connections get on shutdown (`--drain-time-s`).
    pub drain_time: Duration,
    /// Where to write admin's bound address (`--admin-address-path`).
    pub admin_address_path: Option<std::path::PathBuf>,
    /// The bootstrap as loaded, in `/config_dump`'s shape ([`bootstrap_dump`]).
    pub bootstrap_dump: Option<serde_json::Value>,
    /// Changes the process's log level at run time (admin's `/logging`).
    pub log_control: Option<LogControl>,
}

/// The bootstrap's part of admin's `/config_dump` (Envoy's `ConfigDump` of
/// the static resources, secrets redacted), built once at start so the proto
/// and its descriptors need not be kept.
pub fn bootstrap_dump(
    bootstrap: &prost_reflect::DynamicMessage,
) -> Result<serde_json::Value, String> {
    admin::config_dump::dump(bootstrap)
}

/// Sets the log level (a `tracing` filter directive such as `debug`); the binary
/// builds it over its subscriber's reload handle.
#[derive(Clone)]
pub struct LogControl(pub std::sync::Arc<SetLevel>);

/// What [`LogControl`] calls: sets a filter directive, or says why it cannot.
pub type SetLevel = dyn Fn(&str) -> Result<(), String> + Send + Sync;

impl std::fmt::Debug for LogControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogControl")
    }
}

/// What in `bootstrap` this build validates but cannot serve yet (each with
/// its path); `--mode serve` refuses such a config and `--mode validate` says so.
pub fn unservable(bootstrap: &courier_config::Bootstrap) -> Result<(), Vec<String>> {
    serve_check::check(bootstrap)
}

/// Serves `bootstrap` until SIGTERM/SIGINT or `/quitquitquit`, then drains and
/// returns the process's exit code.
pub fn serve(bootstrap: courier_config::Bootstrap, opts: &ServeOptions) -> ExitCode {
    if let Err(problems) = serve_check::check(&bootstrap) {
        eprintln!("error: the configuration is valid, but courier cannot serve it yet:");
        for p in problems {
            eprintln!("error: {p}");
        }
        return ExitCode::from(1);
    }
    match server::run(bootstrap, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
