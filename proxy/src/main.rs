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
    init_logging(&cli);
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
    match cli.mode {
        Mode::Validate => {
            let what = cli
                .config_path
                .as_ref()
                .map_or_else(|| "--config-yaml".to_string(), |p| p.display().to_string());
            println!("configuration '{what}' OK");
            ExitCode::SUCCESS
        }
        Mode::Serve => courier::serve(bootstrap, &cli.serve_options()),
    }
}

fn init_logging(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.log_level.directive()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
