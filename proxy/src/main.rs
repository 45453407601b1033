//! The `courier` binary: Envoy's command line over courier's config loader and data plane.

mod cli;

use clap::Parser;
use cli::{Cli, Mode};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; anything else is (exit 1, as Envoy).
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let log_control = match init_logging(&cli) {
        Ok(control) => control,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let bootstrap = match courier_config::load_bootstrap(&cli.load_options()) {
        Ok(b) => b,
        Err(errors) => {
            let what = cli
                .config_path
                .as_ref()
                .map_or_else(|| "--config-yaml".to_string(), |p| p.display().to_string());
            eprintln!(
                "error: invalid configuration '{what}': {} error(s)",
                errors.errors.len()
            );
            for e in &errors.errors {
                eprintln!("error: {e}");
            }
            return ExitCode::from(1);
        }
    };
    if let Some(format) = &bootstrap.application_log_format {
        if cli.log_format.is_some() {
            eprintln!(
                "error: Only one of ApplicationLogConfig.log_format or CLI option --log-format can be specified."
            );
            return ExitCode::from(1);
        }
        // As Envoy: from here on (the bootstrap's loading logged in the default).
        courier::app_log::set_format(format);
    }
    match cli.mode {
        Mode::Validate => {
            let what = cli
                .config_path
                .as_ref()
                .map_or_else(|| "--config-yaml".to_string(), |p| p.display().to_string());
            // Valid is not enough: a config this build would refuse to serve is
            // not OK either (Envoy's validate answers whether Envoy can run it).
            if let Err(problems) = courier::unservable(&bootstrap) {
                eprintln!(
                    "error: the configuration '{what}' is valid, but courier cannot serve it yet:"
                );
                for p in problems {
                    eprintln!("error: {p}");
                }
                return ExitCode::from(1);
            }
            println!("configuration '{what}' OK");
            ExitCode::SUCCESS
        }
        Mode::Serve => {
            let mut opts = cli.serve_options();
            opts.log_control = log_control;
            // The same sources again, untranslated, for /config_dump (the first
            // load succeeded, so this one does too).
            opts.bootstrap_dump = courier_config::load_bootstrap_proto(&cli.load_options())
                .ok()
                .and_then(|p| courier::bootstrap_dump(&p).ok());
            courier::serve(bootstrap, &opts)
        }
    }
}

/// Logs as Envoy does: to stderr (or `--log-path`) in `--log-format`, at
/// `--log-level` with `--component-log-level` (or `RUST_LOG`), behind a
/// reload layer so admin's `/logging` can change the level.
fn init_logging(cli: &Cli) -> Result<Option<courier::LogControl>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, reload};
    let directives = cli.log_filter()?;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&directives))
        .map_err(|e| e.to_string())?;
    if let Some(format) = &cli.log_format {
        courier::app_log::set_format(format);
    }
    courier::app_log::set_escaped(cli.log_format_escaped);
    let layer = match &cli.log_path {
        Some(path) => courier::app_log::Layer::file(path)
            .map_err(|e| format!("Failed to open log-file '{}': {e}", path.display()))?,
        None => courier::app_log::Layer::stderr(),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let Ok(()) = tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init()
    else {
        return Ok(None);
    };
    Ok(Some(courier::LogControl(std::sync::Arc::new(
        move |level: &str| {
            let filter = EnvFilter::try_new(level).map_err(|e| e.to_string())?;
            handle.reload(filter).map_err(|e| e.to_string())
        },
    ))))
}
