//! courier's data plane: the main thread, the workers, listeners, the HTTP
//! connection manager, the router and the admin endpoint.
//!
//! The main thread owns what is not per request (admin, signals, config
//! updates); each worker is an OS thread with its own current-thread tokio
//! runtime and its own `SO_REUSEPORT` sockets, so a connection lives its whole
//! life on one worker and nothing on the request path takes a lock.

mod accept_batch;
mod access_log;
mod admin;
mod codec_error;
mod conn_idle;
mod conn_manager;
mod ext_authz_client;
mod filter_body;
mod filter_chain;
#[doc(hidden)]
pub mod fuzzing;
mod grpc_timeout;
mod h2_flood;
mod heap_trim;
mod http_filters;
mod jwks_fetch;
mod l4;
mod listener;
mod listeners;
mod local_reply;
mod maybe_tls;
mod overload;
mod park;
mod path_normalize;
mod request_limits;
mod router;
mod sanitize;
mod serve_check;
mod serve_conn;
mod serve_h1;
mod server;
mod stats;
mod tls;
mod upstream;
mod wake_gate;
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
